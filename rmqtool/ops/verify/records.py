"""Per-record work on scanner batches: deep checks and the columns the cross-checks join on.

``check_batch`` is a pure function from one ``RecordBatch`` to findings (body CRC,
``__CRC32#`` property CRC, stored PHYSICALOFFSET); ``batch_columns`` turns a batch into
the per-record arrays (topic id, tagsCode, index key hashes, ...) that the ConsumeQueue
and index cross-checks join with ``kernels.search``. Both run on numpy columns; only
the CRCs and non-ASCII strings take a per-record path. Another engine can call them on
its own batches and concatenate the results with ``RecordTable.from_parts``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from formats import commitlog as cl
from rmqtool.io.dledger_layout import is_entry_file
from rmqtool.kernels import native
from rmqtool.kernels.gather import gather_bytes, row_width, span_rows
from rmqtool.records.scan import body_crc_matches
from rmqtool.broker.dispatch import (DISPATCH_STOP_CHECK, DispatchConfig, delay_stop_text, known_hashes, record_index_keys,
                                     record_tags_codes, schedule_delays)
from rmqtool.kernels.javahash import span_hashes
from rmqtool.kernels.search import search_sorted
from rmqtool.ops.verify.dledger import entry_columns
from rmqtool.ops.verify.findings import Finding, ERROR

CRC_MASK = cl.BODY_CRC_MASK
_CRC_PREFIX = np.frombuffer((cl.PROPERTY_CRC32 + cl.NAME_VALUE_SEPARATOR).encode("ascii"), np.uint8)


def buf_excerpt(batch, position: int, length: int = 16, before: int = 16) -> str:
    """Hex excerpt from the batch window (same format as ``findings.hex_excerpt``)."""
    rel = position - batch.buf_base
    start = max(0, rel - before)
    raw = batch.buf[start:rel + length].tobytes()
    cut = rel - start
    return f"{start + batch.buf_base}: {raw[:cut].hex()} [{raw[cut:].hex()}]"


_SHORT_SPAN = 256                  # topic_ids compares topics up to this many bytes at once


@dataclass
class TopicTable:
    """Topic strings seen in the scan, as small integer ids."""
    names: list[str] = field(default_factory=list)
    ids: dict[bytes, int] = field(default_factory=dict)
    by_name: dict[str, int] = field(default_factory=dict)
    # topic_ids' memory of earlier batches: (hash << 16 | length) -> id, its sorted arrays, padded bytes per width
    _key_ids: dict = field(default_factory=dict, repr=False, compare=False)
    _lookup: tuple | None = field(default=None, repr=False, compare=False)
    _canon: dict = field(default_factory=dict, repr=False, compare=False)

    def intern(self, raw: bytes) -> int:
        tid = self.ids.get(raw)
        if tid is None:
            tid = len(self.names)
            name = raw.decode("utf-8", "replace")
            self.ids[raw] = tid
            self.names.append(name)
            self.by_name.setdefault(name, tid)
        return tid

    def lookup(self, name: str) -> int:
        return self.by_name.get(name, -1)

    def topic_ids(self, batch, core=native.core) -> np.ndarray:
        """Topic id of every record of a batch (grouped by byte hash + length, then verified).

        Keys (hash, length) seen in earlier batches map straight to their id; those records'
        bytes are then compared with the topic's in one matrix pass. Only records with a new
        key (or failing the comparison) are grouped and interned one topic at a time, in the
        order of their keys. With the native ``core`` the batch's records are grouped by one C
        loop (``span_groups``, every member's bytes checked) and each group interned, new topics
        in the same order; a key shared by two topics hands the batch to the path above.
        """
        buf = batch.buf
        starts, lens = batch.topic_start, batch.topic_len
        h, _ = span_hashes(buf, starts, lens, known=known_hashes(batch, "topic"))
        key = (h.astype(np.int64) & 0xFFFFFFFF) << 16 | (lens & 0xFFFF)
        if core is not None and len(starts):
            groups, first = np.empty(len(starts), np.int64), np.empty(len(starts), np.int64)
            count = core.span_groups(buf, np.ascontiguousarray(starts, np.int64),
                                     np.ascontiguousarray(np.maximum(lens, 0), np.int64), key, groups, first)
            if count >= 0:
                first = first[:count]
                raws = [buf[a:a + b].tobytes() for a, b in zip(starts[first].tolist(), lens[first].tolist())]
                fresh = sorted((int(key[i]), raw) for i, raw in zip(first.tolist(), raws) if raw not in self.ids)
                for k, raw in fresh:
                    self._remember(k, self.intern(raw))
                return np.array([self.ids[raw] for raw in raws], dtype=np.int32)[groups]
        out = np.full(len(starts), -1, dtype=np.int32)
        self._known_topics(buf, starts, lens, key, out)
        rest = np.flatnonzero(out < 0)
        if not len(rest):
            return out
        key_r = key[rest]
        uniq, first, inv = np.unique(key_r, return_index=True, return_inverse=True)
        for g in range(len(uniq)):
            members = rest[np.flatnonzero(inv == g)] if len(uniq) > 1 else rest
            i0 = int(rest[first[g]])
            n = int(lens[i0])
            raw0 = buf[starts[i0]:starts[i0] + n]
            if n and len(members) > 1:
                mat = buf[starts[members][:, None] + np.arange(n)]
                same = (mat == raw0).all(axis=1)
            else:
                same = np.ones(len(members), dtype=bool)
            tid = self.intern(raw0.tobytes())
            out[members[same]] = tid
            self._remember(int(uniq[g]), tid)
            for i in members[~same]:      # a byte-hash collision between two topics: exact path
                out[i] = self.intern(buf[starts[i]:starts[i] + lens[i]].tobytes())
        return out

    def _remember(self, key: int, tid: int) -> None:
        if key not in self._key_ids:
            self._key_ids[key] = tid
            self._lookup = None

    def _known_topics(self, buf, starts, lens, key, out) -> None:
        """Fill ``out`` for records whose key is known and whose bytes equal that topic's."""
        if not self._key_ids or not len(key):
            return
        if self._lookup is None:
            keys = np.array(sorted(self._key_ids), dtype=np.int64)
            self._lookup = (keys, np.array([self._key_ids[k] for k in keys.tolist()], dtype=np.int32))
            self._canon.clear()
        keys, ids = self._lookup
        at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
        hit = np.flatnonzero(keys[at] == key)
        if not len(hit):
            return
        tid = ids[at[hit]]
        n = lens[hit]
        width = int(row_width(np.array([max(int(n.max()), 1)]), 8)[0])
        if width > _SHORT_SPAN:
            return
        canon = self._canon.get(width)
        if canon is None:
            canon = np.zeros((len(self.names), width), dtype=np.uint8)
            for raw, t in self.ids.items():
                if len(raw) <= width:
                    canon[t, :len(raw)] = np.frombuffer(raw, np.uint8)
            self._canon[width] = canon
        rows = span_rows(buf, starts[hit], width)
        same = ((rows == canon[tid]) | (np.arange(width) >= n[:, None])).all(axis=1)
        out[hit[same]] = tid[same]


def per_queue(topic_id, queue_id, store_ts, size=None) -> list[tuple[int, int, int, int, int, int]]:
    """Records summed per queue, in (topic id, queue id) order: (topic id, queue id, records, bytes
    (0 without ``size``), oldest and newest store time) of each queue they fall in."""
    tid, qid = np.asarray(topic_id, np.int64), np.asarray(queue_id, np.int64)
    ts = np.asarray(store_ts, np.int64)
    keys, inv = np.unique((tid << 32) | (qid & 0xFFFFFFFF), return_inverse=True)
    n = np.bincount(inv, minlength=len(keys))
    b = (np.bincount(inv, weights=np.asarray(size, np.int64), minlength=len(keys)).astype(np.int64)
         if size is not None else np.zeros(len(keys), np.int64))
    lo = np.full(len(keys), np.iinfo(np.int64).max)
    hi = np.full(len(keys), np.iinfo(np.int64).min)
    np.minimum.at(lo, inv, ts)
    np.maximum.at(hi, inv, ts)
    return [(k >> 32, int(np.int32(k & 0xFFFFFFFF)), c, by, low, high)
            for k, c, by, low, high in zip(keys.tolist(), n.tolist(), b.tolist(), lo.tolist(), hi.tolist())]


def batch_columns(batch, topics: TopicTable, deep: bool, delay_levels_ms: list[int] | None = None) -> dict:
    """Per-record arrays the cross-checks need (``key_rec`` indexes this batch's records);
    ``delay_levels_ms``: the store's delay table (``delay.store_delay_levels``), for tagsCode."""
    tx = (batch.sys_flag & cl.TRANSACTION_MASK).astype(np.int8)
    topic_id = topics.topic_ids(batch)
    cols = {
        "phy": batch.phy_offset.astype(np.int64),
        "position": batch.position.astype(np.int64),
        "size": batch.size.astype(np.int64),
        "queue_id": batch.queue_id.astype(np.int32),
        "queue_offset": batch.queue_offset.astype(np.int64),
        "tx": tx,
        "store_ts": batch.store_timestamp.astype(np.int64),
        "topic_id": topic_id,
        "carved": np.full(len(batch), bool(batch.carved)),
    }
    if deep:             # what the dispatcher computes, by the dispatcher's own functions
        config = None if delay_levels_ms is None else DispatchConfig(delay_levels_ms)
        cols["tags_code"] = record_tags_codes(batch, config)
        cols["key_rec"], cols["key_hash"] = record_index_keys(batch)
    if is_entry_file(batch.path) and not batch.carved:   # for ``dledger.EntryChecks``, taken out before storing
        cols.update(entry_columns(batch))
    return cols


def check_batch(batch, deep: bool = True) -> list[Finding]:
    """Per-record checks of one batch: at every level the broker's DELAY record check
    (``dispatch.schedule_delays``); deep: body CRC, __CRC32# property CRC, stored offset."""
    if not len(batch):
        return []
    out: list[Finding] = delay_stop_findings(batch)
    if not deep:
        return out
    cols = batch.columns
    buf = batch.buf
    base = batch.buf_base
    carved = " (carved record)" if batch.carved else ""
    # stored PHYSICALOFFSET
    bad = np.flatnonzero(batch.stored_phy_offset != batch.phy_offset)
    field_at = cl.MESSAGE_HEAD_OFFSETS["physical_offset"]
    for i in bad:
        pos = int(batch.position[i])
        out.append(Finding(ERROR, "commitlog.phy-offset", batch.path, pos + field_at,
                           f"record at position {pos} stores PHYSICALOFFSET {int(batch.stored_phy_offset[i])}, "
                           f"expected {int(batch.phy_offset[i])}{carved}",
                           buf_excerpt(batch, pos + field_at, 8)))
    # body CRC (the scanner's helper: & 0x7FFFFFFF, no check for an empty body); a scan made
    # with crc_column has done it while the bytes were in the cache
    crc_ok = cols.get("body_crc_ok")
    if crc_ok is None:
        local = {"body_start": batch.body_start, "body_len": batch.body_len, "body_crc": batch.body_crc}
        crc_ok = body_crc_matches(buf, local)
    for i in np.flatnonzero(~crc_ok):
        pos = int(batch.position[i])
        s, n = int(batch.body_start[i]), int(batch.body_len[i])
        got = zlib.crc32(buf[s:s + n]) & CRC_MASK
        out.append(Finding(ERROR, "commitlog.body-crc", batch.path, pos,
                           f"record at position {pos}: body CRC {got} (crc32 of {n} body bytes at "
                           f"{s + base}) != stored BODYCRC {int(batch.body_crc[i])}{carved}",
                           buf_excerpt(batch, pos)))
    # __CRC32# property tail (5.2.0+ enabledAppendPropCRC)
    plen = cols["props_len"]
    cand = np.flatnonzero(plen >= cl.CRC32_RESERVED_LENGTH)
    if len(cand):
        tail = cols["props_start"][cand] + plen[cand] - cl.CRC32_RESERVED_LENGTH
        hit = (gather_bytes(buf, tail, len(_CRC_PREFIX)) == _CRC_PREFIX).all(axis=1)
        for j in np.flatnonzero(hit):
            i = int(cand[j])
            rel = int(batch.position[i]) - base
            size = int(batch.size[i])
            want = cl.crc32_property_digits(zlib.crc32(buf[rel:rel + size - cl.CRC32_RESERVED_LENGTH]) & CRC_MASK)
            d0 = int(tail[j]) + len(_CRC_PREFIX)
            stored = buf[d0:d0 + 10].tobytes().decode("ascii", "replace")
            if stored != want:
                out.append(Finding(ERROR, "commitlog.prop-crc", batch.path, d0 + base,
                                   f"record at position {rel + base}: __CRC32# digits {stored!r} != {want!r} "
                                   f"computed over its first {size - cl.CRC32_RESERVED_LENGTH} bytes{carved}",
                                   buf_excerpt(batch, d0 + base, 10)))
    return out


def delay_stop_findings(batch) -> list[Finding]:
    """``dispatch.stop`` at the first record of a (walked, not carved) batch whose DELAY fails
    the broker's record check: where its recovery ends the CommitLog."""
    if batch.carved:
        return []
    delays = schedule_delays(batch)
    if delays.failed_row is None:
        return []
    pos = int(batch.position[delays.failed_row])
    text = delay_stop_text(delays.failed_text, batch.file_base + pos)
    return [Finding(ERROR, DISPATCH_STOP_CHECK, batch.path, pos, text, buf_excerpt(batch, pos))]


@dataclass
class RecordTable:
    """Every record of the walk as columns, in commitlog order, plus its index keys."""
    cols: dict
    topics: TopicTable
    files: list[str]

    @classmethod
    def from_parts(cls, parts: list[dict], topics: TopicTable, files: list[str]) -> "RecordTable":
        """Concatenate per-batch columns (each part carries ``file_idx``; key_rec is rebased)."""
        names = ("phy", "position", "size", "queue_id", "queue_offset", "tx", "store_ts", "topic_id",
                 "carved", "file_idx", "tags_code")
        cols: dict = {}
        for name in names:
            arrays = [p[name] for p in parts if name in p]
            if arrays and len(arrays) == len(parts):
                cols[name] = np.concatenate(arrays)
            elif not parts:
                cols[name] = np.zeros(0, dtype=np.int64)
        rebased, hashes, count = [], [], 0
        for p in parts:
            if "key_rec" in p:
                rebased.append(p["key_rec"] + count)
                hashes.append(p["key_hash"])
            count += len(p["phy"])
        if rebased:
            cols["key_rec"] = np.concatenate(rebased).astype(np.int64)
            cols["key_hash"] = np.concatenate(hashes).astype(np.int32)
        order = cols["phy"]
        if len(order) > 1 and not (np.diff(order) > 0).all():
            raise ValueError("record batches are not in commitlog order")
        return cls(cols, topics, files)

    def __len__(self) -> int:
        return len(self.cols["phy"])

    @property
    def has_keys(self) -> bool:
        return "key_rec" in self.cols

    def where(self, i: int) -> tuple[str, int]:
        return self.files[int(self.cols["file_idx"][i])], int(self.cols["position"][i])

    def describe(self, i: int) -> dict:
        c = self.cols
        return {"phy_offset": int(c["phy"][i]), "size": int(c["size"][i]),
                "topic": self.topics.names[int(c["topic_id"][i])], "queue_id": int(c["queue_id"][i]),
                "queue_offset": int(c["queue_offset"][i]), "store_timestamp": int(c["store_ts"][i])}

    def locate(self, offsets: np.ndarray):
        """For each commitlog offset: (record index or -1 when none starts there, containing index or -1)."""
        phy = self.cols["phy"]
        offsets = np.asarray(offsets)
        if not len(phy):
            none = np.full(len(offsets), -1, dtype=np.int64)
            return none, none.copy()
        idx = search_sorted(phy, offsets, side="right")
        idx -= 1
        ok = idx >= 0
        safe = np.maximum(idx, 0)
        start = phy[safe]
        exact = start == offsets
        exact &= ok
        start += self.cols["size"][safe]                  # the record's end
        del safe
        inside = offsets < start
        inside &= ok
        inside &= ~exact
        del start
        at = np.where(exact, idx, -1)
        idx[~inside] = -1
        return at, idx
