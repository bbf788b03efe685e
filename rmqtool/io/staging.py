"""Staging: where engine tasks leave their results and the driver takes them back one at a time.

A stage whose output is large (verify's per-batch record columns) writes each part here
and returns only a short reference; the driver reads a part when it needs it and removes
it at once, so its memory holds one part at a time whatever the size of the store. The
location is a directory every task and the driver can reach: a temporary directory on
this machine (the local engine, a Spark master on this machine), or a shared path or a
storage URI given by the user (a cluster). Every run gets a directory of its own inside
it, removed by ``close``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid

from rmqtool.errors import UnreadableError, UsageError, writing_to
from rmqtool.io.storage import is_uri


class Staging:
    """A run directory for parts; pickled into the tasks, which call ``put`` (and ``read`` their input)."""

    def __init__(self, location: str | None = None):
        self.owned = location is None
        if location is None:
            self.root = tempfile.mkdtemp(prefix="rmqtool-staging-")
        else:
            self.root = _join(location, f"rmqtool-staging-{uuid.uuid4().hex}")
        self._made = self.owned

    # --- tasks -------------------------------------------------------------------------------
    def put(self, data: bytes) -> str:
        """Write one part and return its reference (written whole before the name appears)."""
        name = uuid.uuid4().hex
        final = _join(self.root, name)
        if is_uri(self.root):
            from rmqtool.io import storage
            storage.write_bytes(final, data)
            return name
        os.makedirs(self.root, exist_ok=True)
        tmp = final + ".part"
        with writing_to(tmp), open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, final)
        return name

    # --- driver ------------------------------------------------------------------------------
    def take(self, ref: str) -> bytes:
        """Read a part and remove it."""
        data = self.read(ref)
        self.discard(ref)
        return data

    def read(self, ref: str) -> bytes:
        """Read a part and leave it (a task's input: a re-run task reads it again)."""
        path = _join(self.root, ref)
        try:
            if is_uri(self.root):
                from rmqtool.io import storage
                data = storage.read_bytes(path)
            else:
                with open(path, "rb") as fh:
                    data = fh.read()
        except FileNotFoundError:
            raise UnreadableError("staged part missing (was the staging location cleaned while "
                                  "the run used it?)", path) from None
        return data

    def discard(self, ref: str) -> None:
        path = _join(self.root, ref)
        if is_uri(self.root):
            from rmqtool.io import storage
            storage.remove(path)
            return
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def discard_rows(self, table) -> None:
        """Remove the parts referenced by a stage's output rows (column ``ref``) that an engine
        threw away (a task re-run from a corrected start)."""
        for ref in table.column("ref").to_pylist():
            if ref is not None:
                self.discard(ref)

    def close(self) -> None:
        """Remove the run directory and whatever parts are left in it."""
        if is_uri(self.root):
            from rmqtool.io import storage
            storage.remove_tree(self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _join(location: str, name: str) -> str:
    if location.startswith("file://"):
        location = location[len("file://"):]
    return location.rstrip("/") + "/" + name


def check_location(location: str) -> str:
    """A user-given staging location, checked before any task runs."""
    if not location:
        raise UsageError("--staging expects a directory or a storage URI")
    if not is_uri(location):
        local = location[len("file://"):] if location.startswith("file://") else location
        if not os.path.isdir(local):
            raise UsageError(f"--staging {location}: not a directory")
    return location
