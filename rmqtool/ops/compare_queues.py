"""`compare --queues`: two ConsumeQueue sets unit by unit — a RocksDB ConsumeQueue against a
file-based one (the dual-write migration), a rebuilt tree against the broker's, two replicas'
queues. Each side is a store root (file or RocksDB queues) or a bare ``consumequeue`` tree
(``rebuild consumequeue --output DIR``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from formats.consumequeue import CQ_UNIT_SIZE
from rmqtool.io.consumequeue import read_units
from rmqtool.io.segments import SegmentQueue
from rmqtool.io import storage

#: queues listed with their first difference, at most
LISTED = 100


@dataclass
class QueueDiff:
    topic: str
    queue_id: int
    status: str                      # only-a / only-b / differ
    first_queue_offset: int | None = None
    a: list | None = None            # (commitlog offset, size, tagsCode) there
    b: list | None = None
    units_a: int = 0
    units_b: int = 0


@dataclass
class QueueComparison:
    a: str
    b: str
    queues_a: int = 0
    queues_b: int = 0
    units_a: int = 0
    units_b: int = 0
    same_queues: int = 0
    differing: int = 0
    diffs: list = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.differing == 0

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["diffs"] = [dict(x.__dict__) for x in self.diffs]
        d["identical"] = self.identical
        return d


def queue_units(side) -> dict:
    """(topic, queue id) -> (queue offsets, units) of a store (``io.store.Store``) or a bare
    ``consumequeue`` tree (a path)."""
    out = {}
    if isinstance(side, (str, Path)):
        root = storage.path(side)
        for qdir in sorted(root.glob("*/*")):
            if qdir.is_dir() and re.fullmatch(r"-?\d+", qdir.name):
                q = SegmentQueue.discover([qdir], "consumequeue", None, CQ_UNIT_SIZE)
                u = read_units(qdir.parent.name, int(qdir.name), q)
                out[(qdir.parent.name, int(qdir.name))] = u
        return out
    for ref in side.queues():
        out[(ref.topic, ref.queue_id)] = read_units(ref.topic, ref.queue_id, side.queue(ref.topic, ref.queue_id))
    return out


def _rows(u) -> dict:
    real = ~u.pre_blank
    units = u.units[real]
    return {int(q): (int(x["commitlog_offset"]), int(x["size"]), int(x["tags_code"]))
            for q, x in zip(u.queue_offset[real], units)}


def compare_queues(side_a, side_b, name_a: str, name_b: str) -> QueueComparison:
    qa, qb = queue_units(side_a), queue_units(side_b)
    c = QueueComparison(name_a, name_b, len(qa), len(qb))
    for key in sorted(set(qa) | set(qb)):
        ra = _rows(qa[key]) if key in qa else None
        rb = _rows(qb[key]) if key in qb else None
        c.units_a += len(ra or {})
        c.units_b += len(rb or {})
        if ra == rb:
            c.same_queues += 1
            continue
        c.differing += 1
        if len(c.diffs) >= LISTED:
            continue
        if ra is None or rb is None:
            c.diffs.append(QueueDiff(key[0], key[1], "only-b" if ra is None else "only-a",
                                     units_a=len(ra or {}), units_b=len(rb or {})))
            continue
        first = min(q for q in set(ra) | set(rb) if ra.get(q) != rb.get(q))
        c.diffs.append(QueueDiff(key[0], key[1], "differ", first, list(ra[first]) if first in ra else None,
                                 list(rb[first]) if first in rb else None, len(ra), len(rb)))
    return c
