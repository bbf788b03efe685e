"""Index keys, the broker's rule once (IndexService.buildIndex; format.md §5.2): which keys a
record puts into the IndexFile, and the key search over decoded records that answers
``query-key --scan`` by the same rule. ``dispatch.record_index_keys`` (and its C twin) is the
batch form, proven equal to ``index_keys`` on every reference record (tests/test_one_rule.py).
"""
from __future__ import annotations

from formats import commitlog as cl
from rmqtool.broker.transactions import goes_to_index

MATCH_UNIQ = "uniq_key"
MATCH_KEYS = "keys"


def index_keys(uniq: str | None, keys: str | None) -> list[tuple[str, str]]:
    """(kind, key) of each IndexFile key of one record, in the order the broker puts them: its
    UNIQ_KEY when the property is there (even empty), then each KEYS token (``split_keys``:
    split at single spaces, empty tokens skipped). The IndexFile key is ``topic`` + ``KEY_JOINER`` + key; a
    ROLLBACK record has none (``goes_to_index``, the caller's test)."""
    out = [] if uniq is None else [(MATCH_UNIQ, uniq)]
    out += [(MATCH_KEYS, k) for k in cl.split_keys(keys)]
    return out


def is_rollback(batch, i: int) -> bool:
    """Not indexed by the broker (``dispatch.goes_to_index``)."""
    return not goes_to_index(cl.transaction_type(int(batch.sys_flag[i])))


def match_kind(batch, i: int, key: str, topic: str | None, uniq_only: bool = False,
               rollback: bool = False) -> str | None:
    """How record ``i`` carries ``key`` as the broker indexes it (``index_keys``): its UNIQ_KEY
    or a KEYS token.

    ROLLBACK records are never indexed by the broker and match only with ``rollback``.
    """
    if not rollback and is_rollback(batch, i):
        return None
    if topic is not None and batch.topic(i) != topic:
        return None
    uniq = batch.text("uniq", i)
    keys = None if uniq_only or uniq == key else batch.text("keys", i)
    for kind, k in index_keys(uniq, keys):
        if k == key:
            return kind
    return None


def scan_batch(batch, key: str, topic: str | None, begin: int, end: int,
               uniq_only: bool = False, rollback: bool = False) -> list[tuple[int, str]]:
    """(row, match kind) of every record of a batch that carries ``key`` in [begin, end].

    Vectorized prefilter on bytes (UNIQ_KEY equal, or the key as a space-delimited token
    inside KEYS), then the exact string test of ``match_kind`` on the few survivors.
    """
    import numpy as np
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


def _spans_equal(buf, start, length, needle: bytes):
    import numpy as np
    same = length == len(needle)
    rows = np.flatnonzero(same)
    if len(rows) and len(needle):
        window = buf[start[rows][:, None] + np.arange(len(needle))]
        same[rows] = (window == np.frombuffer(needle, np.uint8)).all(axis=1)
    return same


def _token_rows(batch, kb: bytes):
    """Rows whose KEYS span holds ``kb`` delimited by its ends or spaces."""
    import numpy as np
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
