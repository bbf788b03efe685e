"""The simplified store of the "file storage with code" article: layout detection.

A directory holding ``commitLog.txt``, ``consumerQueue.txt`` or ``index.txt`` (and no
RocketMQ ``commitlog/`` directory), or one of those files itself, is this layout.
Byte layouts are in ``formats.simplified``; readers in ``reader``, the writer in
``writer``, dump/locate/query in ``ops``, checks in ``verify``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from formats import simplified as fmt
from rmqtool.errors import StoreLayoutError, UsageError

LAYOUTS = ("auto", "rocketmq", "simplified")


def handles(path) -> bool:
    """True when ``path`` is a simplified store directory or one of its three files."""
    p = Path(path)
    try:
        if p.is_file():
            return p.name in fmt.FILE_NAMES
        if p.is_dir():
            if (p / "commitlog").is_dir():
                return False
            return any((p / name).is_file() for name in fmt.FILE_NAMES)
    except OSError:
        return False
    return False


def use_simplified(path, layout: str = "auto") -> bool:
    """Resolve ``--layout``: auto detects, the others force the choice."""
    if layout not in LAYOUTS:
        raise UsageError(f"--layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if layout == "auto":
        return handles(path)
    return layout == "simplified"


def target_file(path, name: str) -> Path:
    """The file to dump as ``name``: the directory's ``name``, or a file given directly.

    A file named like another of the three kinds is refused rather than misread.
    """
    p = Path(path)
    if p.is_file():
        if p.name in fmt.FILE_NAMES and p.name != name:
            raise UsageError(f"{p.name} is not a {name}; give the directory or {name}", p)
        return p
    return SimplifiedStore.open(p).require(name)


@dataclass
class SimplifiedStore:
    """The directory and which of the three files it has."""
    root: Path

    @classmethod
    def open(cls, path) -> "SimplifiedStore":
        p = Path(path)
        if p.is_file():
            p = p.parent
        if not p.is_dir():
            raise StoreLayoutError("no such directory", path)
        store = cls(p)
        if not any(store.path(name).is_file() for name in fmt.FILE_NAMES):
            raise StoreLayoutError(f"none of {', '.join(fmt.FILE_NAMES)} is here", p)
        return store

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def commitlog_path(self) -> Path:
        return self.path(fmt.COMMITLOG_NAME)

    @property
    def consumer_queue_path(self) -> Path:
        return self.path(fmt.CONSUMER_QUEUE_NAME)

    @property
    def index_path(self) -> Path:
        return self.path(fmt.INDEX_NAME)

    def require(self, name: str) -> Path:
        p = self.path(name)
        if not p.is_file():
            raise StoreLayoutError(f"no {name} in this simplified store", self.root)
        return p
