"""Read single CommitLog records by offset and test them against a key (format.md §2, §5.3)."""
from __future__ import annotations

import struct

import numpy as np

from formats import commitlog as cl
from rmqtool.errors import RmqError
from rmqtool.fileio import ReadOnlyFile
from rmqtool.scan import RecordBatch, _decode_window

_PREFIX = struct.Struct(">" + "".join(sc.subcon.fmtstr[1:] for sc in cl.RecordPrefix.subcons))
_MIN_MESSAGE = cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 0, 0, 0)
_FIRST_READ = 4096

MATCH_UNIQ = "uniq_key"
MATCH_KEYS = "keys"


class RecordReader:
    """Decodes the MESSAGE that starts at a commitlog offset; files opened once, read with pread."""

    def __init__(self, store):
        self.store = store
        self._files: dict[str, tuple[ReadOnlyFile, int]] = {}

    def close(self) -> None:
        for fh, _ in self._files.values():
            fh.close()
        self._files.clear()

    def _open(self, seg) -> tuple[ReadOnlyFile, int]:
        key = str(seg.path)
        if key not in self._files:
            fh = ReadOnlyFile(seg.path)
            self._files[key] = (fh, fh.size())     # bounded by the size seen first
        return self._files[key]

    def read(self, offset: int) -> RecordBatch | None:
        """A one-record batch, or None when no complete, well-formed MESSAGE starts there."""
        if offset < 0:
            return None
        hit = self.store.locate(offset)
        if hit is None:
            return None
        seg, pos = hit
        try:
            fh, size = self._open(seg)
            if pos + _PREFIX.size > size:
                return None
            window = fh.read(pos, min(_FIRST_READ, size - pos), exact=False)
            if len(window) < _PREFIX.size:
                return None
            total, magic = _PREFIX.unpack_from(window)
            if magic not in cl.MESSAGE_MAGICS or total < _MIN_MESSAGE or pos + total > size:
                return None
            if total > len(window):
                window = fh.read(pos, total, exact=False)
                if len(window) < total:
                    return None
        except RmqError:
            return None          # the file vanished or shrank: nothing to confirm
        batch, bad = _decode_window(window[:total], pos, str(seg.path), seg.start,
                                    np.zeros(1, dtype=np.int64), False)
        if bad is not None or len(batch) != 1:
            return None
        return batch


def is_rollback(batch: RecordBatch, i: int) -> bool:
    return cl.transaction_type(int(batch.sys_flag[i])) == cl.TRANSACTION_ROLLBACK_TYPE


def match_kind(batch: RecordBatch, i: int, key: str, topic: str | None, uniq_only: bool = False,
               rollback: bool = False) -> str | None:
    """How record ``i`` carries ``key`` as the broker indexes it: its UNIQ_KEY or a KEYS token.

    ROLLBACK records are never indexed by the broker and match only with ``rollback``.
    """
    if not rollback and is_rollback(batch, i):
        return None
    if topic is not None and batch.topic(i) != topic:
        return None
    uniq = batch.text("uniq", i)
    if uniq is not None and uniq == key:
        return MATCH_UNIQ
    if not uniq_only:
        keys = batch.text("keys", i)
        if keys and key in cl.split_keys(keys):
            return MATCH_KEYS
    return None


def scan_batch(batch: RecordBatch, key: str, topic: str | None, begin: int, end: int,
               uniq_only: bool = False, rollback: bool = False) -> list[tuple[int, str]]:
    """(row, match kind) of every record of a batch that carries ``key`` in [begin, end].

    Vectorized prefilter on bytes (UNIQ_KEY equal, or the key as a space-delimited token
    inside KEYS), then the exact string test of ``match_kind`` on the few survivors.
    """
    n = len(batch)
    if n == 0 or not key:
        return []
    kb = key.encode("utf-8")
    ts = batch.store_timestamp
    ok = (ts >= begin) & (ts <= end)
    if topic is not None:
        tb = topic.encode("utf-8")
        ok &= _spans_equal(batch.buf, batch.topic_start, batch.topic_len, tb)
    if not ok.any():
        return []
    cand = ok & _spans_equal(batch.buf, batch.uniq_start, batch.uniq_len, kb)
    if not uniq_only and b" " not in kb:
        if "\ufffd" in key:      # may match through UTF-8 replacement: test every record
            cand |= ok & (batch.keys_len > 0)
        else:
            cand |= ok & _token_rows(batch, kb)
    rows = np.flatnonzero(cand)
    out = []
    for i in rows.tolist():
        kind = match_kind(batch, i, key, topic, uniq_only, rollback)
        if kind:
            out.append((i, kind))
    return out


def _spans_equal(buf: np.ndarray, start: np.ndarray, length: np.ndarray, needle: bytes) -> np.ndarray:
    same = length == len(needle)
    rows = np.flatnonzero(same)
    if len(rows) and len(needle):
        window = buf[start[rows][:, None] + np.arange(len(needle))]
        same[rows] = (window == np.frombuffer(needle, np.uint8)).all(axis=1)
    return same


def _token_rows(batch: RecordBatch, kb: bytes) -> np.ndarray:
    """Rows whose KEYS span holds ``kb`` delimited by its ends or spaces."""
    rows = np.zeros(len(batch), dtype=bool)
    has = np.flatnonzero(batch.keys_len > 0)
    if not len(has):
        return rows
    k_start, k_end = batch.keys_start[has], batch.keys_start[has] + batch.keys_len[has]
    lo, hi = int(k_start.min()), int(k_end.max())
    data = batch.buf[lo:hi].tobytes()
    hits, p = [], data.find(kb)
    while p >= 0:
        hits.append(p + lo)
        p = data.find(kb, p + 1)
    if not hits:
        return rows
    hits = np.asarray(hits, dtype=np.int64)
    owner = np.searchsorted(k_start, hits, side="right") - 1
    valid = owner >= 0
    owner = np.maximum(owner, 0)
    start, stop = k_start[owner], k_end[owner]
    after = hits + len(kb)
    valid &= (hits >= start) & (after <= stop)
    space = ord(cl.KEY_SEPARATOR)
    buf = batch.buf
    before_ok = (hits == start) | (buf[np.maximum(hits - 1, 0)] == space)
    after_ok = (after == stop) | (buf[np.minimum(after, len(buf) - 1)] == space)
    valid &= before_ok & after_ok
    rows[has[owner[valid]]] = True
    return rows
