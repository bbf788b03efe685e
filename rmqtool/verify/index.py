"""IndexFile verification: size, header, slots, chains (shallow); entries <-> records (deep).

The chain check is structural and vectorized: within one file, the entries of a bucket
(keyHash % slots) must form exactly the chain slot -> newest -> ... -> oldest -> 0,
i.e. each entry's prevIndex is the previous entry of the same bucket and each slot
holds the newest one. Strictly decreasing prevIndex makes loops impossible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formats.indexfile import (INDEX_ENTRY_DTYPE, INDEX_ENTRY_SIZE, INDEX_HEADER_OFFSETS, INDEX_HEADER_SIZE,
                               INDEX_SLOT_DTYPE, IndexEntry, entry_position, slot_position)
from formats.derive import field_offsets
from rmqtool.fileio import ReadOnlyFile
from rmqtool.indexfile import IndexHeaderValues, parse_header
from rmqtool.verify.findings import INFO, WARNING, FindingSink
from rmqtool.verify.records import RecordTable, is_member

_ENTRY_FIELD = field_offsets(IndexEntry)
INT_MAX = (1 << 31) - 1
#: entries past indexCount inspected for stray (uncounted) writes
BEYOND_WINDOW = 1 << 16


@dataclass
class IndexFileState:
    path: str
    header: IndexHeaderValues | None
    entries: np.ndarray            # valid entries 1..count-1 (INDEX_ENTRY_DTYPE)
    first_entry: int = 1

    @property
    def usable(self) -> bool:
        return self.header is not None and len(self.entries) > 0


def check_index_file(path, geometry, sink: FindingSink, live: bool) -> IndexFileState:
    """Shallow checks of one index file; returns its header and valid entries."""
    S, N = geometry.hash_slots, geometry.index_entries
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        head = fh.read(0, min(size, INDEX_HEADER_SIZE), exact=False)
        count_guess = parse_header(head).index_count if len(head) == INDEX_HEADER_SIZE else 0
        # header, slots, the counted entries and a bounded window past them (not the unused tail)
        want = entry_position(S, min(max(count_guess, 1) + BEYOND_WINDOW, N))
        data = np.frombuffer(fh.read(0, min(size, want), exact=False), np.uint8)
    if size != geometry.file_size:
        sink.add("index.file-size", path, min(size, geometry.file_size),
                 f"size {size} != 40 + 4*{S} + 20*{N} = {geometry.file_size}"
                 + (" (truncated)" if size < geometry.file_size else ""), excerpt=False)
    empty = np.zeros(0, INDEX_ENTRY_DTYPE)
    if size < INDEX_HEADER_SIZE:
        return IndexFileState(str(path), None, empty)
    header = parse_header(data[:INDEX_HEADER_SIZE].tobytes())
    count_at = INDEX_HEADER_OFFSETS["index_count"]
    if header.index_count > N or header.index_count < 0:
        sink.add("index.header", path, count_at, f"indexCount {header.index_count} outside [0, {N}]", excerpt_len=4)
    count = min(max(header.index_count, 1), N)
    # slots (whatever of them the file holds)
    slot_end = min(size, slot_position(S, S))
    slots = data[INDEX_HEADER_SIZE:INDEX_HEADER_SIZE + (slot_end - INDEX_HEADER_SIZE) // 4 * 4].view(INDEX_SLOT_DTYPE)
    slots = slots.astype(np.int32)            # native order; every value in [0, count] fits
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
                 f"hashSlotCount {header.hash_slot_count} != {used} slots in use", excerpt_len=4)
    # entries
    e0 = entry_position(S, 0)
    have = max(0, (size - e0) // INDEX_ENTRY_SIZE)
    in_memory = max(0, (len(data) - e0) // INDEX_ENTRY_SIZE)
    all_entries = data[e0:e0 + min(in_memory, N) * INDEX_ENTRY_SIZE].view(INDEX_ENTRY_DTYPE) if in_memory else empty
    if have < count:
        sink.add("index.file-size", path, size, f"indexCount {header.index_count} but the file holds only "
                 f"{have} entries", excerpt=False)
    entries = all_entries[1:min(count, have)]
    # entries written past indexCount
    beyond = all_entries[count:]
    if len(beyond):
        nz = np.flatnonzero(beyond.view(np.uint8).reshape(len(beyond), -1).any(axis=1))
        if len(nz):
            first = count + int(nz[0])
            live_race = live and len(nz) == 1 and first == count
            sink.add("index.header-count", path, entry_position(S, first),
                     f"{len(nz)} non-empty entr{'y' if len(nz) == 1 else 'ies'} past indexCount "
                     f"{header.index_count} (first: entry {first})", INFO if live_race else None,
                     excerpt_len=INDEX_ENTRY_SIZE)
    _check_entries(path, S, header, entries, slots, sink)
    return IndexFileState(str(path), header, entries)


def _check_entries(path, S: int, header: IndexHeaderValues, entries: np.ndarray, slots: np.ndarray,
                   sink: FindingSink) -> None:
    n = len(entries)
    if not n:
        return
    # native int32 columns (the file's are big-endian int32): half the memory of int64, same values
    num = np.arange(1, n + 1, dtype=np.int32)
    h = entries["key_hash"].astype(np.int32)
    prev = entries["prev_index"].astype(np.int32)
    diff = entries["time_diff"].astype(np.int32)
    phy = entries["phy_offset"][[0, -1]].astype(np.int64)      # only the first and last are used
    for i in np.flatnonzero(prev >= num):
        e = int(num[i])
        sink.add("index.chain-loop", path, entry_position(S, e) + _ENTRY_FIELD["prev_index"],
                 f"entry {e} has prevIndex {int(prev[i])}, not below its own number: the chain would "
                 f"{'loop' if prev[i] <= n else 'leave the valid entries'}", excerpt_len=4)
    for i in np.flatnonzero(diff < 0):
        e = int(num[i])
        sink.add("index.time-diff", path, entry_position(S, e) + _ENTRY_FIELD["time_diff"],
                 f"entry {e} has negative timeDiff {int(diff[i])}", excerpt_len=4)
    bucket = h % (np.int32(S) if S <= INT_MAX else np.int64(S))
    bucket[h < 0] = -1
    for i in np.flatnonzero(bucket < 0):
        e = int(num[i])
        sink.add("index.chain", path, entry_position(S, e), f"entry {e} has negative keyHash {int(h[i])}",
                 excerpt_len=4)
    loop = prev >= num
    if not _chains_consistent(bucket, prev, num, slots):
        _chain_findings(path, S, bucket, prev, num, loop, slots, sink)
    # header begin/end offsets
    if header.begin_phy_offset != int(phy[0]):
        sink.add("index.header", path, INDEX_HEADER_OFFSETS["begin_phy_offset"],
                 f"beginPhyOffset {header.begin_phy_offset} != entry 1's offset {int(phy[0])}", excerpt_len=8)
    if header.end_phy_offset != int(phy[-1]):
        sink.add("index.header", path, INDEX_HEADER_OFFSETS["end_phy_offset"],
                 f"endPhyOffset {header.end_phy_offset} != the last entry's offset {int(phy[-1])}", excerpt_len=8)


def _chains_consistent(bucket, prev, num, slots) -> bool:
    """True when every bucket's entries form exactly the chain slot -> newest -> ... -> oldest -> 0.

    No sort needed: with prevIndex in [0, e), same-bucket links, each entry the prev of at
    most one other, the links form disjoint decreasing paths; as many in-range non-zero slots
    as paths (roots), each slot naming an entry of its own bucket that nobody links to,
    means one path per used bucket holding all its entries in order, headed by its slot.
    """
    n = len(prev)
    if (bucket < 0).any() or (prev < 0).any() or (prev >= num).any():
        return False
    linked = np.flatnonzero(prev > 0)
    target = prev[linked] - 1
    if (bucket[target] != bucket[linked]).any():
        return False
    refs = np.bincount(target, minlength=n)
    if len(refs) and refs.max() > 1:
        return False
    heads = np.flatnonzero((slots > 0) & (slots <= n))
    head = slots[heads] - 1
    if not ((bucket[head] == heads) & (refs[head] == 0)).all():
        return False
    return len(heads) == n - len(linked)


def _chain_findings(path, S, bucket, prev, num, loop, slots, sink) -> None:
    """Exact per-entry/per-slot chain findings (the slow path, only when a chain is wrong)."""
    n = len(prev)
    # expected prev: previous entry of the same bucket
    order = np.lexsort((num, bucket))
    b_sorted = bucket[order]
    expect = np.zeros(n, dtype=np.int64)
    same = np.zeros(n, dtype=bool)
    same[1:] = b_sorted[1:] == b_sorted[:-1]
    expect_sorted = np.where(same, np.concatenate([[0], num[order][:-1]]), 0)
    expect[order] = expect_sorted
    for i in np.flatnonzero((prev != expect) & ~loop & (bucket >= 0)):
        e = int(num[i])
        sink.add("index.chain", path, entry_position(S, e) + _ENTRY_FIELD["prev_index"],
                 f"entry {e} (slot {int(bucket[i])}) has prevIndex {int(prev[i])}, the previous entry of its "
                 f"slot is {int(expect[i])}", excerpt_len=4)
    # slot heads: the newest entry of each bucket
    last = np.ones(n, dtype=bool)
    last[:-1] = b_sorted[:-1] != b_sorted[1:]
    hb, he = b_sorted[last], num[order][last]
    keep = (hb >= 0) & (hb < len(slots))
    want = np.zeros(len(slots), dtype=np.int64)
    want[hb[keep]] = he[keep]
    in_range = (slots >= 0) & (slots <= n)          # > n is slot-range's business
    for s in np.flatnonzero((slots != want) & in_range):
        sink.add("index.chain", path, slot_position(S, int(s)),
                 f"slot {int(s)} holds {int(slots[s])}, the newest entry hashing to it is {int(want[s])}",
                 excerpt_len=4)


def deep_index_checks(state: IndexFileState, geometry, table: RecordTable, store, valid_end: int,
                      sink: FindingSink, selected: np.ndarray) -> np.ndarray:
    """Entries -> records with a matching key; returns (record << 32 | keyHash) of matched entries."""
    S = geometry.hash_slots
    ent = state.entries
    if not len(ent) or not table.has_keys:
        return np.zeros(0, np.int64)
    # entry numbers are positions + 1; columns are gathered only where used (few full-size temporaries)
    phy = ent["phy_offset"].astype(np.int64)
    exact, inside = table.locate(phy)
    miss = exact < 0
    miss &= phy >= store.commitlog.min_offset            # live part only
    past = miss & (phy >= valid_end)
    if past.any():
        i = int(np.flatnonzero(past)[0])
        sink.add("index.entry-target", state.path, entry_position(S, i + 1),
                 f"{int(past.sum())} entr(ies) from entry {i + 1} point at or past the CommitLog's valid end "
                 f"{valid_end}", WARNING, excerpt_len=INDEX_ENTRY_SIZE)
    for i in np.flatnonzero(miss & ~past):
        e = int(i) + 1
        what = (f"into the middle of the record at {int(table.cols['phy'][inside[i]])}" if inside[i] >= 0
                else "where no record was found")
        sink.add("index.entry-target", state.path, entry_position(S, e) + _ENTRY_FIELD["phy_offset"],
                 f"entry {e} points at commitlog offset {int(phy[i])}, {what}", excerpt_len=8)
    del phy, inside, miss, past
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
        e = i + 1
        h = int(ent["key_hash"][i])
        rec = table.describe(int(r[k]))
        sink.add("index.entry-key", state.path, entry_position(S, e),
                 f"entry {e} (keyHash {h}, slot {h % S}) points at the record at "
                 f"{rec['phy_offset']} ({rec['topic']}), none of whose keys hashes to it", excerpt_len=INDEX_ENTRY_SIZE)
    # entry time (entry 1 carries the previous file's begin: skipped); hit is ascending, so the
    # entries numbered >= 2 are a suffix of it
    hdr = state.header
    if hdr.begin_timestamp > 0:
        k0 = int(np.searchsorted(hit, 1))
        want = table.cols["store_ts"][r[k0:]]
        want -= hdr.begin_timestamp
        want //= 1000
        np.maximum(want, 0, out=want)
        np.minimum(want, INT_MAX, out=want)
        got = ent["time_diff"][hit[k0:]]
        for k in np.flatnonzero((want != got) & sel[k0:]):
            i = int(hit[k0 + k])
            e = i + 1
            sink.add("index.entry-time", state.path, entry_position(S, e) + _ENTRY_FIELD["time_diff"],
                     f"entry {e} has timeDiff {int(got[k])} s, its record's store time gives {int(want[k])} s",
                     excerpt_len=4)
    return pairs[ok]


def missing_keys(table: RecordTable, indexed_pairs: np.ndarray, lo: int, frontier: int, valid_end: int,
                 sink: FindingSink, selected: np.ndarray) -> list[int]:
    """Keys of records inside [lo, frontier) absent from the index; returns records not (fully) indexed yet."""
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
                     f"lies inside the indexed range but {int(counts[j])} of its key(s) are in no index file")
    pending = np.unique(kr[miss & (phy >= frontier)[kr]])
    if len(pending):
        path, pos = table.where(int(pending[0]))
        sink.add("index.not-indexed", path, pos,
                 f"{len(pending)} record(s) with keys from commitlog offset {int(c['phy'][pending[0]])} are at or "
                 f"past the index frontier {frontier}: not (fully) indexed yet (the broker indexes them at restart)",
                 excerpt=False)
    return [int(i) for i in pending]
