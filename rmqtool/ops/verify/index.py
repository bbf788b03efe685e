"""IndexFile verification: size, header, slots, chains (shallow); entries <-> records (deep).

The chain check is structural and vectorized: within one file, the entries of a bucket
(keyHash % slots) must form exactly the chain slot -> newest -> ... -> oldest -> 0,
i.e. each entry's prevIndex is the previous entry of the same bucket and each slot
holds the newest one. Strictly decreasing prevIndex makes loops impossible. Entries are
read a window at a time (the newest entry per slot carried across), so memory follows
the slot count, not the entry count; deep verify routes them to the record chunk they
point into (``chunks``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formats import JAVA_INT_MAX

from formats.indexfile import (INDEX_ENTRY_DTYPE, INDEX_ENTRY_SIZE, INDEX_HEADER_OFFSETS, INDEX_HEADER_SIZE,
                               INDEX_SLOT_DTYPE, IndexEntry, entry_position, slot_position)
from formats.derive import field_offsets
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.kernels import native
from rmqtool.io.indexfile import IndexHeaderValues, parse_header
from rmqtool.ops.verify.findings import INFO, WARNING, FindingSink
from rmqtool.kernels.search import is_member
from rmqtool.ops.verify.records import RecordTable
from rmqtool.wording import agree, counted

_ENTRY_FIELD = field_offsets(IndexEntry)
INT_MAX = JAVA_INT_MAX
#: entries past indexCount inspected for stray (uncounted) writes
BEYOND_WINDOW = 1 << 16


#: entries read and checked at a time (the chain check carries the newest entry per slot across)
ENTRY_WINDOW = 1 << 18


@dataclass
class IndexFileState:
    path: str
    header: IndexHeaderValues | None
    count: int = 0                 # how many valid entries (1..count)

    @property
    def usable(self) -> bool:
        return self.header is not None and self.count > 0


#: an index entry as routed to the record chunk holding its CommitLog offset
ENTRY_ROW = np.dtype([("phy", np.int64), ("key_hash", np.int32), ("time_diff", np.int32), ("entry", np.int32),
                      ("file", np.int32)])


def entry_rows(entries: np.ndarray, first: int, file_no: int) -> np.ndarray:
    """Entries (``INDEX_ENTRY_DTYPE``) numbered from ``first`` as rows keyed by ``file_no``."""
    rows = np.zeros(len(entries), ENTRY_ROW)
    rows["phy"] = entries["phy_offset"]
    rows["key_hash"] = entries["key_hash"]
    rows["time_diff"] = entries["time_diff"]
    rows["entry"] = np.arange(first, first + len(entries), dtype=np.int32)
    rows["file"] = file_no
    return rows


def check_index_file(path, geometry, sink: FindingSink, live: bool, on_entries=None,
                     window: int | None = None) -> IndexFileState:
    """Shallow checks of one index file; returns its header and how many valid entries it has.

    The valid entries are read ``window`` at a time (default ``ENTRY_WINDOW``) and, when
    ``on_entries`` is given, passed to it as ``(entries, first entry number)``.
    """
    S, N = geometry.hash_slots, geometry.index_entries
    window = window or ENTRY_WINDOW
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        if size != geometry.file_size:
            sink.add("index.file-size", path, min(size, geometry.file_size),
                     f"size {size} != 40 + 4*{S} + 20*{N} = {geometry.file_size}"
                     + (" (truncated)" if size < geometry.file_size else ""), excerpt=False)
        head = fh.read(0, INDEX_HEADER_SIZE, exact=False) if size >= INDEX_HEADER_SIZE else b""
        if len(head) < INDEX_HEADER_SIZE:
            return IndexFileState(str(path), None)
        header = parse_header(head)
        count_at = INDEX_HEADER_OFFSETS["index_count"]
        if header.index_count > N or header.index_count < 0:
            sink.add("index.header", path, count_at, f"indexCount {header.index_count} outside [0, {N}]",
                     excerpt_len=4)
        count = min(max(header.index_count, 1), N)
        # slots (whatever of them the file holds)
        slot_end = min(size, slot_position(S, S))
        raw = fh.read(INDEX_HEADER_SIZE, (slot_end - INDEX_HEADER_SIZE) // 4 * 4, exact=False)
        slots = np.frombuffer(raw, INDEX_SLOT_DTYPE).astype(np.int32)   # native order; [0, count] fits
        del raw
        _check_slots(path, S, header, count, slots, sink, live)
        # entries 1..count-1, a window at a time, then a bounded window past them
        e0 = entry_position(S, 0)
        have = max(0, (size - e0) // INDEX_ENTRY_SIZE)
        if have < count:
            sink.add("index.file-size", path, size, f"indexCount {header.index_count} but the file holds only "
                     f"{counted(have, 'entry')}", excerpt=False)
        stop = min(count, have)
        n = max(stop - 1, 0)
        chains = _Chains(path, S, n, slots, sink)
        first_phy = last_phy = None
        for lo in range(1, stop, window):
            hi = min(lo + window, stop)
            raw = fh.read(entry_position(S, lo), (hi - lo) * INDEX_ENTRY_SIZE, exact=False)
            entries = np.frombuffer(raw, INDEX_ENTRY_DTYPE, len(raw) // INDEX_ENTRY_SIZE)
            if not len(entries):           # the file shrank while it was read
                break
            _check_window(path, S, n, entries, lo, sink)
            chains.feed(entries, lo)
            if first_phy is None:
                first_phy = int(entries["phy_offset"][0])
            last_phy = int(entries["phy_offset"][-1])
            if on_entries is not None:
                on_entries(entries, lo)
            if lo + len(entries) < hi:
                break
            del entries, raw
        chains.finish()
        beyond_end = min(count + BEYOND_WINDOW, N, have)
        if beyond_end > count:
            raw = fh.read(entry_position(S, count), (beyond_end - count) * INDEX_ENTRY_SIZE, exact=False)
            whole = len(raw) // INDEX_ENTRY_SIZE
            beyond = np.frombuffer(raw, np.uint8, whole * INDEX_ENTRY_SIZE).reshape(whole, INDEX_ENTRY_SIZE)
            nz = np.flatnonzero(beyond.any(axis=1))
            if len(nz):
                first = count + int(nz[0])
                live_race = live and len(nz) == 1 and first == count
                sink.add("index.header-count", path, entry_position(S, first),
                         f"{len(nz)} non-empty entr{'y' if len(nz) == 1 else 'ies'} past indexCount "
                         f"{header.index_count} (first: entry {first})", INFO if live_race else None,
                         excerpt_len=INDEX_ENTRY_SIZE)
    if first_phy is not None:
        if header.begin_phy_offset != first_phy:
            sink.add("index.header", path, INDEX_HEADER_OFFSETS["begin_phy_offset"],
                     f"beginPhyOffset {header.begin_phy_offset} != entry 1's offset {first_phy}", excerpt_len=8)
        if header.end_phy_offset != last_phy:
            sink.add("index.header", path, INDEX_HEADER_OFFSETS["end_phy_offset"],
                     f"endPhyOffset {header.end_phy_offset} != the last entry's offset {last_phy}", excerpt_len=8)
    return IndexFileState(str(path), header, max(stop - 1, 0))


def _check_slots(path, S: int, header: IndexHeaderValues, count: int, slots: np.ndarray, sink: FindingSink,
                 live: bool) -> None:
    bad_slot = np.flatnonzero((slots < 0) | (slots > count))
    for s in bad_slot:
        sink.add("index.slot-range", path, slot_position(S, int(s)),
                 f"slot {int(s)} holds {int(slots[s])}, outside [0, indexCount {header.index_count}]", excerpt_len=4)
    at_count = np.flatnonzero(slots == count)
    for s in at_count:      # entry written, count not yet bumped: a racing writer, or a lost update
        sink.add("index.slot-range", path, slot_position(S, int(s)),
                 f"slot {int(s)} holds {count} == indexCount (entry not yet counted)",
                 INFO if live else WARNING, excerpt_len=4)
    used = int(np.count_nonzero((slots > 0) & (slots <= count)))
    if header.index_count > 1 and header.hash_slot_count != used:
        sink.add("index.header-count", path, INDEX_HEADER_OFFSETS["hash_slot_count"],
                 f"hashSlotCount {header.hash_slot_count} != {counted(used, 'slot')} in use", excerpt_len=4)


def _buckets(h: np.ndarray, S: int) -> np.ndarray:
    """keyHash % slots, -1 for a negative keyHash (which no chain can hold)."""
    bucket = h % (np.int32(S) if S <= INT_MAX else np.int64(S))
    bucket[h < 0] = -1
    return bucket


def _check_window(path, S: int, n: int, entries: np.ndarray, first: int, sink: FindingSink) -> None:
    """Per-entry checks of entries numbered from ``first`` (of ``n`` valid ones): prevIndex below
    the entry, timeDiff >= 0, keyHash >= 0."""
    num = np.arange(first, first + len(entries), dtype=np.int32)
    prev = entries["prev_index"].astype(np.int32)
    for i in np.flatnonzero(prev >= num):
        e = int(num[i])
        sink.add("index.chain-loop", path, entry_position(S, e) + _ENTRY_FIELD["prev_index"],
                 f"entry {e} has prevIndex {int(prev[i])}, not below its own number: the chain would "
                 f"{'loop' if prev[i] <= n else 'leave the valid entries'}", excerpt_len=4)
    diff = entries["time_diff"].astype(np.int32)
    for i in np.flatnonzero(diff < 0):
        e = int(num[i])
        sink.add("index.time-diff", path, entry_position(S, e) + _ENTRY_FIELD["time_diff"],
                 f"entry {e} has negative timeDiff {int(diff[i])}", excerpt_len=4)
    h = entries["key_hash"].astype(np.int32)
    for i in np.flatnonzero(h < 0):
        e = int(num[i])
        sink.add("index.chain", path, entry_position(S, e), f"entry {e} has negative keyHash {int(h[i])}",
                 excerpt_len=4)


class _Chains:
    """The slot chains, checked a window of entries at a time.

    The broker's putKey makes each entry's prevIndex the newest earlier entry of its slot
    (keyHash % slots) and the slot the newest entry: so every entry's prevIndex must be the
    previous entry hashing to the same slot (0 for the first), and every slot the newest.
    ``newest`` carries, from window to window, the newest entry seen per slot.
    """

    def __init__(self, path, S: int, n: int, slots: np.ndarray, sink: FindingSink):
        self.path, self.S, self.n, self.slots, self.sink = path, S, n, slots, sink
        self.newest = np.zeros(S, dtype=np.int32)

    def feed(self, entries: np.ndarray, first: int) -> None:
        num = np.arange(first, first + len(entries), dtype=np.int64)
        prev = entries["prev_index"].astype(np.int64)
        bucket = _buckets(entries["key_hash"].astype(np.int32), self.S).astype(np.int64)
        if self._consistent(bucket, prev, num, first):
            return
        keep = np.flatnonzero(bucket >= 0)
        if not len(keep):
            return
        # entries of one slot together, in entry order (a unique sort key per entry)
        order = keep[np.argsort(bucket[keep] * len(entries) + (num[keep] - first))]
        b = bucket[order]
        same = np.zeros(len(order), dtype=bool)
        same[1:] = b[1:] == b[:-1]
        expect = np.where(same, np.roll(num[order], 1), self.newest[b])
        got = prev[order]
        wrong = np.flatnonzero((got != expect) & (got < num[order]))       # loops are chain-loop's
        for k in wrong[np.argsort(order[wrong])]:
            e, bk = int(num[order[k]]), int(b[k])
            self.sink.add("index.chain", self.path, entry_position(self.S, e) + _ENTRY_FIELD["prev_index"],
                          f"entry {e} (slot {bk}) has prevIndex {int(got[k])}, the previous entry of its "
                          f"slot is {int(expect[k])}", excerpt_len=4)
        last = np.ones(len(order), dtype=bool)
        last[:-1] = ~same[1:]
        self.newest[b[last]] = num[order][last]

    def _consistent(self, bucket, prev, num, first: int, core=native.core) -> bool:
        """True (and ``newest`` moved on) when every entry of the window links to the previous
        entry of its slot: the test without a sort, for the usual case of nothing wrong. With the
        native ``core`` the chains are replayed entry by entry (``chain_replay``), the same test.

        Sufficient: every link goes to an earlier entry of the same slot inside the window or,
        leaving the window, to the slot's newest entry before it; no two links share a target.
        Then a slot's k entries have k distinct targets among {newest before, its first k-1
        entries}, and decreasing links leave one way to pick them: the chain in order.
        """
        if core is not None and self.newest.dtype == np.int32 and self.newest.flags.c_contiguous:
            return core.chain_replay(np.ascontiguousarray(bucket, np.int64), np.ascontiguousarray(prev, np.int64),
                                     first, self.newest)
        if (bucket < 0).any() or (prev < 0).any() or (prev >= num).any():
            return False
        inside = prev >= first
        target = prev[inside] - first
        if (bucket[target] != bucket[inside]).any():
            return False
        if len(target) and np.bincount(target, minlength=len(num)).max() > 1:
            return False
        out = bucket[~inside]
        if (prev[~inside] != self.newest[out]).any():
            return False
        if len(out) and np.bincount(out, minlength=self.S).max() > 1:
            return False
        linked = np.zeros(len(num), dtype=bool)
        linked[target] = True
        self.newest[bucket[~linked]] = num[~linked]         # each slot's newest: the entry nobody links to
        return True

    def finish(self) -> None:
        """Every slot must hold the newest entry hashing to it (values past the entries are slot-range's)."""
        slots = self.slots
        want = self.newest[:len(slots)]
        in_range = (slots >= 0) & (slots <= self.n)
        for s in np.flatnonzero((slots != want) & in_range):
            self.sink.add("index.chain", self.path, slot_position(self.S, int(s)),
                          f"slot {int(s)} holds {int(slots[s])}, the newest entry hashing to it is {int(want[s])}",
                          excerpt_len=4)


def deep_index_checks(state: IndexFileState, geometry, rows: np.ndarray, table: RecordTable, store,
                      valid_end: int, sink: FindingSink, selected: np.ndarray, past: "PastEnd") -> np.ndarray:
    """Entries (routed ``rows`` of one file) -> records with a matching key; returns
    (record << 32 | keyHash) of matched entries. Entries past the valid end are counted in ``past``."""
    S = geometry.hash_slots
    ent = rows
    if not len(ent) or not table.has_keys:
        return np.zeros(0, np.int64)
    # columns are gathered only where used (few full-size temporaries)
    phy = ent["phy"]
    exact, inside = table.locate(phy)
    miss = exact < 0
    miss &= phy >= store.commitlog.min_offset            # live part only
    beyond = miss & (phy >= valid_end)
    if beyond.any():
        past.add(state.path, ent["entry"][beyond])
    for i in np.flatnonzero(miss & ~beyond):
        e = int(ent["entry"][i])
        what = (f"into the middle of the record at {int(table.cols['phy'][inside[i]])}" if inside[i] >= 0
                else "where no record was found")
        sink.add("index.entry-target", state.path, entry_position(S, e) + _ENTRY_FIELD["phy_offset"],
                 f"entry {e} points at commitlog offset {int(phy[i])}, {what}", excerpt_len=8)
    del inside, miss, beyond
    hit = np.flatnonzero(exact >= 0)
    r = exact[hit]
    del exact
    pairs = r << 32
    pairs |= ent["key_hash"][hit].astype(np.int64)
    keys = table.cols["key_rec"] << 32
    keys |= table.cols["key_hash"].astype(np.int64)
    ok = is_member(pairs, keys)
    del keys
    sel = selected[r]
    for k in np.flatnonzero(~ok & sel):
        i = int(hit[k])
        e = int(ent["entry"][i])
        h = int(ent["key_hash"][i])
        rec = table.describe(int(r[k]))
        sink.add("index.entry-key", state.path, entry_position(S, e),
                 f"entry {e} (keyHash {h}, slot {h % S}) points at the record at "
                 f"{rec['phy_offset']} ({rec['topic']}), none of whose keys hashes to it", excerpt_len=INDEX_ENTRY_SIZE)
    # entry time (entry 1 carries the previous file's begin: skipped)
    hdr = state.header
    if hdr.begin_timestamp > 0:
        later = np.flatnonzero(ent["entry"][hit] >= 2)
        want = table.cols["store_ts"][r[later]]
        want -= hdr.begin_timestamp
        want //= 1000
        np.maximum(want, 0, out=want)
        np.minimum(want, INT_MAX, out=want)
        got = ent["time_diff"][hit[later]]
        for k in np.flatnonzero((want != got) & sel[later]):
            i = int(hit[later[k]])
            e = int(ent["entry"][i])
            sink.add("index.entry-time", state.path, entry_position(S, e) + _ENTRY_FIELD["time_diff"],
                     f"entry {e} has timeDiff {int(got[k])} s, its record's store time gives {int(want[k])} s",
                     excerpt_len=4)
    return pairs[ok]


class PastEnd:
    """Index entries whose offset is at or past the CommitLog's valid end, per file (counted
    chunk by chunk, reported once per file by ``report``)."""

    def __init__(self):
        self.files: dict[str, tuple[int, int]] = {}       # path -> (count, first entry)

    def add(self, path: str, entries: np.ndarray) -> None:
        n, first = self.files.get(path, (0, None))
        low = int(entries.min())
        self.files[path] = (n + len(entries), low if first is None else min(first, low))

    def merge(self, later: "PastEnd") -> None:
        """Add what ``later`` counted over the records after these (an engine task's chunk)."""
        for path, (n, low) in later.files.items():
            had, first = self.files.get(path, (0, None))
            self.files[path] = (had + n, low if first is None else min(first, low))

    def report(self, geometry, valid_end: int, sink: FindingSink) -> None:
        for path, (n, first) in self.files.items():
            sink.add("index.entry-target", path, entry_position(geometry.hash_slots, first),
                     f"{n} entr(ies) from entry {first} point at or past the CommitLog's valid end "
                     f"{valid_end}", WARNING, excerpt_len=INDEX_ENTRY_SIZE)


def missing_keys(table: RecordTable, indexed_pairs: np.ndarray, lo: int, frontier: int, valid_end: int,
                 sink: FindingSink, selected: np.ndarray) -> list[int]:
    """Keys of records inside [lo, frontier) absent from the index (``index.missing``); returns
    the records not (fully) indexed yet (``not_indexed_finding`` reports them once)."""
    if not table.has_keys or not len(table.cols["key_rec"]):
        return []
    c = table.cols
    kr = c["key_rec"]
    keys = kr << 32
    keys |= c["key_hash"].astype(np.int64)
    present = is_member(keys, indexed_pairs)
    del keys
    # per-record conditions, then gathered per key (bool gathers, no per-key int64 temporaries)
    phy = c["phy"]
    usable_rec = selected & ~c["carved"] & (phy + c["size"] <= valid_end)
    miss = usable_rec[kr]
    miss &= ~present
    # the record at the frontier may have been cut mid-way (file filled, crash before the next put)
    hole = np.flatnonzero(miss & ((phy >= lo) & (phy < frontier))[kr])
    if len(hole):
        recs, first, counts = np.unique(kr[hole], return_index=True, return_counts=True)
        for j in np.argsort(first, kind="stable"):       # records in the order their first key comes
            i = int(recs[j])
            path, pos = table.where(i)
            sink.add("index.missing", path, pos, f"record at {pos} ({table.topics.names[int(c['topic_id'][i])]}) "
                     f"lies inside the indexed range but {int(counts[j])} of its {agree(int(counts[j]), 'keys is', 'keys are')} in no index file")
    pending = np.unique(kr[miss & (phy >= frontier)[kr]])
    return [int(i) for i in pending]


def not_indexed_finding(pending, frontier: int, sink: FindingSink) -> None:
    """One ``index.not-indexed`` for every record past the index frontier (``forecast.Pending``)."""
    if pending.count:
        path, pos, phy = pending.first
        sink.add("index.not-indexed", path, pos,
                 f"{counted(pending.count, 'record')} with keys from commitlog offset {phy} {agree(pending.count, 'is', 'are')} at or "
                 f"past the index frontier {frontier}: not (fully) indexed yet (the broker indexes them at restart)",
                 excerpt=False)
