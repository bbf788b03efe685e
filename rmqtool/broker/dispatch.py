"""The broker's dispatch, vectorized: CommitLog records -> ConsumeQueue units and index keys.

Follows format.md §3.4, §4 and §5. Input is any object with the RecordBatch columns
(``DispatchColumns``): a ``RecordBatch`` from ``rmqtool.records.scan`` is fed directly, and
``RecordColumns.from_records`` builds one from plain strings for tests and ``write``.

* ConsumeQueue: NOT and COMMIT transaction types only; tagsCode = hashCode of the whole
  TAGS value (0 when absent); ``SCHEDULE_TOPIC_XXXX`` with DELAY level > 0 -> the deliver
  timestamp. ``build_cq_files`` places units (pre-blank fill when a queue starts above 0).
* Index: every record except ROLLBACK; keys ``topic#UNIQ_KEY`` first, then each KEYS token
  (split on single spaces, empty tokens skipped). ``IndexBuilder`` turns the key stream into
  files (rollover, seeding, hashSlotCount, chains by a stable sort on slot).

Hashes are computed with numpy for ASCII spans; spans holding non-ASCII bytes go through
the scalar Java hash of the decoded string (UTF-16 code units, U+FFFD replacement).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np

from formats import JAVA_INT_MAX

from formats import commitlog as cl
from formats.consumequeue import (CQ_UNIT_DTYPE, CQ_UNIT_SIZE, PRE_BLANK_COMMITLOG_OFFSET,
                                  PRE_BLANK_SIZE, PRE_BLANK_TAGS_CODE)
from formats.indexfile import (FIRST_INDEX, INDEX_ENTRY_DTYPE, INDEX_HEADER_DTYPE,
                               INDEX_SLOT_DTYPE, INVALID_INDEX, KEY_JOINER, entry_position,
                               index_file_size, slot_position)
from rmqtool.broker.delay import DEFAULT_LEVELS_MS, deliver_timestamp, parse_level
from rmqtool.broker.queuekinds import (PROPERTY_INNER_MULTI_DISPATCH, QueueKinds, batch_position,
                                       goes_to_batch_queue, lmq_units)
from rmqtool.broker.transactions import goes_to_consumequeue, goes_to_index  # noqa: F401 (the rules' home)
from rmqtool.kernels.javahash import combine_hash, index_key_hash_array, span_hashes
from rmqtool.io.topicpath import queue_selected
from rmqtool.io.indexfile import IndexGeometry
from rmqtool.io.install import crash_point, pwrite_all
from rmqtool.kernels import native
from rmqtool.kernels.gather import length_groups, span_matrix
from rmqtool.wording import counted

INT_MAX = JAVA_INT_MAX
_SPAN_NAMES = ("topic", "tags", "keys", "uniq", "delay")
_SCHEDULE = np.frombuffer(cl.SCHEDULE_TOPIC.encode("ascii"), dtype=np.uint8)
_JOINER = ord(KEY_JOINER)
_SPACE = ord(cl.KEY_SEPARATOR)


@dataclass
class RecordColumns:
    """What dispatch reads: per-record columns plus (start, length) spans into ``buf``, here
    built from Python values (tests, ``write``); a ``RecordBatch`` from ``rmqtool.records.scan`` has
    the same columns and is fed directly (``DispatchColumns``: any object with them).

    Length -1 means absent. ``stored_phy_offset`` (the PHYSICALOFFSET field, which the
    broker dispatches) is used when present, else ``phy_offset``.
    """
    buf: np.ndarray
    phy_offset: np.ndarray
    size: np.ndarray
    store_timestamp: np.ndarray
    sys_flag: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    topic_start: np.ndarray
    topic_len: np.ndarray
    tags_start: np.ndarray
    tags_len: np.ndarray
    keys_start: np.ndarray
    keys_len: np.ndarray
    uniq_start: np.ndarray
    uniq_len: np.ndarray
    delay_start: np.ndarray
    delay_len: np.ndarray
    props_start: np.ndarray | None = None   # the whole properties (multi-dispatch, BatchCQ), when given
    props_len: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.phy_offset)

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "RecordColumns":
        """Records as dicts: phy_offset, size, store_timestamp, sys_flag, queue_id,
        queue_offset, topic, and optional tags, keys, uniq_key, delay (str or None) and props
        (the properties bytes)."""
        records = list(records)
        cols = {k: np.fromiter(((r.get(k) or 0) for r in records), dtype=np.int64, count=len(records))
                for k in ("phy_offset", "size", "store_timestamp", "sys_flag", "queue_id", "queue_offset")}
        source = {"topic": "topic", "tags": "tags", "keys": "keys", "uniq": "uniq_key", "delay": "delay",
                  "props": "props"}
        names = _SPAN_NAMES + (("props",) if any(r.get("props") is not None for r in records) else ())
        parts, base = [], 0
        for name in names:
            values = [r.get(source[name]) for r in records]
            raw = [b"" if v is None else (v.encode("utf-8", "surrogatepass") if isinstance(v, str) else bytes(v))
                   for v in values]
            lens = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
            starts = base + np.cumsum(lens) - lens
            absent = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
            cols[f"{name}_start"] = np.where(absent, 0, starts)
            cols[f"{name}_len"] = np.where(absent, -1, lens)
            blob = b"".join(raw)
            parts.append(blob)
            base += len(blob)
        return cls(buf=np.frombuffer(b"".join(parts), dtype=np.uint8), **cols)


#: any object with ``RecordColumns``' columns (a ``RecordBatch``, a ``RecordColumns``)
DispatchColumns = RecordColumns


def _col(batch, name: str) -> np.ndarray:
    return np.asarray(getattr(batch, name), dtype=np.int64)


def known_hashes(batch, name: str, n: int | None = None) -> np.ndarray | None:
    """The hashes of the first ``n`` records' ``name`` spans ("topic", "tags") that the native scan
    made while each record was in the cache (``RecordBatch.hashes``; -1 where a span is not ASCII),
    for ``span_hashes(known=...)``; None when the batch has none."""
    h = (getattr(batch, "hashes", None) or {}).get(name)
    return None if h is None else h[:n]


def _commitlog_offsets(batch) -> np.ndarray:
    cols = getattr(batch, "columns", None)
    if isinstance(cols, dict) and "stored_phy_offset" in cols:
        return np.asarray(cols["stored_phy_offset"], dtype=np.int64)
    return _col(batch, "phy_offset")


# --- per-batch dispatch ---------------------------------------------------------------------
#: a walk's end kind when a record fails the broker's dispatch check (``BatchDispatch.stop``)
END_DISPATCH_STOP = "dispatch-stop"
#: verify's check name for it
DISPATCH_STOP_CHECK = "dispatch.stop"


@dataclass
class DispatchConfig:
    delay_levels_ms: list[int] = field(default_factory=lambda: list(DEFAULT_LEVELS_MS))
    index_enabled: bool = True
    kinds: QueueKinds = field(default_factory=QueueKinds)     # multi-dispatch, LMQ, BatchCQ topics


@dataclass
class BatchDispatch:
    """What one batch contributes: CQ units (by topic string) and index keys in broker order."""
    topics: list[str]                      # distinct topics, indexed by cq_topic
    cq_topic: np.ndarray                   # int32 index into topics
    cq_queue_id: np.ndarray
    cq_queue_offset: np.ndarray
    cq_phy_offset: np.ndarray
    cq_size: np.ndarray
    cq_tags_code: np.ndarray
    key_hash: np.ndarray                   # int32 indexKeyHash (>= 0)
    key_phy_offset: np.ndarray
    key_store_timestamp: np.ndarray
    key_record: np.ndarray                 # record number within the batch, per key
    records: int                           # records dispatched (after any stop)
    record_phy_offset: np.ndarray          # commitlog offset of every dispatched record
    stop: str | None = None                # why dispatch stopped early (broker would stop)
    stop_at: int = -1                      # commitlog offset of the record it stopped at
    bcq: "BatchUnits | None" = None         # BatchConsumeQueue units (topics of queue type BatchCQ)

    def compact(self) -> "BatchDispatch":
        """What the CQ and index builders read, in fewer bytes (to ship between processes):
        queue ids and sizes as int32 when they fit, no ``key_record``, and ``record_phy_offset``
        reduced to its maximum (``IndexBuilder.add`` only asks whether any record lies past a
        file's end, before and after a seed filter: the maximum answers both the same way)."""
        rp = self.record_phy_offset
        return BatchDispatch(
            self.topics, self.cq_topic, _narrow(self.cq_queue_id), self.cq_queue_offset, self.cq_phy_offset,
            _narrow(self.cq_size), self.cq_tags_code, self.key_hash, self.key_phy_offset,
            self.key_store_timestamp, np.zeros(0, np.int32), self.records,
            rp[rp.argmax()][None] if len(rp) else rp, self.stop, self.stop_at, self.bcq)


@dataclass
class BatchUnits:
    """A batch's BatchConsumeQueue units (``queuekinds``), in dispatch order; ``topic`` indexes
    ``BatchDispatch.topics``."""
    topic: np.ndarray
    queue_id: np.ndarray
    phy_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    store_timestamp: np.ndarray
    base_offset: np.ndarray
    batch_size: np.ndarray

    def __len__(self) -> int:
        return len(self.topic)


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` as int32 when every value fits (else unchanged)."""
    if a.dtype == np.int32 or not len(a):
        return a
    lo, hi = int(a.min()), int(a.max())
    return a.astype(np.int32) if -(1 << 31) <= lo and hi < (1 << 31) else a


def _numbered_groups(buf, t_start, t_len, reps: np.ndarray, rep_key: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Groups found by a native loop, numbered as ``np.unique`` numbers them (in the order of their
    (hash, length) key ``rep_key``): each group's number, and its name (its first record ``reps``' topic)."""
    order = np.argsort(rep_key)
    rank = np.empty(len(reps), np.int32)
    rank[order] = np.arange(len(reps), dtype=np.int32)
    named = reps[order]
    names = [buf[a:a + max(b, 0)].tobytes().decode("utf-8", "replace")
             for a, b in zip(t_start[named].tolist(), t_len[named].tolist())]
    return rank, names


def _topic_groups(buf, t_start, t_len, t_hash, core=native.core) -> tuple[np.ndarray, list[str]]:
    """Group records by topic bytes: (group id per record, topic text per group).

    Groups are numbered in the order of their (hash, length) key, each named by its first
    record's topic. With the native ``core`` one C loop groups the spans in a hash table and
    checks every member's bytes; a hash collision there hands the batch to the numpy path."""
    n = len(t_start)
    if n == 0:
        return np.zeros(0, np.int32), []
    key = (t_hash.astype(np.int64) & 0xFFFFFFFF) | (t_len.astype(np.int64) << 32)
    if core is not None:
        groups, first = np.empty(n, np.int64), np.empty(n, np.int64)
        count = core.span_groups(buf, np.ascontiguousarray(t_start, np.int64),
                                 np.ascontiguousarray(np.maximum(t_len, 0), np.int64), key, groups, first)
        if count >= 0:
            rank, names = _numbered_groups(buf, t_start, t_len, first[:count], key[first[:count]])
            return rank[groups], names
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    groups = inverse.astype(np.int64)
    # verify members equal their representative's bytes (hash+length could collide)
    lens = np.maximum(t_len, 0)
    rep_start = t_start[first[groups]]
    same = np.ones(n, dtype=bool)
    for length in np.unique(lens).tolist():
        rows = np.flatnonzero(lens == length)
        a, b = t_start[rows], rep_start[rows]
        ok = np.ones(len(rows), dtype=bool)
        for j in range(length):
            ok &= buf[a + j] == buf[b + j]
        same[rows] = ok
    bad = np.flatnonzero(~same)
    names = [buf[t_start[i]:t_start[i] + lens[i]].tobytes().decode("utf-8", "replace") for i in first]
    if len(bad):
        index = {name: g for g, name in enumerate(names)}
        for i in bad.tolist():
            text = buf[t_start[i]:t_start[i] + lens[i]].tobytes().decode("utf-8", "replace")
            if text not in index:
                index[text] = len(names)
                names.append(text)
            groups[i] = index[text]
    return groups.astype(np.int32), names


def _keys_tokens(buf, k_start, k_len, core=native.core):
    """Tokens of every KEYS value split on single spaces, empty tokens dropped.

    Returns (record, token start in buf, token length, ordinal within record), records
    ascending. Values are grouped by length (``gather.length_groups``); each group is one
    (values, length) byte matrix in which a token begins at a non-space after a space or the
    row start and ends at a non-space before a space or the row end. Many distinct or long
    lengths take the per-byte formulation (``_keys_tokens_flat``). With the native ``core``
    the values are split byte by byte in C (``split_tokens``), in the same order."""
    lens = np.maximum(k_len, 0)
    if not lens.any():
        z = np.zeros(0, np.int64)
        return z, z, z, z
    if core is not None:
        room = int(((lens + 1) // 2).sum())
        rec, tok_start, tok_len = (np.empty(room, np.int64) for _ in range(3))
        count = core.split_tokens(buf, np.ascontiguousarray(k_start, np.int64), np.ascontiguousarray(lens, np.int64),
                                  _SPACE, rec, tok_start, tok_len)
        return rec[:count], tok_start[:count], tok_len[:count], _ordinals(rec[:count], len(k_start))
    rec_all = np.flatnonzero(lens > 0)
    groups = length_groups(lens[rec_all])
    if groups is None:
        return _keys_tokens_flat(buf, k_start, k_len)
    recs, starts, lengths = [], [], []
    for length, rows in groups:
        g = rec_all if rows is None else rec_all[rows]
        g_start = k_start[g]
        space = span_matrix(buf, g_start, length) == _SPACE
        word = ~space
        begins = word.copy()
        begins[:, 1:] &= space[:, :-1]
        ends = word
        ends[:, :-1] &= space[:, 1:]
        r, c0 = np.nonzero(begins)
        _, c1 = np.nonzero(ends)
        recs.append(g[r])
        starts.append(g_start[r] + c0)
        lengths.append(c1 - c0 + 1)
    rec = np.concatenate(recs)
    tok_start = np.concatenate(starts)
    tok_len = np.concatenate(lengths)
    if len(groups) > 1:
        order = np.argsort(rec, kind="stable")       # tokens of a record stay in text order
        rec, tok_start, tok_len = rec[order], tok_start[order], tok_len[order]
    return rec, tok_start, tok_len, _ordinals(rec, len(k_start))


def _ordinals(rec: np.ndarray, n: int) -> np.ndarray:
    """Each token's rank among the tokens of its record (``rec`` ascending, ``n`` records)."""
    counts = np.bincount(rec, minlength=n)
    return np.arange(len(rec)) - (np.cumsum(counts) - counts)[rec]


def _keys_tokens_flat(buf, k_start, k_len):
    """``_keys_tokens`` over one flat per-byte expansion of every value (any lengths)."""
    lens = np.maximum(k_len, 0)
    total = int(lens.sum())
    if total == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    n = len(k_start)
    owner = np.repeat(np.arange(n), lens)
    first = np.cumsum(lens) - lens
    pos = np.arange(total) - first[owner]
    at = k_start[owner] + pos
    space = buf[at] == _SPACE
    prev_space = np.ones(total, dtype=bool)
    prev_space[1:] = space[:-1]
    prev_space[pos == 0] = True
    next_space = np.ones(total, dtype=bool)
    next_space[:-1] = space[1:]
    next_space[pos == lens[owner] - 1] = True
    begins = np.flatnonzero(~space & prev_space)
    ends = np.flatnonzero(~space & next_space)
    rec = owner[begins]
    return rec, at[begins], ends - begins + 1, _ordinals(rec, n)


@dataclass
class ScheduleDelays:
    """The DELAY levels of a batch's ``SCHEDULE_TOPIC_XXXX`` records, up to the first that
    fails the broker's record check (``failed_row``; None when none does)."""
    rows: np.ndarray                 # rows with a parsed level, before failed_row
    levels: np.ndarray
    failed_row: int | None = None
    failed_text: str = ""


def schedule_delays(batch: DispatchColumns) -> ScheduleDelays:
    """The broker's DELAY rule, once: for a ``SCHEDULE_TOPIC_XXXX`` record with a DELAY
    property, ``Integer.parseInt`` runs inside ``checkMessageAndReturnSize``; where it throws
    the record fails the check, so recovery ends the valid log there and reput stops there
    (nothing from that record on is dispatched). Used by dispatch (tagsCode, the stop), the
    recovery walk (valid end) and verify."""
    buf = np.asarray(batch.buf, dtype=np.uint8)
    t_start, t_len = _col(batch, "topic_start"), np.maximum(_col(batch, "topic_len"), 0)
    d_start, d_len = _col(batch, "delay_start"), _col(batch, "delay_len")
    rows, levels = [], []
    cand = np.flatnonzero((t_len == len(_SCHEDULE)) & (d_len >= 0))
    if len(cand):
        eq = (buf[t_start[cand][:, None] + np.arange(len(_SCHEDULE))] == _SCHEDULE).all(axis=1)
        for i in cand[eq].tolist():
            text = buf[d_start[i]:d_start[i] + d_len[i]].tobytes().decode("utf-8", "replace")
            level = parse_level(text)
            if level is None:
                return ScheduleDelays(np.asarray(rows, np.int64), np.asarray(levels, np.int64), i, text)
            rows.append(i)
            levels.append(level)
    return ScheduleDelays(np.asarray(rows, np.int64), np.asarray(levels, np.int64))


def delay_stop_text(text: str, offset: int) -> str:
    return (f"DELAY value {text!r} is not an int at commitlog offset {offset}: "
            "nothing from that record on is dispatched")


def record_tags_codes(batch: DispatchColumns, config: DispatchConfig | None = None,
                      delays: ScheduleDelays | None = None) -> np.ndarray:
    """The dispatcher's tagsCode of every record of a batch: hashCode of the whole TAGS value
    (0 when absent); for ``SCHEDULE_TOPIC_XXXX`` with a DELAY level > 0 the deliver timestamp
    (``schedule_delays``; records from a failed one on keep their TAGS hash, they are never
    dispatched)."""
    config = config or DispatchConfig()
    buf = np.asarray(batch.buf, dtype=np.uint8)
    tag_start, tag_len = _col(batch, "tags_start"), _col(batch, "tags_len")
    tag_hash, _ = span_hashes(buf, tag_start, tag_len, known=known_hashes(batch, "tags"))
    tags_code = np.where(tag_len > 0, tag_hash.astype(np.int64), 0)
    delays = delays if delays is not None else schedule_delays(batch)
    rows, values = delay_tags_codes(delays, _col(batch, "store_timestamp"), config)
    tags_code[rows] = values
    return tags_code


def delay_tags_codes(delays: ScheduleDelays, store_timestamp, config: DispatchConfig,
                     n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows, tagsCodes) of the schedule records among the first ``n`` whose tagsCode is the deliver
    timestamp: a DELAY level > 0 (levels past the configured ones deliver at the last level)."""
    rows, values = [], []
    for i, level in zip(delays.rows.tolist(), delays.levels.tolist()):
        level = min(level, len(config.delay_levels_ms))
        if level > 0 and (n is None or i < n):
            rows.append(i)
            values.append(deliver_timestamp(level, int(store_timestamp[i]), config.delay_levels_ms))
    return np.asarray(rows, np.int64), np.asarray(values, np.int64)


def record_index_keys(batch: DispatchColumns, n: int | None = None,
                      topic_hash: np.ndarray | None = None, core=native.core) -> tuple[np.ndarray, np.ndarray]:
    """(record row, keyHash) of every index key of the first ``n`` records, in the order
    IndexService.buildIndex puts them: per record ``topic#UNIQ_KEY`` (when the property is
    there, even empty), then ``topic#token`` for each KEYS token (single spaces, empty tokens
    skipped); ROLLBACK records have none (``goes_to_index``).

    With the native ``core`` one C loop emits the keys record by record, each hash continued
    from the topic's; a key that is not ASCII hands the batch to the numpy formulation below."""
    buf = np.asarray(batch.buf, dtype=np.uint8)
    n = len(_col(batch, "sys_flag")) if n is None else n
    tx = _col(batch, "sys_flag")[:n] & cl.TRANSACTION_MASK
    k_start, k_len = _col(batch, "keys_start")[:n], _col(batch, "keys_len")[:n]
    u_start, u_len = _col(batch, "uniq_start")[:n], _col(batch, "uniq_len")[:n]
    if topic_hash is None:
        topic_hash, _ = span_hashes(buf, _col(batch, "topic_start")[:n], np.maximum(_col(batch, "topic_len")[:n], 0),
                                    known=known_hashes(batch, "topic", n))
    indexed = goes_to_index(tx)
    if core is not None:
        room = n + int(((np.maximum(k_len, 0) + 1) // 2).sum())
        key_rec, key_hash = np.empty(room, np.int64), np.empty(room, np.int32)
        count = core.index_keys(buf, indexed.astype(np.uint8), np.ascontiguousarray(topic_hash, np.int32),
                                *(np.ascontiguousarray(c, np.int64) for c in (u_start, u_len, k_start, k_len)),
                                _JOINER, _SPACE, key_rec, key_hash)
        if count >= 0:
            return key_rec[:count], key_hash[:count]
    prefix = combine_hash(topic_hash, np.full(n, _JOINER, np.int32), np.ones(n, np.int64))
    u_rows = np.flatnonzero(indexed & (u_len >= 0))
    uh, uu = span_hashes(buf, u_start[u_rows], u_len[u_rows])
    k_ok = indexed & (k_len > 0)
    rec, tok_start, tok_len, ordinal = _keys_tokens(buf, np.where(k_ok, k_start, 0), np.where(k_ok, k_len, 0))
    th, tu = span_hashes(buf, tok_start, tok_len)
    key_rec = np.concatenate([u_rows, rec])
    key_ord = np.concatenate([np.zeros(len(u_rows), np.int64), ordinal + 1])
    raw = np.concatenate([combine_hash(prefix[u_rows], uh, uu), combine_hash(prefix[rec], th, tu)])
    order = np.lexsort((key_ord, key_rec))
    return key_rec[order], index_key_hash_array(raw[order])


def dispatch_batch(batch: DispatchColumns, config: DispatchConfig | None = None, core=native.core) -> BatchDispatch:
    """CQ units and index keys of one batch, in the broker's order.

    With the native ``core`` (and no multi-dispatch or BatchCQ topics) one C loop makes the topic
    groups, the units and the keys (``_dispatch_native``); the numpy formulation below is the
    reference, and decides every batch the loop hands back."""
    config = config or DispatchConfig()
    buf = np.asarray(batch.buf, dtype=np.uint8)
    phy = _commitlog_offsets(batch)
    n = len(phy)
    delays = schedule_delays(batch)
    stop, stop_at = None, -1
    if delays.failed_row is not None:        # nothing from that record on is dispatched
        n = delays.failed_row
        stop_at = int(phy[n])
        stop = delay_stop_text(delays.failed_text, stop_at)
    kinds = config.kinds
    if core is not None and not (kinds.batch_cq_topics or kinds.multi_dispatch):
        done = _dispatch_native(core, batch, buf, phy[:n], n, config, delays)
        if done is not None:
            done.stop, done.stop_at = stop, stop_at
            return done
    tags_code = record_tags_codes(batch, config, delays)
    cut = slice(0, n)
    phy, tags_code = phy[cut], tags_code[cut]
    size, ts, sys_flag, qid, qoff = (_col(batch, name)[cut] for name in
                                     ("size", "store_timestamp", "sys_flag", "queue_id", "queue_offset"))
    t_start, t_len = _col(batch, "topic_start")[cut], np.maximum(_col(batch, "topic_len")[cut], 0)

    tx = sys_flag & cl.TRANSACTION_MASK
    topic_hash, topic_units = span_hashes(buf, t_start, t_len, known=known_hashes(batch, "topic", n))
    groups, topics = _topic_groups(buf, t_start, t_len, topic_hash)
    cq_rows = np.flatnonzero(goes_to_consumequeue(tx))
    if config.index_enabled:
        key_rec, key_hash = record_index_keys(batch, n, topic_hash)
    else:
        key_rec, key_hash = np.zeros(0, np.int64), np.zeros(0, np.int32)
    cq = (groups, qid, qoff, phy, size, tags_code)
    if len(cq_rows) == n:       # every record gets a unit (no transaction halves): copies, not gathers
        cq = tuple(col.copy() for col in cq)
    else:
        cq = tuple(col[cq_rows] for col in cq)
    bcq = None
    if kinds.batch_cq_topics or kinds.multi_dispatch:
        cq, bcq = _queue_kinds(batch, kinds, topics, groups, cq_rows, cq, ts, n)
    return BatchDispatch(
        topics=topics, cq_topic=cq[0], cq_queue_id=cq[1], cq_queue_offset=cq[2], cq_phy_offset=cq[3],
        cq_size=cq[4], cq_tags_code=cq[5], key_hash=key_hash, key_phy_offset=phy[key_rec],
        key_store_timestamp=ts[key_rec], key_record=key_rec, records=n,
        record_phy_offset=phy, stop=stop, stop_at=stop_at, bcq=bcq)


#: the columns ``core.dispatch_columns`` reads, in its order (``_col`` names; "phy" is the dispatched offset)
_NATIVE_COLUMNS = ("sys_flag", "phy", "size", "store_timestamp", "queue_id", "queue_offset", "topic_start",
                   "topic_len", "tags_start", "tags_len", "uniq_start", "uniq_len", "keys_start", "keys_len")


@lru_cache(maxsize=1)
def _transaction_tables() -> tuple:
    """``core.dispatch_columns``' rule tables: per transaction type (``sys_flag & TRANSACTION_MASK``),
    whether it gets a ConsumeQueue unit and whether it is indexed, from ``broker.transactions``."""
    tx = np.arange(cl.TRANSACTION_MASK + 1, dtype=np.int64) & cl.TRANSACTION_MASK
    return (cl.TRANSACTION_MASK, goes_to_consumequeue(tx).astype(np.uint8), goes_to_index(tx).astype(np.uint8),
            _JOINER, _SPACE)


def _dispatch_loop(core, batch, buf, phy, n: int, config: DispatchConfig, delays: ScheduleDelays):
    """``core.dispatch_columns`` over the first ``n`` records: (cq columns, key columns, first record of
    each topic group, units, keys, groups), or None when the loop hands the batch to the reference."""
    cols = tuple(np.ascontiguousarray((phy if name == "phy" else _col(batch, name))[:n], np.int64)
                 for name in _NATIVE_COLUMNS)
    known = [known_hashes(batch, name, n) for name in ("topic", "tags")]
    known = None if any(k is None or len(k) != n for k in known) else tuple(
        np.ascontiguousarray(k, np.int64) for k in known)
    overrides = delay_tags_codes(delays, cols[3], config, n)
    tables = _transaction_tables()
    cq = tuple(np.empty(n, np.int64) for _ in range(6))
    first = np.empty(n, np.int64)
    room = 3 * n + 16
    while True:
        keys = (np.empty(room, np.int64), np.empty(room, np.int32), np.empty(room, np.int64), np.empty(room, np.int64))
        got = core.dispatch_columns(buf, cols, known, tables, overrides, config.index_enabled, cq, keys, (first,))
        if got != -2:
            break
        room = n + int(((np.maximum(cols[13], 0) + 1) // 2).sum()) + 1    # every key's room: a bound
    if got == -1:
        return None
    return cols, known, cq, keys, first, *got


def _dispatch_native(core, batch, buf, phy, n: int, config: DispatchConfig,
                     delays: ScheduleDelays) -> BatchDispatch | None:
    """``dispatch_batch`` of the first ``n`` records by one C loop (``core.dispatch_columns``): each
    record's topic group, its unit (tagsCode: the TAGS hash, or the delay rule's deliver timestamp
    from ``delays``) and its index keys with their offsets and timestamps. None when the loop hands
    the batch to the reference (a span that is not ASCII, a topic hash collision)."""
    done = _dispatch_loop(core, batch, buf, phy, n, config, delays)
    if done is None:
        return None
    cols, known, cq, keys, first, units, n_keys, count = done
    t_start, t_len = cols[6], cols[7]
    reps = first[:count]
    key = (known[0][reps] if known is not None else
           span_hashes(buf, t_start[reps], np.maximum(t_len[reps], 0))[0]).astype(np.int64) & 0xFFFFFFFF
    key |= np.maximum(t_len[reps], 0) << 32
    rank, topics = _numbered_groups(buf, t_start, t_len, reps, key)
    return BatchDispatch(
        topics=topics, cq_topic=rank[cq[0][:units]], cq_queue_id=cq[1][:units], cq_queue_offset=cq[2][:units],
        cq_phy_offset=cq[3][:units], cq_size=cq[4][:units], cq_tags_code=cq[5][:units],
        key_hash=keys[1][:n_keys], key_phy_offset=keys[2][:n_keys], key_store_timestamp=keys[3][:n_keys],
        key_record=keys[0][:n_keys], records=n, record_phy_offset=cols[1])


def _record_properties(batch, row: int) -> dict[str, str]:
    """The properties map of one record (empty when the columns carry no properties span)."""
    start, length = getattr(batch, "props_start", None), getattr(batch, "props_len", None)
    if start is None or length is None or int(length[row]) <= 0:
        return {}
    at = int(start[row])
    return cl.decode_properties(np.asarray(batch.buf[at:at + int(length[row])], dtype=np.uint8).tobytes())


def rows_with_property(batch, rows: np.ndarray, name: str) -> np.ndarray:
    """Per record row of ``rows``: do its properties bytes hold ``name`` followed by the
    name/value separator (a superset of the records whose parsed map has it)."""
    none = np.zeros(len(rows), dtype=bool)
    start, length = getattr(batch, "props_start", None), getattr(batch, "props_len", None)
    if start is None or length is None or not len(rows):
        return none
    data = np.asarray(batch.buf, dtype=np.uint8).tobytes()
    needle = (name + cl.NAME_VALUE_SEPARATOR).encode("ascii")
    hits, at = [], data.find(needle)
    while at >= 0:
        hits.append(at)
        at = data.find(needle, at + 1)
    if not hits:
        return none
    lo = np.asarray(start, dtype=np.int64)[rows]
    hi = lo + np.maximum(np.asarray(length, dtype=np.int64)[rows], 0)
    hits = np.asarray(hits, dtype=np.int64)
    return np.searchsorted(hits, lo, side="left") < np.searchsorted(hits, hi - len(needle) + 1, side="left")


def _queue_kinds(batch, kinds: QueueKinds, topics: list[str], groups, cq_rows, cq, ts, n):
    """Move the units of BatchCQ topics to BatchConsumeQueue units and add the light-queue
    units of multi-dispatch records (``queuekinds``), in the broker's order per queue."""
    g, q, o, p, sz, tg = cq
    bcq = None
    if kinds.batch_cq_topics:
        batch_groups = [i for i, t in enumerate(topics) if t in kinds.batch_cq_topics]
        is_batch = np.isin(g, batch_groups)
        rows = cq_rows[is_batch]
        keep, base, num = [], [], []
        qoff = np.asarray(batch.queue_offset, dtype=np.int64)
        for k, r in enumerate(rows.tolist()):
            pos = batch_position(_record_properties(batch, r), int(qoff[r]))
            if pos is not None and goes_to_batch_queue(*pos):
                keep.append(k)
                base.append(pos[0])
                num.append(pos[1])
        keep = np.asarray(keep, dtype=np.int64)
        sel = np.flatnonzero(is_batch)[keep]
        bcq = BatchUnits(g[sel], q[sel], p[sel], sz[sel], tg[sel], ts[rows[keep]],
                         np.asarray(base, dtype=np.int64), np.asarray(num, dtype=np.int64))
        g, q, o, p, sz, tg = (a[~is_batch] for a in (g, q, o, p, sz, tg))
        cq_rows = cq_rows[~is_batch]
    if kinds.multi_dispatch:
        extra = []
        for k in np.flatnonzero(rows_with_property(batch, cq_rows, PROPERTY_INNER_MULTI_DISPATCH)).tolist():
            r = int(cq_rows[k])
            for name, qid, offset in lmq_units(kinds, topics[int(g[k])], int(q[k]),
                                               _record_properties(batch, r)):
                extra.append((name, qid, offset, int(p[k]), int(sz[k]), int(tg[k])))
        if extra:
            index = {t: i for i, t in enumerate(topics)}
            for name, *_ in extra:
                if name not in index:
                    index[name] = len(topics)
                    topics.append(name)
            cols = list(zip(*extra))
            g = np.concatenate([g, np.asarray([index[t] for t in cols[0]], dtype=g.dtype)])
            q, o, p, sz, tg = (np.concatenate([a, np.asarray(c, dtype=a.dtype)])
                               for a, c in zip((q, o, p, sz, tg), cols[1:]))
    return (g, q, o, p, sz, tg), bcq


# --- ConsumeQueue ----------------------------------------------------------------------------
@dataclass
class QueueUnits:
    """All units of one (topic, queue) in dispatch order."""
    topic: str
    queue_id: int
    queue_offset: np.ndarray
    phy_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray

    def __len__(self) -> int:
        return len(self.queue_offset)


def queue_groups(d: BatchDispatch, only: set | None = None):
    """``((topic, queue id), unit rows)`` of one batch's CQ units, per selected queue, rows in
    dispatch order (``only`` as ``topicpath.queue_selected`` takes it)."""
    if not len(d.cq_topic):
        return
    key = d.cq_topic.astype(np.int64) << 32 | (d.cq_queue_id.astype(np.int64) & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    for grp in np.split(order, cuts):
        g0 = grp[0]
        qk = (d.topics[int(d.cq_topic[g0])], int(d.cq_queue_id[g0]))
        if queue_selected(only, *qk):
            yield qk, grp


class CqCollector:
    """Accumulates CQ units of many batches, grouped by (topic, queue)."""

    def __init__(self):
        self._parts: dict[tuple[str, int], list[tuple]] = {}

    def add(self, d: BatchDispatch, only: set | None = None) -> None:
        for qk, grp in queue_groups(d, only):
            self._parts.setdefault(qk, []).append(
                (d.cq_queue_offset[grp], d.cq_phy_offset[grp], d.cq_size[grp], d.cq_tags_code[grp]))

    def queues(self) -> list[QueueUnits]:
        out = []
        for (topic, qid), parts in sorted(self._parts.items()):
            cols = [np.concatenate([p[i] for p in parts]) for i in range(4)]
            out.append(QueueUnits(topic, qid, *cols))
        return out


@dataclass
class CqLayout:
    """A queue's units placed in its logical byte space: ``units[i]`` sits at
    ``first_file + i * 20`` (leading pre-blank units included)."""
    first_file: int
    units: np.ndarray                 # CQ_UNIT_DTYPE
    file_size: int
    real_units: int
    warnings: list[str] = field(default_factory=list)

    def file_starts(self) -> list[int]:
        span = len(self.units) * CQ_UNIT_SIZE
        return list(range(self.first_file, self.first_file + span, self.file_size))

    def file_data(self, start: int) -> bytes:
        """The non-zero prefix of the file at ``start`` (the rest of the file is zeros)."""
        per_file = self.file_size // CQ_UNIT_SIZE
        i = (start - self.first_file) // CQ_UNIT_SIZE
        return self.units[i:i + per_file].tobytes()


@dataclass
class CqFiles:
    """File start offset -> whole file bytes (tests and small queues)."""
    files: dict[int, bytes]
    units: int
    warnings: list[str] = field(default_factory=list)


def build_cq_files(q: QueueUnits, file_size: int) -> CqFiles:
    layout = layout_cq(q, file_size)
    files = {}
    for start in layout.file_starts():
        data = layout.file_data(start)
        files[start] = data + bytes(file_size - len(data))
    return CqFiles(files, layout.real_units, layout.warnings)


class QueueLayout:
    """A queue's units placed like ConsumeQueue.putMessagePositionInfo (format.md §4.1, §4.3),
    fed in dispatch order, a batch at a time: ``add`` returns the logical units to append
    (``CQ_UNIT_DTYPE``; unit ``k`` of the queue's whole sequence sits at ``first_file + k*20``).

    The first unit creates the first file at its aligned offset; if it is not at the file
    start the gap is filled with pre-blank units. Later units are appended at the write
    position: repeats (queue offset or commitlog end below what is written) are skipped,
    a gap is reported and the unit still appended where the writer stands.

    ``skipped``: CommitLog ranges ``[lo, hi)`` a rebuild went past (``--skip-corrupt``; the
    list may grow while units arrive: a range is known before any unit after it). A gap
    in queue offsets with such a range between its two units lost its records there: its
    slots get the broker's pre-blank filler unit, so every later unit stays at its own queue
    offset (docs/rebuild-damage.md says how the broker serves the filler).
    """

    def __init__(self, topic: str, queue_id: int, file_size: int, skipped=()):
        if file_size <= 0 or file_size % CQ_UNIT_SIZE:
            raise ValueError(f"ConsumeQueue file size {file_size} is not a multiple of {CQ_UNIT_SIZE}")
        self.topic, self.queue_id, self.file_size, self.skipped = topic, queue_id, file_size, skipped
        self.first_file: int | None = None
        self.min_offset: int | None = None   # queue offset of the first real unit
        self.first_phy: int | None = None    # its commitlog offset
        self.written_end = 0          # logical byte position the next unit goes to
        self.max_phy = -1             # commitlog end of the last unit written
        self.real_units = 0
        self.logical_units = 0        # units placed so far, leading pre-blank units included
        self.warnings: list[str] = []

    def add(self, qoff: np.ndarray, phy: np.ndarray, size: np.ndarray, tags: np.ndarray) -> np.ndarray:
        n = len(qoff)
        if n == 0:
            return np.zeros(0, CQ_UNIT_DTYPE)
        lead = 0
        if self.first_file is None:
            self.min_offset, self.first_phy = int(qoff[0]), int(phy[0])
            start = self.min_offset * CQ_UNIT_SIZE
            self.first_file = start - start % self.file_size
            lead = (start - self.first_file) // CQ_UNIT_SIZE
            self.written_end = start
        end_phy = phy.astype(np.int64) + size
        if self._each_unit_in_place(qoff, end_phy):   # ``_place``'s rule skipped: its result is known
            self.written_end += n * CQ_UNIT_SIZE
            self.max_phy = int(end_phy[-1])
            if not lead:                  # every unit placed, none a filler
                logical = np.empty(n, dtype=CQ_UNIT_DTYPE)
                logical["commitlog_offset"], logical["size"], logical["tags_code"] = phy, size, tags
                self.real_units += n
                self.logical_units += n
                return logical
            rows = np.arange(n)
        else:
            rows = self._place(qoff, phy, end_phy)
        logical = np.zeros(lead + len(rows), dtype=CQ_UNIT_DTYPE)
        filler = np.concatenate([np.ones(lead, bool), rows < 0])
        logical["commitlog_offset"][filler] = PRE_BLANK_COMMITLOG_OFFSET
        logical["size"][filler] = PRE_BLANK_SIZE
        logical["tags_code"][filler] = PRE_BLANK_TAGS_CODE
        keep = rows[rows >= 0]
        real = ~filler
        logical["commitlog_offset"][real] = phy[keep]
        logical["size"][real] = size[keep]
        logical["tags_code"][real] = tags[keep]
        self.real_units += len(keep)
        self.logical_units += len(logical)
        return logical

    @property
    def max_offset(self) -> int:
        """The queue offset the next unit takes: the rebuilt queue's max (``getMaxOffsetInQueue``)."""
        return self.written_end // CQ_UNIT_SIZE

    def served_min(self, commitlog_min: int) -> int | None:
        """The min offset the broker serves from the files placed (``consumequeue.first_served`` over
        the leading filler units, then the first real one); None before any unit."""
        from rmqtool.io.consumequeue import first_served
        if self.min_offset is None:
            return None
        lead = self.min_offset - self.first_file // CQ_UNIT_SIZE
        first = first_served(np.array([PRE_BLANK_COMMITLOG_OFFSET] * min(lead, 1) + [self.first_phy]), commitlog_min)
        return self.first_file // CQ_UNIT_SIZE if lead and first == 0 else self.min_offset

    def _each_unit_in_place(self, qoff, end_phy) -> bool:
        """Whether ``_place`` would put every unit where the writer stands, none skipped and
        no gap: each at the write position and ending past the one before
        (``tests/test_rebuild_streaming.py`` proves both ways of placing equal)."""
        return (int(qoff[0]) * CQ_UNIT_SIZE == self.written_end and int(end_phy[0]) > self.max_phy
                and bool((np.diff(qoff) == 1).all()) and bool((np.diff(end_phy) > 0).all()))

    def _place(self, qoff, phy, end_phy) -> np.ndarray:
        """Row of each placed unit (-1: a filler unit), one unit at a time."""
        name = f"{self.topic}/{self.queue_id}"
        rows: list[int] = []
        for i in range(len(qoff)):
            expect = int(qoff[i]) * CQ_UNIT_SIZE
            end = int(end_phy[i])
            if end <= self.max_phy or expect < self.written_end:
                self.warnings.append(f"{name}: repeated unit at queue offset {int(qoff[i])} skipped")
                continue
            if expect != self.written_end:
                if _lost_between(self.max_phy, int(phy[i]), self.skipped):
                    lost = (expect - self.written_end) // CQ_UNIT_SIZE
                    self.warnings.append(f"{name}: queue offsets {self.written_end // CQ_UNIT_SIZE}.."
                                         f"{int(qoff[i]) - 1} lost in a skipped range: {counted(lost, 'filler unit')}")
                    rows += [-1] * lost
                    self.written_end = expect
                else:
                    self.warnings.append(f"{name}: queue offset {int(qoff[i])} written at "
                                         f"{self.written_end // CQ_UNIT_SIZE} (logic queue order maybe wrong)")
            rows.append(i)
            self.written_end += CQ_UNIT_SIZE
            self.max_phy = end
        return np.asarray(rows, dtype=np.int64)


def layout_cq(q: QueueUnits, file_size: int, skipped: list[tuple[int, int]] = ()) -> CqLayout:
    """A whole queue placed at once (``QueueLayout`` fed one batch)."""
    placer = QueueLayout(q.topic, q.queue_id, file_size, skipped)
    units = placer.add(q.queue_offset, q.phy_offset, q.size, q.tags_code)
    return CqLayout(placer.first_file or 0, units, file_size, placer.real_units, placer.warnings)


def _lost_between(lo: int, hi: int, skipped) -> bool:
    """Whether a skipped CommitLog range lies between offsets ``lo`` and ``hi``."""
    return any(lo <= a < hi for a, _ in skipped)


# --- IndexFile -------------------------------------------------------------------------------
@dataclass
class IndexFileImage:
    """One index file's content: header values, the used slots and the entries."""
    header: np.ndarray            # INDEX_HEADER_DTYPE, shape (1,)
    slots: np.ndarray             # int32 slot values (length hash_slots)
    entries: np.ndarray           # INDEX_ENTRY_DTYPE, entries 1..count-1 (entry 0 excluded)
    hash_slots: int
    index_entries: int

    @property
    def full(self) -> bool:
        return int(self.header["index_count"][0]) >= self.index_entries

    def to_bytes(self) -> bytes:
        out = bytearray(index_file_size(self.hash_slots, self.index_entries))
        out[0:INDEX_HEADER_DTYPE.itemsize] = self.header.tobytes()
        s0 = slot_position(self.hash_slots, 0)
        out[s0:s0 + 4 * self.hash_slots] = self.slots.astype(INDEX_SLOT_DTYPE).tobytes()
        e1 = entry_position(self.hash_slots, FIRST_INDEX)
        data = self.entries.astype(INDEX_ENTRY_DTYPE).tobytes()
        out[e1:e1 + len(data)] = data
        return bytes(out)

    def write_to(self, fd: int) -> None:
        """Write into an open file: truncate to size, then only the non-zero regions (their
        writeback started at once: the fsync that follows finds less left to write)."""
        os.ftruncate(fd, index_file_size(self.hash_slots, self.index_entries))
        pwrite_all(fd, self.header.astype(INDEX_HEADER_DTYPE).tobytes(), 0)
        # a piece at a time, pieces of zeros left as holes: one converted copy of a 20 MB table
        # is 5,000 fresh pages to fault in (at the run's end, while the other core waits)
        for at in range(0, len(self.slots), SLOT_WRITE_PIECE):
            piece = self.slots[at:at + SLOT_WRITE_PIECE]
            if piece.any():
                pwrite_all(fd, _raw_bytes(piece, INDEX_SLOT_DTYPE), slot_position(self.hash_slots, at),
                           start_writeback=True)
        if len(self.entries):
            pwrite_all(fd, _raw_bytes(self.entries, INDEX_ENTRY_DTYPE),
                        entry_position(self.hash_slots, FIRST_INDEX), start_writeback=True)


#: slots converted to the file's byte order and written at a time by ``IndexFileImage.write_to``
SLOT_WRITE_PIECE = 1 << 18


def _raw_bytes(a: np.ndarray, dtype) -> memoryview:
    """The bytes of ``a`` in ``dtype`` as a flat view (a copy only when the dtype or layout differs)."""
    a = np.ascontiguousarray(a.astype(dtype, copy=False))
    return memoryview(a.view(np.uint8).reshape(-1))


def empty_index_image(hash_slots: int, index_entries: int, seed_phy: int = 0,
                      seed_ts: int = 0) -> IndexFileImage:
    """A new file: header seeded with the previous file's end (only values > 0)."""
    header = np.zeros(1, dtype=INDEX_HEADER_DTYPE)
    if seed_phy > 0:
        header["begin_phy_offset"] = header["end_phy_offset"] = seed_phy
    if seed_ts > 0:
        header["begin_timestamp"] = header["end_timestamp"] = seed_ts
    header["index_count"] = FIRST_INDEX       # in-memory start value, written by the flush
    return IndexFileImage(header, np.zeros(hash_slots, dtype=np.int32),
                          np.zeros(0, dtype=INDEX_ENTRY_DTYPE), hash_slots, index_entries)


def _slot_chain_order(slot: np.ndarray, hash_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, slot[order]) with order = the stable argsort of ``slot`` (values in [0, hash_slots)).

    Slot and key number are packed into one int64 (slot in the high bits) and sorted with
    numpy's unstable sort, which is stable here because the packed values are distinct; this
    is several times faster than a stable argsort and touches half the memory. Geometries
    too large to pack (more than 62 bits) take the stable argsort."""
    n = len(slot)
    shift = max(int(n - 1).bit_length(), 1)
    if int(hash_slots - 1).bit_length() + shift > 62:
        order = np.argsort(slot, kind="stable")
        return order, slot[order]
    packed = slot.astype(np.int64)
    packed <<= shift
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    order = packed & ((1 << shift) - 1)
    packed >>= shift
    return order, packed


def extend_index_image(image: IndexFileImage, key_hash, phy, ts) -> IndexFileImage:
    """Append keys to a file exactly as successive IndexFile.putKey calls would (format.md §5.4):
    a new image (``append_index_keys`` on copies of the header and slots)."""
    header, slots = image.header.copy(), image.slots.copy()
    new = append_index_keys(header, slots, image.index_entries, key_hash, phy, ts)
    if not len(new):
        return IndexFileImage(header, slots, image.entries, image.hash_slots, image.index_entries)
    entries = np.empty(len(image.entries) + len(new), dtype=INDEX_ENTRY_DTYPE)   # keep big-endian
    entries[:len(image.entries)] = image.entries
    entries[len(image.entries):] = new
    return IndexFileImage(header, slots, entries, image.hash_slots, image.index_entries)


def append_index_keys(header: np.ndarray, slots: np.ndarray, index_entries: int, key_hash, phy,
                      ts, core=native.core) -> np.ndarray:
    """putKey for each key in turn, in bulk: updates ``header`` and ``slots`` in place and
    returns the new entries (``INDEX_ENTRY_DTYPE``), which go at entry number
    ``index_count`` (as it was) onwards.

    Entry ``count + i`` holds key i; its prevIndex is the previous key of the same slot in
    this run, or, for the first key of a slot here, the slot's old value when that is a
    valid entry number (else 0). Chains come from one stable ordering of the keys by slot;
    few full-size temporaries are made (fresh pages are expensive on the VMs this runs on).
    With the native ``core`` the chains are made key by key, as putKey does, without the sort."""
    n = len(key_hash)
    h = header
    hash_slots = len(slots)
    count = int(h["index_count"][0])
    count = FIRST_INDEX if count <= 0 else count
    if count - 1 + n > index_entries - 1:
        raise ValueError(f"{n} more keys do not fit an index file of {index_entries} entries")
    if n == 0:
        return np.zeros(0, dtype=INDEX_ENTRY_DTYPE)
    key_hash = np.asarray(key_hash)
    phy = np.asarray(phy, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    if core is not None and slots.dtype == np.dtype(np.int32) and slots.flags.c_contiguous:
        if key_hash.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            key_hash = key_hash.astype(np.int64)
        new = np.empty(n, dtype=INDEX_ENTRY_DTYPE)
        fresh = core.index_entries(key_hash, np.ascontiguousarray(phy), np.ascontiguousarray(ts), slots, count,
                                   _entries_begin(h, count, ts), _index_entry_layout(), new.view(np.uint8))
        _entries_done(h, count, n, phy, ts, new, fresh)
        return new
    slot = np.remainder(key_hash, hash_slots, dtype=np.int64)
    order, s_sorted = _slot_chain_order(slot, hash_slots)
    del slot
    # along the sorted keys: a key's predecessor is the one before it when the slot is the same
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(s_sorted[1:], s_sorted[:-1], out=first[1:])
    prev_sorted = np.empty(n, dtype=np.int64)
    prev_sorted[0] = 0
    np.add(order[:-1], count, out=prev_sorted[1:])
    heads = np.flatnonzero(first)
    old = slots[s_sorted[heads]].astype(np.int64)
    old_valid = (old > 0) & (old <= count)         # putKey: invalid slot values count as empty
    prev_sorted[heads] = np.where(old_valid, old, INVALID_INDEX)
    tails = np.empty(len(heads), dtype=np.int64)   # the last key of every slot run
    tails[:-1] = heads[1:] - 1
    tails[-1] = n - 1
    slots[s_sorted[tails]] = order[tails] + count
    del s_sorted, first, heads, tails
    prev = np.empty(n, dtype=np.int32)            # scattered compactly, then written in one pass
    prev[order] = prev_sorted
    del order, prev_sorted
    return _new_entries(h, count, n, key_hash, phy, ts, prev, int(np.count_nonzero(~old_valid)))


def _new_entries(h, count: int, n: int, key_hash, phy, ts, prev, fresh: int) -> np.ndarray:
    """The entries of ``append_index_keys`` and its header update, given every key's prevIndex
    and how many slots the keys found empty."""
    new = np.empty(n, dtype=INDEX_ENTRY_DTYPE)
    new["prev_index"] = prev
    del prev
    new["key_hash"] = key_hash
    new["phy_offset"] = phy
    new["time_diff"] = _time_diff(ts, _entries_begin(h, count, ts))
    _entries_done(h, count, n, phy, ts, new, fresh)
    return new


def _entries_begin(h, count: int, ts) -> int:
    """The timestamp new entries' timeDiff counts from: the file's begin, or for a file's first
    keys the first key's own."""
    return int(h["begin_timestamp"][0]) if count > FIRST_INDEX else int(ts[0])


def _entries_done(h, count: int, n: int, phy, ts, new: np.ndarray, fresh: int) -> None:
    """After the entries are made: the first-entry timeDiff quirk and the header's update."""
    if count <= FIRST_INDEX:                       # the first-entry timeDiff quirk
        new["time_diff"][0] = _time_diff(ts[:1], int(h["begin_timestamp"][0]))[0]
        h["begin_timestamp"] = ts[0]
        h["begin_phy_offset"] = phy[0]
    h["end_timestamp"] = ts[-1]
    h["end_phy_offset"] = phy[-1]
    h["hash_slot_count"] = int(h["hash_slot_count"][0]) + fresh
    h["index_count"] = count + n


@lru_cache(maxsize=1)
def _index_entry_layout() -> np.ndarray:
    """``core.index_entries``' layout vector: the entry size and its four fields' positions, from
    ``formats.indexfile`` (each big-endian, as the core writes them)."""
    dt = INDEX_ENTRY_DTYPE
    fields = ("key_hash", "phy_offset", "time_diff", "prev_index")
    if any(not dt.fields[f][0].str.startswith(">") for f in fields):
        raise TypeError("index entry fields must be big-endian")
    return np.array([dt.itemsize, *(dt.fields[f][1] for f in fields)], dtype=np.int64)


def _time_diff(ts: np.ndarray, begin: int) -> np.ndarray:
    """putKey's timeDiff: (ts - begin) / 1000 in seconds, 0 when negative or when begin <= 0,
    at most Integer.MAX_VALUE."""
    if begin <= 0:
        return np.zeros(len(ts), dtype=np.int64)
    diff = ts - begin
    np.clip(diff, 0, INT_MAX * 1000, out=diff)
    diff //= 1000
    return diff


def build_index_image(key_hash: np.ndarray, phy: np.ndarray, ts: np.ndarray, hash_slots: int,
                      index_entries: int, seed_phy: int = 0, seed_ts: int = 0) -> IndexFileImage:
    """One new index file holding these keys (at most index_entries - 1)."""
    return extend_index_image(empty_index_image(hash_slots, index_entries, seed_phy, seed_ts),
                              key_hash, phy, ts)


def read_index_image(path, hash_slots: int, index_entries: int) -> IndexFileImage:
    """Load an existing file's header, slots and used entries (to continue appending)."""
    from rmqtool.io.fileio import ReadOnlyFile
    with ReadOnlyFile(path) as fh:
        header = np.frombuffer(fh.read(0, INDEX_HEADER_DTYPE.itemsize), INDEX_HEADER_DTYPE).copy()
        count = max(int(header["index_count"][0]), FIRST_INDEX)
        header["index_count"] = count
        slots = np.frombuffer(fh.read(slot_position(hash_slots, 0), 4 * hash_slots),
                              INDEX_SLOT_DTYPE).astype(np.int32)
        entries = np.frombuffer(fh.read(entry_position(hash_slots, FIRST_INDEX),
                                        (count - FIRST_INDEX) * INDEX_ENTRY_DTYPE.itemsize),
                                INDEX_ENTRY_DTYPE).copy()
    return IndexFileImage(header, slots, entries, hash_slots, index_entries)


#: slots ``SlotPages`` reads at a time (one 4 KiB page of the slot table)
SLOT_PAGE = 1024


class SlotPages:
    """The slot table of an existing index file, read a page at a time as keys reach it, and
    the slots the keys changed (``touched``): appending keys to an open file needs only those
    (memory and writes bounded by the keys, not by the file). ``slots`` is a zero-filled table
    whose pages the allocator maps only when written."""

    def __init__(self, path, hash_slots: int):
        self.path, self.hash_slots = path, hash_slots
        self.slots = np.zeros(hash_slots, dtype=np.int32)
        self._loaded = np.zeros(-(-hash_slots // SLOT_PAGE), dtype=bool)
        self._touched: list[np.ndarray] = []

    def load(self, slots: np.ndarray, key_hash) -> None:
        """Read into ``slots`` the pages the keys' slots lie in (those not read yet)."""
        from rmqtool.io.fileio import ReadOnlyFile
        slot = np.unique(np.remainder(np.asarray(key_hash, dtype=np.int64), self.hash_slots))
        self._touched.append(slot)
        pages = np.unique(slot // SLOT_PAGE)
        pages = pages[~self._loaded[pages]]
        if not len(pages):
            return
        starts = np.flatnonzero(np.diff(pages, prepend=-2) != 1)
        with ReadOnlyFile(self.path) as fh:
            for k, first in enumerate(starts):
                stop = starts[k + 1] if k + 1 < len(starts) else len(pages)
                lo = int(pages[first]) * SLOT_PAGE
                hi = min((int(pages[stop - 1]) + 1) * SLOT_PAGE, self.hash_slots)
                part = slots[lo:hi]               # read in place, then to this machine's byte order
                fh.read_into(memoryview(part).cast("B"), slot_position(self.hash_slots, lo))
                if part.dtype != np.dtype(INDEX_SLOT_DTYPE):
                    part.byteswap(inplace=True)
        self._loaded[pages] = True

    def touched_runs(self, gap: int = 16) -> list[tuple[int, int]]:
        """(first slot, count) runs covering every slot the keys reached; runs fewer than
        ``gap`` slots apart are joined (those slots were read, so rewriting them is exact)."""
        if not self._touched:
            return []
        slot = np.unique(np.concatenate(self._touched))
        self._touched = [slot]
        cut = np.flatnonzero(np.diff(slot) > gap) + 1
        firsts, lasts = slot[np.r_[0, cut]], slot[np.r_[cut - 1, len(slot) - 1]]
        return [(int(a), int(b) - int(a) + 1) for a, b in zip(firsts, lasts)]


def open_index_image(path, hash_slots: int, index_entries: int) -> tuple[IndexFileImage, SlotPages]:
    """An existing file to append to, without loading it: its header, a ``SlotPages`` table
    (pass ``pages.load`` as the IndexBuilder's ``load_slots``) and no entries (new entries go
    to the file through ``open_file``; appending never reads the old ones)."""
    from rmqtool.io.fileio import ReadOnlyFile
    with ReadOnlyFile(path) as fh:
        header = np.frombuffer(fh.read(0, INDEX_HEADER_DTYPE.itemsize), INDEX_HEADER_DTYPE).copy()
    header["index_count"] = max(int(header["index_count"][0]), FIRST_INDEX)
    pages = SlotPages(path, hash_slots)
    return IndexFileImage(header, pages.slots, np.zeros(0, dtype=INDEX_ENTRY_DTYPE), hash_slots,
                          index_entries), pages


def index_file_name(when_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as the broker names index files."""
    import datetime as dt
    t = dt.datetime.fromtimestamp(when_ms / 1000)
    return t.strftime("%Y%m%d%H%M%S") + f"{when_ms % 1000:03d}"


def index_file_names(kept_names: list[str]):
    """Fresh index file names: now (local time), strictly after every kept name."""
    import time
    now = int(time.time() * 1000)
    floor = max((int(n) for n in kept_names), default=0)
    while True:
        name = index_file_name(now)
        if int(name) > floor:
            floor = int(name)
            yield name
        now += 1


class IndexFileWriter:
    """One IndexFile written as it fills: entries as they are made, then header and slots
    (``path`` None: a dry run, nothing is written); the ``open_file`` of an ``IndexBuilder``, used by
    ``rebuild`` and ``write``. ``pages`` (a ``SlotPages``): ``path`` is an existing file being
    appended to (``open_index_image``): only the new entries, the header and the slots the keys
    reached are written, and ``on_write(offset, length)`` hears each of those writes (a new file:
    the entries' writes; its header and slots go through ``IndexFileImage.write_to``)."""

    def __init__(self, path: Path | None, geometry: IndexGeometry, pages=None, on_write=None):
        self.geometry, self.fd, self.pages = geometry, None, pages
        self.on_write = on_write or (lambda offset, length: None)
        if path is not None and pages is not None:
            self.fd = os.open(path, os.O_RDWR)
            if os.fstat(self.fd).st_size < geometry.file_size:
                os.ftruncate(self.fd, geometry.file_size)
        elif path is not None:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.ftruncate(self.fd, geometry.file_size)

    def write_entries(self, first: int, entries) -> None:
        if self.fd is not None:
            at = entry_position(self.geometry.hash_slots, first)
            pwrite_all(self.fd, entries.view(np.uint8).reshape(-1), at, start_writeback=True)
            self.on_write(at, entries.nbytes)

    def close(self, image: IndexFileImage) -> None:
        if self.fd is None:
            return
        try:
            if self.pages is None:
                image.write_to(self.fd)        # the header and the used slots (no entries here)
            else:
                for first, count in self.pages.touched_runs():
                    at = slot_position(self.geometry.hash_slots, first)
                    pwrite_all(self.fd, image.slots[first:first + count].astype(INDEX_SLOT_DTYPE), at)
                    self.on_write(at, 4 * count)
                header = image.header.astype(INDEX_HEADER_DTYPE).tobytes()
                pwrite_all(self.fd, header, 0)
                self.on_write(0, len(header))
        finally:
            os.close(self.fd)
            self.fd = None
        crash_point("build")


#: keys an IndexBuilder holds before it appends them to the open file (bounds its memory, and
#: what is left to fold after the last batch: rebuild all of 1M messages, 2.5M keys, alternating
#: runs: 1.73 s mean with 1M keys and a 32 MiB CQ buffer, 1.53 s with 256k keys and 8 MiB)
FOLD_KEYS = 1 << 18


class IndexBuilder:
    """Turns the key stream into index files, as IndexService.buildIndex does.

    Every dispatched record first makes sure an index file is open (a new one when the
    last is full, seeded with its end offset and timestamp); a record whose keys overflow
    a file continues in the next. Keys are appended to the open file every ``FOLD_KEYS``
    keys (``append_index_keys``: the same putKey rule whatever the cut). Full files go to
    ``sink(image)`` as soon as they fill; ``finish`` emits the open one (possibly empty).
    To continue after kept files, pass their end as the seed and how many keys of the
    record at ``seed_phy`` they already hold.

    ``open_file()`` (optional) returns where a new file's entries go as they are made
    (``write_entries(first_entry_number, entries)``, then ``close(image)`` with the header
    and slots): memory then stays one file's slots and a fold of keys. Without it the
    entries are kept and the sink gets the whole image. ``load_slots(slots, key_hash)``
    (optional, with an ``open_image`` from ``open_index_image``): called before keys are
    appended to the open image, to read the slots they reach (``SlotPages.load``).
    """

    def __init__(self, hash_slots: int, index_entries: int, sink, seed_phy: int = 0,
                 seed_ts: int = 0, skip_keys_at_seed: int = 0,
                 open_image: IndexFileImage | None = None, open_file=None, fold_keys: int | None = None,
                 load_slots=None):
        self.hash_slots, self.index_entries = hash_slots, index_entries
        self.open_image = open_image
        self.load_slots = load_slots   # (slots, key_hash): fills the open image's slots the keys reach
        self.capacity = index_entries - 1
        if self.capacity < 1:
            raise ValueError("an index file needs at least 2 entries (entry 0 is never used)")
        self.sink, self.open_file = sink, open_file
        self.fold_keys = max(1, fold_keys or FOLD_KEYS)
        self.seed_phy, self.seed_ts = seed_phy, seed_ts
        self.skip_at_seed = skip_keys_at_seed
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_n = 0            # keys pending (not yet appended)
        self._in_file = 0              # keys of the open file (appended or pending)
        self._image: IndexFileImage | None = None     # the open file's header and slots
        self._out = None               # where its entries go (open_file), or None: _parts
        self._parts: list[np.ndarray] = []
        self._open = False
        self._loading = None           # load_slots while the open image is the file being appended to
        if open_image is not None:
            self._in_file = int(open_image.header["index_count"][0]) - FIRST_INDEX
            self._open = True
            self.seed_phy = int(open_image.header["end_phy_offset"][0])
        self._opened_with = self._in_file    # entries the open image already held
        self._filled_at: int | None = seed_phy if (seed_phy or seed_ts) else None
        self.files = 0
        self.entries = 0

    def _record_arrives(self, record_phy: np.ndarray) -> None:
        if self._open or not len(record_phy):
            return
        if self._filled_at is None or bool((record_phy > self._filled_at).any()):
            self._open = True

    def add(self, key_hash, phy, ts, record_phy) -> None:
        key_hash = np.asarray(key_hash)
        phy = np.asarray(phy, dtype=np.int64)
        ts = np.asarray(ts, dtype=np.int64)
        record_phy = np.asarray(record_phy, dtype=np.int64)
        if self.seed_phy > 0:
            keep = phy >= self.seed_phy        # below the open file's end: already indexed
            if self.skip_at_seed:
                at_seed = np.flatnonzero(phy == self.seed_phy)[:self.skip_at_seed]
                keep[at_seed] = False
                self.skip_at_seed -= len(at_seed)
            key_hash, phy, ts = key_hash[keep], phy[keep], ts[keep]
            record_phy = record_phy[record_phy >= self.seed_phy]
        self._record_arrives(record_phy)
        pos = 0
        while pos < len(key_hash):
            take = min(self.capacity - self._in_file, len(key_hash) - pos)
            # copies: the caller's arrays may be views of memory it reuses
            self._pending.append((key_hash[pos:pos + take].copy(), phy[pos:pos + take].copy(),
                                  ts[pos:pos + take].copy()))
            self._pending_n += take
            self._in_file += take
            self._open = True
            pos += take
            if self._in_file == self.capacity:
                self._flush()
                self._filled_at = int(phy[pos - 1])
            elif self._pending_n >= self.fold_keys:
                self._fold()
        self._record_arrives(record_phy)

    def _fold(self) -> None:
        """Append the pending keys to the open file (opening it first)."""
        if self._image is None:
            if self.open_image is not None:
                slots = self.open_image.slots if self.load_slots is not None else self.open_image.slots.copy()
                self._image = IndexFileImage(self.open_image.header.copy(), slots,
                                             self.open_image.entries, self.hash_slots, self.index_entries)
                self.open_image = None
                self._loading = self.load_slots
            else:
                self._image = empty_index_image(self.hash_slots, self.index_entries, self.seed_phy, self.seed_ts)
            self._out = self.open_file() if self.open_file is not None else None
        parts = self._pending
        if not parts:
            return
        kh = np.concatenate([p[0] for p in parts])
        ph = np.concatenate([p[1] for p in parts])
        tt = np.concatenate([p[2] for p in parts])
        self._pending, self._pending_n = [], 0
        image = self._image
        if self._loading is not None:
            self._loading(image.slots, kh)
        first = max(int(image.header["index_count"][0]), FIRST_INDEX)
        new = append_index_keys(image.header, image.slots, self.index_entries, kh, ph, tt)
        if self._out is not None:
            self._out.write_entries(first, new)
        else:
            self._parts.append(new)

    def _flush(self) -> None:
        """Close the open file: its image to the sink, a new file's seed from its end."""
        self._fold()
        image, self._image = self._image, None
        self._loading = None
        if self._parts:
            entries = np.empty(len(image.entries) + sum(len(p) for p in self._parts), INDEX_ENTRY_DTYPE)
            at = len(image.entries)
            entries[:at] = image.entries
            for p in self._parts:
                entries[at:at + len(p)] = p
                at += len(p)
            image.entries, self._parts = entries, []
        added = int(image.header["index_count"][0]) - FIRST_INDEX
        if self._out is not None:
            self._out.close(image)
            self._out = None
        self._open = False
        self.files += 1
        self.entries += added - max(0, self._opened_with)
        self._opened_with = 0
        self._in_file = 0
        self.seed_phy = int(image.header["end_phy_offset"][0])
        self.seed_ts = int(image.header["end_timestamp"][0])
        self.sink(image)

    def finish(self) -> None:
        if self._open:
            self._flush()
