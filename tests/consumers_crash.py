"""The crash the reference README describes for the ``consumers`` store's ``afterCrash`` view, redone
on a copy: the last 1/8 of the messages zeroed from a message boundary to the end of that CommitLog
file, and an ``abort`` file."""
from __future__ import annotations

import shutil
from pathlib import Path

from rmqtool.io.store import Store
from rmqtool.records.scan import RecordBatch, walk_store


def message_offsets(root: Path) -> list[int]:
    store = Store(root)
    out = []
    for item in walk_store(store):
        if isinstance(item, RecordBatch):
            out.extend(item.file_base + int(p) for p in item.position)
    return out


def crash_copy(src: Path, dest: Path) -> dict:
    """Copy ``src`` to ``dest`` and crash it; what was cut, in the answers' ``cut`` words."""
    shutil.copytree(src, dest)
    offsets = message_offsets(dest)
    keep = len(offsets) - len(offsets) // 8
    cut = offsets[keep]
    store = Store(dest)
    seg, pos = store.locate(cut)
    size = store.commitlog.file_size
    with open(seg.path, "r+b") as fh:
        fh.seek(pos)
        fh.write(bytes(size - pos))
    (dest / "abort").write_bytes(b"")
    return {"cutAtPhyOffset": cut, "file": seg.name, "zeroedFrom": pos, "messagesBeforeCut": keep,
            "messagesLost": len(offsets) - keep}
