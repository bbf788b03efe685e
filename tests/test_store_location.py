"""A store location is parsed once, where it enters (the CLI, ``Store``, output and staging
options): every layer below takes the resolved object (``pathlib.Path`` or ``RemotePath``) and
decides by its type. Run in-process through the CLI on a local store and on an S3 store, with
``storage.is_uri`` counted: the string parses come only from the boundary modules and their
number does not grow with the number of tasks; no URI string reaches the file reads."""
from __future__ import annotations

import logging
import sys

import pytest

from conftest import reference_store, run_cli

import rmqtool.io.fileio as fileio
import rmqtool.io.storage as storage

#: the modules where a location typed by a user is parsed (once per option given)
BOUNDARY = ("rmqtool.cli.", "rmqtool.io.storage", "rmqtool.io.store", "rmqtool.io.outputdir",
            "rmqtool.io.staging", "rmqtool.ops.export", "rmqtool.ops.rebuild")


class Parses:
    """``storage.is_uri`` calls on strings, by calling module; URI strings handed to file reads."""

    def __init__(self, monkeypatch):
        self.callers: list[str] = []
        self.unresolved: list[str] = []
        real_is_uri = storage.is_uri

        def counted(value):
            if isinstance(value, str):
                self.callers.append(sys._getframe(1).f_globals.get("__name__", "?"))
            return real_is_uri(value)
        import rmqtool.engines.base, rmqtool.ops.export, rmqtool.ops.rebuild, rmqtool.ops.verify.runner  # noqa: F401
        for name, mod in list(sys.modules.items()):      # also where it was imported by name
            if name.startswith("rmqtool") and getattr(mod, "is_uri", None) is real_is_uri:
                monkeypatch.setattr(mod, "is_uri", counted)

        def watch(fn):
            def wrapped(path, *a, **kw):
                if isinstance(path, str) and real_is_uri(path):
                    self.unresolved.append(f"{fn.__name__}({path})")
                return fn(path, *a, **kw)
            return wrapped
        for name in ("file_size", "regular_size"):
            monkeypatch.setattr(fileio, name, watch(getattr(fileio, name)))
        init = fileio.ReadOnlyFile.__init__

        def opened(fh, path, *a, **kw):
            if isinstance(path, str) and real_is_uri(path):
                self.unresolved.append(f"ReadOnlyFile({path})")
            init(fh, path, *a, **kw)
        monkeypatch.setattr(fileio.ReadOnlyFile, "__init__", opened)

    def take(self) -> list[str]:
        out, self.callers = self.callers, []
        return out


def _runs(store: str, out_dir: str) -> dict[str, list[str]]:
    """argv per command, each run twice: one task per file, and many small tasks."""
    runs = {}
    for split in ("1073741824", "65536"):
        base = ["--jobs", "1", "--split-size", split]
        runs[f"rebuild-all-{split}"] = ["rebuild", "all", store, "--output", f"{out_dir}/r{split}", *base,
                                        "-f", "json"]
        runs[f"verify-deep-{split}"] = ["verify", store, "--level", "deep", *base, "-f", "json"]
        runs[f"export-{split}"] = ["export", store, "--to", f"{out_dir}/e{split}.jsonl", *base]
    return runs


def _check(parses: Parses, store: str, out_dir: str) -> None:
    counts = {}
    for case, argv in _runs(store, out_dir).items():
        r = run_cli(*argv)
        assert r.code in (0, 1), (case, r.err)
        callers = parses.take()
        outside = sorted({c for c in callers if not c.startswith(BOUNDARY)})
        assert not outside, f"{case}: a store string parsed below the boundary, in {outside}"
        counts[case] = len(callers)
    assert not parses.unresolved, parses.unresolved[:5]
    for cmd in ("rebuild-all", "verify-deep", "export"):
        assert counts[f"{cmd}-65536"] == counts[f"{cmd}-1073741824"], (cmd, counts)
        assert counts[f"{cmd}-65536"] <= 8, (cmd, counts)


def test_local_store_parsed_once(monkeypatch, tmp_path):
    parses = Parses(monkeypatch)
    _check(parses, str(reference_store("basic")), str(tmp_path))


def test_s3_store_parsed_once(monkeypatch, tmp_path):
    pytest.importorskip("pyarrow.fs")
    pytest.importorskip("moto")
    from s3server import S3Server
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    try:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv(storage.ENV_OPTIONS, raising=False)   # put back after the test
        storage.set_options({})                # no filesystem cached for another test's server
        server.bucket("fleet")
        server.upload(reference_store("basic"), "fleet", "located")
        parses = Parses(monkeypatch)
        _check(parses, "s3://fleet/located", str(tmp_path))
    finally:
        server.stop()
        storage.set_options({})                # nor this server's for the next test
