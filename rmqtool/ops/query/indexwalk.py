"""IndexFile chain walks with pread: upstream's exact walk and a protected walk (format.md §5.6).

Both read only the 40-byte header (once, when the query starts), one slot and the
entries of one chain. Nothing is mapped and nothing is written.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from formats.indexfile import (FIRST_INDEX, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, INVALID_INDEX,
                               IndexEntry, IndexHeader, IndexSlot, entry_position, slot_position)
from formats.derive import field_struct, struct_of
from rmqtool.errors import RmqError
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io import storage

_HEADER = struct_of(IndexHeader)
_ENTRY = struct_of(IndexEntry)
_SLOT = field_struct(IndexSlot)
SECOND_MS = 1000      # index times are whole seconds since the header's beginTimestamp


@dataclass
class IndexSnapshot:
    """One index file as it was when the query started (header read once)."""
    path: Path
    size: int
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 0
    problem: str | None = None       # why the file cannot be used (its range is scanned instead)
    fh: ReadOnlyFile | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def has_entries(self) -> bool:
        return self.problem is None and self.index_count > FIRST_INDEX

    def time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)


class IndexSet:
    """Every index file of a store, headers snapshotted at open; files opened once."""

    def __init__(self, paths: list[Path], hash_slots: int, index_entries: int):
        self.hash_slots, self.index_entries = hash_slots, index_entries
        self.files: list[IndexSnapshot] = []
        self.damaged: dict[str, str] = {}      # file name -> first broken chain seen (protected walk)
        full = entry_position(hash_slots, index_entries)
        for path in paths:
            snap = IndexSnapshot(storage.path(path), 0)
            try:
                snap.fh = ReadOnlyFile(path)
                snap.size = snap.fh.size()
                raw = snap.fh.read(0, INDEX_HEADER_SIZE, exact=False)
            except RmqError as exc:
                snap.problem = f"unreadable: {exc.message}"
                self.files.append(snap)
                continue
            if len(raw) < INDEX_HEADER_SIZE:
                snap.problem = f"shorter than its header ({len(raw)} bytes)"
            else:
                (snap.begin_timestamp, snap.end_timestamp, snap.begin_phy_offset, snap.end_phy_offset,
                 snap.hash_slot_count, snap.index_count) = _HEADER.unpack(raw)
                snap.problem = _header_problem(snap, full, index_entries)
            self.files.append(snap)

    def close(self) -> None:
        for f in self.files:
            if f.fh is not None:
                f.fh.close()

    # --- raw reads (None when the file ends first) ---------------------------------------
    def _slot(self, f: IndexSnapshot, slot: int) -> int | None:
        raw = f.fh.read(slot_position(self.hash_slots, slot), _SLOT.size, exact=False)
        return _SLOT.unpack(raw)[0] if len(raw) == _SLOT.size else None

    def _entry(self, f: IndexSnapshot, number: int):
        raw = f.fh.read(entry_position(self.hash_slots, number), INDEX_ENTRY_SIZE, exact=False)
        return _ENTRY.unpack(raw) if len(raw) == INDEX_ENTRY_SIZE else None

    # --- upstream IndexService.queryOffset ---------------------------------------------------
    def upstream_query(self, key_hash: int, max_num: int, begin: int, end: int,
                       warnings: list[str] | None = None) -> list[int]:
        """Unconfirmed hash hits in upstream's order (newest file, newest entry first).

        Identical to upstream, except that a chain revisiting an entry (only possible in a
        corrupt file) stops instead of looping.
        """
        out: list[int] = []
        for f in reversed(self.files):
            if f.fh is None or f.size < INDEX_HEADER_SIZE:
                continue
            if f.time_matched(begin, end):
                self._upstream_select(f, key_hash, max_num, begin, end, out, warnings)
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    def _upstream_select(self, f, key_hash, max_num, begin, end, out, warnings) -> None:
        count = f.index_count if f.index_count > 0 else FIRST_INDEX   # IndexHeader.load
        slot_value = self._slot(f, key_hash % self.hash_slots)
        if slot_value is None or slot_value <= INVALID_INDEX or slot_value > count or count <= FIRST_INDEX:
            return
        i, seen = slot_value, set()
        while len(out) < max_num:
            if i in seen:
                if warnings is not None:
                    warnings.append(f"{f.path}: index chain loops at entry {i}; stopped")
                return
            seen.add(i)
            entry = self._entry(f, i)
            if entry is None:
                return
            hash_read, phy, time_diff, prev = entry
            if time_diff < 0:
                return
            t = f.begin_timestamp + time_diff * SECOND_MS
            if hash_read == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == i or t < begin:
                return
            i = prev

    # --- protected walk --------------------------------------------------------------------
    def candidates(self, key_hash: int, begin: int, end: int) -> list[tuple[int, IndexSnapshot, int]]:
        """(phy offset, file, entry number) of every entry with this hash that may lie in [begin, end].

        Entries written after the query started (number >= the snapshot's indexCount) are
        skipped but their back links followed, so an entry added meanwhile never hides older
        ones. Back links must strictly decrease, so a corrupt chain always ends. Index
        times are whole seconds at or below the store time (the first entry of a file can
        be later), so the window is widened by one second and confirmed on the record.
        """
        out = []
        for f in reversed(self.files):
            if not f.has_entries:
                continue
            if f.time_matched(begin - SECOND_MS, end):
                self._protected_select(f, key_hash, begin, end, out)
            if f.begin_timestamp < begin - SECOND_MS:
                break
        return out

    def _protected_select(self, f, key_hash, begin, end, out) -> None:
        """Walk one chain; a broken chain marks the file damaged (its range is then scanned)."""
        count = min(f.index_count, self.index_entries)
        # only the newest file is being written: elsewhere a link at or past indexCount is damage
        limit = self.index_entries if f is self.files[-1] else count
        i = self._slot(f, key_hash % self.hash_slots)
        if i is None or i < INVALID_INDEX or i >= limit:
            return self._damage(f, f"slot {key_hash % self.hash_slots} holds {i}")
        while i > INVALID_INDEX:
            entry = self._entry(f, i)
            if entry is None:
                return self._damage(f, f"entry {i} is past the end of the file")
            hash_read, phy, time_diff, prev = entry
            if i < count:
                if time_diff < 0:
                    return self._damage(f, f"entry {i} has a negative time difference")
                t = f.begin_timestamp + time_diff * SECOND_MS
                if hash_read == key_hash and (i == FIRST_INDEX or begin - SECOND_MS < t <= end):
                    out.append((phy, f, i))
                if t < begin - SECOND_MS and i != FIRST_INDEX:
                    return
            if prev >= i or prev < INVALID_INDEX:
                return self._damage(f, f"entry {i} links forward to {prev}")
            i = prev

    def _damage(self, f: IndexSnapshot, why: str) -> None:
        self.damaged.setdefault(f.name, why)


def _header_problem(f: IndexSnapshot, full_size: int, index_entries: int) -> str | None:
    if f.size != full_size:
        return f"size {f.size} is not the geometry's {full_size}"
    if f.index_count < 0 or f.index_count > index_entries:
        return f"header indexCount {f.index_count} outside [0, {index_entries}]"
    if f.index_count > FIRST_INDEX and f.begin_phy_offset > f.end_phy_offset:
        return f"header beginPhyOffset {f.begin_phy_offset} > endPhyOffset {f.end_phy_offset}"
    if f.index_count > FIRST_INDEX and (f.begin_phy_offset < 0 or f.end_timestamp < f.begin_timestamp):
        return "header offsets or timestamps out of order"
    return None
