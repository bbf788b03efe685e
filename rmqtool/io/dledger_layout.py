"""Where a DLedger-mode store keeps its commit log (docs/format-dledger.md).

With ``enableDLegerCommitLog=true`` there is no ``commitlog/``: the broker's DLedger member
``<selfId>`` keeps its entries in ``<store>/dledger-<selfId>/data/``, each entry a header of
``formats.dledger.EntryHeader`` followed by one MESSAGE record. The ConsumeQueues, IndexFiles
and checkpoint stay in the store root and hold the records' offsets in those data files.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath

from formats import dledger as dl
from formats.dledger import MEMBER_DIR_PREFIX
from rmqtool.io import storage
from rmqtool.io import properties
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io.segments import SegmentQueue

DATA_DIR = "data"
#: the most of a member's ``checkpoint``/``currterm`` (a few ``key=value`` lines) rmqtool reads
MAX_PROPERTIES_SIZE = 1 << 20
INDEX_DIR = "index"


def members(root: Path) -> list[Path]:
    """The DLedger member directories (``dledger-<selfId>/`` holding ``data/``) of a store root."""
    try:
        names = sorted(storage.listdir(root))
    except OSError:
        return []
    return [root / n for n in names
            if n.startswith(MEMBER_DIR_PREFIX) and (root / n / DATA_DIR).is_dir()
            and not (root / n).is_symlink()]


def is_entry_file(path: Path | str) -> bool:
    """A file of a DLedger member's ``data/`` directory: its records sit inside entries."""
    p = PurePosixPath(str(path).split("://", 1)[-1])
    return p.parent.name == DATA_DIR and p.parent.parent.name.startswith(MEMBER_DIR_PREFIX)


def read_properties(path: Path) -> dict[str, str] | None:
    """A DLedger ``checkpoint``/``currterm`` file's settings; None when the file is missing."""
    return properties.read_properties(path, MAX_PROPERTIES_SIZE, "DLedger properties file")


def committed_index(member: Path) -> int | None:
    """The member's committed entry index from its ``checkpoint`` (None: no checkpoint or no value)."""
    values = read_properties(member / "checkpoint")
    try:
        return int(values["committedIndex"]) if values else None
    except (KeyError, ValueError):
        return None


def index_queue(member: Path) -> SegmentQueue:
    """The member's entry index files (``index/``: one ``formats.dledger.IndexUnit`` per entry index)."""
    return SegmentQueue.discover([member / INDEX_DIR], "dledger-index", None, dl.INDEX_UNIT_SIZE)


def read_index_units(queue: SegmentQueue, first: int, count: int):
    """Index units for entry indexes [first, first + count); zeros where no file holds one
    (as DLedger reads a unit past an index file's data: the mapped file is zero-filled)."""
    import numpy as np
    out = np.zeros(count, dtype=dl.INDEX_UNIT_DTYPE)
    if first < 0 or not queue.files:
        return out
    raw = out.view(np.uint8)
    lo, hi = first * dl.INDEX_UNIT_SIZE, (first + count) * dl.INDEX_UNIT_SIZE
    pos = lo
    while pos < hi:
        hit = queue.locate(pos)
        end = min(hi, (pos // queue.file_size + 1) * queue.file_size)
        if hit is not None:
            seg, at = hit
            with ReadOnlyFile(seg.path) as fh:
                data = fh.read(at, min(end - pos, max(0, fh.size() - at)), exact=False)
            raw[pos - lo:pos - lo + len(data)] = np.frombuffer(data, np.uint8)
        pos = end
    return out
