"""`compare`: two replicas of one broker group, record by record, to where they diverge.

DLedger-mode stores (two members of one Raft group) are compared entry by entry: entry
index, term, position, size and the bytes of the record each entry carries. Classic stores
(a master and its slave) are compared record by record: offset, size and bytes. The walk is
the one every command uses, streamed in lockstep, so memory does not grow with the stores.

The report gives the first difference (or that one log is a prefix of the other), what each
side holds past it, and, for DLedger members, which log a newly elected leader keeps: Raft
elects the candidate whose last entry has the higher term, then the higher index, and the
other member truncates its log back to where the two agree. Classic stores of controller mode
(epoch files in the root) get the epoch view too: ``ops.compare_epochs``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from formats import dledger as dl
from rmqtool.kernels.crc import crc32_spans
from rmqtool.kernels.gather import strided_view
from rmqtool.records.scan import RecordBatch, walk_progress, walk_store

KEYS = ("phy_offset", "size", "crc", "index", "term")


def record_keys(store, walked=None):
    """Per batch: every record's offset, size, crc32 of its bytes, and (DLedger) entry index and term.
    ``walked(path, position)``: told where each batch ends (``scan.walk_progress``)."""
    for item in walk_store(store, check_crc=False, stop_at_break=True):
        if not isinstance(item, RecordBatch) or not len(item):
            continue
        if walked is not None:
            walked(item.path, item.buf_base + len(item.buf))
        at = item.position - item.buf_base
        keys = {"phy_offset": item.phy_offset.astype(np.int64), "size": item.size.astype(np.int64),
                "crc": crc32_spans(item.buf, at, item.size).astype(np.int64)}
        if store.dledger:
            heads = strided_view(item.buf, dl.ENTRY_HEADER_DTYPE)[at - dl.ENTRY_BODY_OFFSET]
            keys["index"], keys["term"] = heads["index"].astype(np.int64), heads["term"].astype(np.int64)
        else:
            keys["index"] = keys["term"] = np.full(len(item), -1, dtype=np.int64)
        yield keys


@dataclass
class Side:
    store: str
    dledger: bool
    records: int = 0
    past: int = 0                          # records after the last one both agree on
    last_index: int | None = None
    last_term: int | None = None
    end_offset: int | None = None          # end of its last record
    first_past: dict | None = None         # its first record after the agreement


@dataclass
class Comparison:
    a: Side
    b: Side
    agreed: int = 0                        # records equal on both sides, from the start
    agreed_end: int | None = None          # offset after the last of them
    agreed_index: int | None = None        # DLedger: the entry index of the last of them
    status: str = "identical"              # identical | prefix | diverged
    differs_by: list[str] = field(default_factory=list)   # the fields of the first difference
    keeps: str | None = None               # DLedger: "a", "b" or "either"
    reason: str = ""
    epochs: dict | None = None             # controller mode: ops.compare_epochs.epoch_view

    @property
    def identical(self) -> bool:
        return self.status == "identical"

    def as_dict(self) -> dict:
        d = asdict(self)
        if d["epochs"] is None:              # stores without epoch files: the report as it always was
            del d["epochs"]
        return d


class _Stream:
    """Records of one store, taken in any amounts across batch boundaries."""

    def __init__(self, store, walked=None):
        self.it = record_keys(store, walked)
        self.buf = {k: np.zeros(0, np.int64) for k in KEYS}
        self.done = False

    def fill(self) -> int:
        while not len(self.buf["phy_offset"]) and not self.done:
            nxt = next(self.it, None)
            if nxt is None:
                self.done = True
            else:
                self.buf = nxt
        return len(self.buf["phy_offset"])

    def take(self, n: int) -> dict:
        out = {k: v[:n] for k, v in self.buf.items()}
        self.buf = {k: v[n:] for k, v in self.buf.items()}
        return out


def _row(keys: dict, i: int, dledger: bool) -> dict:
    row = {k: int(keys[k][i]) for k in ("phy_offset", "size")}
    if dledger:
        row.update(index=int(keys["index"][i]), term=int(keys["term"][i]))
    return row


def _note(side: Side, keys: dict, n: int) -> None:
    if n:
        side.records += n
        side.end_offset = int(keys["phy_offset"][n - 1] + keys["size"][n - 1])
        side.last_index, side.last_term = int(keys["index"][n - 1]), int(keys["term"][n - 1])


def _lockstep_progress(stores, progress) -> list:
    """One ``walked(path, position)`` per store (``scan.walk_progress``), reporting ``progress`` as the
    bytes both walks have done together, of both stores' files."""
    if progress is None:
        return [None] * len(stores)
    totals = [sum(seg.size for seg in s.commitlog.files) for s in stores]
    done = [0] * len(stores)

    def side(i: int):
        def report(walked: int, _total: int) -> None:
            done[i] = walked
            progress(sum(done), sum(totals))
        return walk_progress([stores[i]], report)
    return [side(i) for i in range(len(stores))]


def compare_stores(store_a, store_b, progress=None) -> Comparison:
    """Walk both stores in lockstep to the first record they disagree on, then to their ends.
    ``progress(done, total)``: bytes walked of both stores' CommitLog files."""
    if store_a.dledger != store_b.dledger:
        from rmqtool.errors import UsageError
        raise UsageError("one store is DLedger-mode and the other is not: compare replicas of one group",
                         store_b.root)
    dledger = store_a.dledger
    a, b = Side(str(store_a.root), dledger), Side(str(store_b.root), dledger)
    result = Comparison(a, b)
    walked_a, walked_b = _lockstep_progress([store_a, store_b], progress)
    sa, sb = _Stream(store_a, walked_a), _Stream(store_b, walked_b)
    fields = ("phy_offset", "size", "crc") + (("index", "term") if dledger else ())
    while True:
        na, nb = sa.fill(), sb.fill()
        n = min(na, nb)
        if n == 0:
            break
        ka, kb = sa.take(n), sb.take(n)
        same = np.ones(n, dtype=bool)
        for f in fields:
            same &= ka[f] == kb[f]
        k = n if same.all() else int(np.argmin(same))
        result.agreed += k
        _note(a, ka, k)
        _note(b, kb, k)
        if k:
            result.agreed_end, result.agreed_index = a.end_offset, (a.last_index if dledger else None)
        if k < n:
            result.status = "diverged"
            result.differs_by = [f for f in fields if ka[f][k] != kb[f][k]]
            a.first_past, b.first_past = _row(ka, k, dledger), _row(kb, k, dledger)
            sa.buf = {f: np.concatenate([ka[f][k:], sa.buf[f]]) for f in KEYS}
            sb.buf = {f: np.concatenate([kb[f][k:], sb.buf[f]]) for f in KEYS}
            break
    for side, stream in ((a, sa), (b, sb)):        # what each holds past the agreement
        while stream.fill():
            keys = stream.take(len(stream.buf["phy_offset"]))
            if side.first_past is None:
                side.first_past = _row(keys, 0, dledger)
            side.past += len(keys["phy_offset"])
            _note(side, keys, len(keys["phy_offset"]))
    if result.status == "identical" and (a.past or b.past):
        result.status = "prefix"
    if dledger:
        last_a = (-1, -1) if a.last_index is None else (a.last_term, a.last_index)
        last_b = (-1, -1) if b.last_index is None else (b.last_term, b.last_index)
        result.keeps = "either" if last_a == last_b else ("a" if last_a > last_b else "b")
        if result.keeps == "either":
            result.reason = "both logs end at the same term and index"
        else:
            w, l = (a, b) if result.keeps == "a" else (b, a)
            since = "the start" if result.agreed_index is None else f"index {result.agreed_index}"
            result.reason = (f"a new leader comes from the log whose last entry has the higher (term, index): "
                             f"({w.last_term}, {w.last_index}) over ({l.last_term}, {l.last_index}); the other "
                             f"member truncates its {l.past} entries after {since} and copies the leader's")
    else:
        from rmqtool.ops.compare_epochs import epoch_view
        result.epochs = epoch_view(store_a, store_b, result)
    return result
