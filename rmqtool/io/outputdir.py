"""Where `export` writes: a local directory or a prefix on object storage (``--output s3://...``).

Both kinds answer the same few questions and take the same few writes, so the export stage
(run by local workers or Spark executors) does not care which it has. Locally a part is written
to a hidden temporary name and renamed into place; on object storage an object appears whole
when its upload completes, so it is written under its final name. Object stores have no
directories: making one is a no-op there and a "directory" is a key prefix.
"""
from __future__ import annotations

import io
import os
import shutil


class LocalOutput:
    remote = False

    def __init__(self, root: str):
        self.root = root[len("file://"):] if root.startswith("file://") else root

    def join(self, *names: str) -> str:
        return os.path.join(*names)

    def makedirs(self, path: str) -> bool:
        """Make ``path``; True when this call made it."""
        try:
            os.makedirs(path)
            return True
        except FileExistsError:
            return False

    def temporary(self, final: str) -> str:
        d, name = os.path.split(final)
        return os.path.join(d, f".{name}.tmp")

    def open(self, path: str, text: bool):
        return open(path, "w", encoding="utf-8") if text else open(path, "wb")

    def publish(self, tmp: str, final: str) -> None:
        os.replace(tmp, final)

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def remove_dir(self, path: str) -> None:
        try:
            os.rmdir(path)
        except OSError:            # another task wrote there too
            pass

    # the destination as a whole
    def exists(self) -> bool:
        return os.path.exists(self.root)

    def is_dir(self) -> bool:
        return os.path.isdir(self.root)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.root)) if self.is_dir() else []

    def is_child_dir(self, name: str) -> bool:
        p = os.path.join(self.root, name)
        return os.path.isdir(p) and not os.path.islink(p)

    def remove_child(self, name: str) -> None:
        p = os.path.join(self.root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            self.remove(p)

    def create_root(self) -> None:
        os.makedirs(self.root, exist_ok=True)

    def remove_root(self) -> None:
        self.remove_dir(self.root)

    def write_text(self, name: str, text: str) -> None:
        with open(os.path.join(self.root, name), "w", encoding="utf-8") as fh:
            fh.write(text)


class RemoteOutput:
    remote = True

    def __init__(self, root: str):
        from rmqtool.io.storage import RemotePath
        self.root = str(RemotePath(root))

    @staticmethod
    def _p(path: str):
        from rmqtool.io.storage import RemotePath
        return RemotePath(path)

    def join(self, *names: str) -> str:
        return "/".join(n.rstrip("/") for n in names)

    def makedirs(self, path: str) -> bool:
        return False

    def temporary(self, final: str) -> str:
        return final

    def open(self, path: str, text: bool):
        from rmqtool.errors import UnreadableError
        from rmqtool.io.storage import first_line
        p = self._p(path)
        try:
            stream = p.fs.open_output_stream(p.fs_path)
        except OSError as exc:
            raise UnreadableError(f"cannot write: {first_line(exc)}", path) from None
        return io.TextIOWrapper(stream, encoding="utf-8") if text else stream

    def publish(self, tmp: str, final: str) -> None:
        pass

    def remove(self, path: str) -> None:
        from rmqtool.io import storage
        storage.remove(path)

    def remove_dir(self, path: str) -> None:
        pass

    def exists(self) -> bool:
        return bool(self.names())

    def is_dir(self) -> bool:
        return self.exists()

    def names(self) -> list[str]:
        from rmqtool.io import storage
        p = self._p(self.root)
        try:
            return storage.listdir(p) if p.is_dir() else []
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_child_dir(self, name: str) -> bool:
        return self._p(self.root).joinpath(name).is_dir()

    def remove_child(self, name: str) -> None:
        from rmqtool.io import storage
        child = self._p(self.root).joinpath(name)
        if child.is_dir():
            storage.remove_tree(child)
        else:
            storage.remove(child)

    def create_root(self) -> None:
        pass

    def remove_root(self) -> None:
        pass

    def write_text(self, name: str, text: str) -> None:
        from rmqtool.io import storage
        storage.write_bytes(self.join(self.root, name), text.encode("utf-8"))


def output_dir(root: str):
    """The destination named by ``root``: a local directory, or a storage URI's prefix."""
    from rmqtool.io.storage import is_uri
    return RemoteOutput(root) if is_uri(root) else LocalOutput(root)
