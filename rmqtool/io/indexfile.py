"""Read IndexFiles: geometry, header, slots, entries (format.md §5). Read-only, pread-based."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from formats import indexfile as layout
from formats.derive import struct_of
from formats.indexfile import (
    DEFAULT_HASH_SLOTS, DEFAULT_INDEX_ENTRIES, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, INDEX_SLOT_DTYPE,
    INDEX_SLOT_SIZE, MAX_INDEX_FILE_SIZE, IndexHeader, entry_position, index_file_size, slot_position)
from rmqtool.errors import CorruptDataError, StoreLayoutError
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io import storage


@dataclass(frozen=True)
class IndexGeometry:
    hash_slots: int
    index_entries: int

    @property
    def file_size(self) -> int:
        return index_file_size(self.hash_slots, self.index_entries)


DEFAULT_GEOMETRY = IndexGeometry(DEFAULT_HASH_SLOTS, DEFAULT_INDEX_ENTRIES)


@dataclass
class IndexHeaderValues:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_HEADER = struct_of(IndexHeader)


def parse_header(raw: bytes) -> IndexHeaderValues:
    return IndexHeaderValues(*_HEADER.unpack_from(raw))


#: files up to this size have their geometry inferred by the same steps in plain Python (no numpy
#: import: a few ms for a small store's index; ``tests/test_startup.py`` proves the two equal)
SMALL_INFER_SIZE = 1 << 20


def infer_geometry(path: Path, size: int, data=None) -> IndexGeometry | None:
    """Find (slots, entries) from a file's content when its size is not the expected one.

    The header says how many buckets are used (h) and entries written; the slot area holds
    exactly h non-zero ints, so the slot/entry boundary lies between the h-th non-zero int
    and the first non-zero int of entry 1. Candidates must satisfy the size equation and
    every sampled bucket must hold an entry whose hash lands in it. ``data``: the file's
    bytes (read here when not given).
    """
    if size < INDEX_HEADER_SIZE or (size - INDEX_HEADER_SIZE) % INDEX_SLOT_SIZE or size > MAX_INDEX_FILE_SIZE:
        return None                  # no geometry gives it (the largest file is read whole, no more)
    if data is None:
        with ReadOnlyFile(path) as fh:
            data = fh.read(0, size)
    if size <= SMALL_INFER_SIZE:
        return _infer_geometry_python(data, size)
    return _infer_geometry_numpy(data, size)


def _infer_geometry_numpy(data, size: int) -> IndexGeometry | None:
    import numpy as np
    data = np.frombuffer(data, dtype=np.uint8)
    header = parse_header(data[:INDEX_HEADER_SIZE].tobytes())
    ints = data[INDEX_HEADER_SIZE:INDEX_HEADER_SIZE + (size - INDEX_HEADER_SIZE) // 4 * 4].view(">i4")
    nz = np.flatnonzero(ints)
    h, count = header.hash_slot_count, header.index_count
    if h <= 0 or count <= 1 or len(nz) <= h:
        return None
    total_ints = len(ints)
    lo, hi = int(nz[h - 1]) + 1, int(nz[h]) - 5   # entry 1 starts at S+5 ints
    cands = np.arange(max(lo, 1), max(hi, 0) + 1, dtype=np.int64)
    cands = cands[(total_ints - cands) % 5 == 0]
    if not len(cands):
        return None
    used = nz[:h][:16]
    for slot_idx in used:
        value = int(ints[slot_idx])
        if value <= 0 or value >= count:
            continue
        hash_at = cands + 5 * value
        ok = hash_at < total_ints
        hashes = np.where(ok, ints[np.minimum(hash_at, total_ints - 1)], -1).astype(np.int64)
        cands = cands[ok & (hashes >= 0) & (hashes % cands == slot_idx)]
        if len(cands) <= 1:
            break
    if len(cands) != 1:
        return None
    slots = int(cands[0])
    return IndexGeometry(slots, (total_ints - slots) // 5)


def _infer_geometry_python(data, size: int) -> IndexGeometry | None:
    """``_infer_geometry_numpy``, step for step, on Python ints."""
    import struct
    header = parse_header(bytes(data[:INDEX_HEADER_SIZE]))
    total_ints = (size - INDEX_HEADER_SIZE) // 4
    ints = struct.unpack_from(f">{total_ints}i", data, INDEX_HEADER_SIZE)
    nz = [i for i, v in enumerate(ints) if v]
    h, count = header.hash_slot_count, header.index_count
    if h <= 0 or count <= 1 or len(nz) <= h:
        return None
    lo, hi = nz[h - 1] + 1, nz[h] - 5             # entry 1 starts at S+5 ints
    cands = [c for c in range(max(lo, 1), max(hi, 0) + 1) if (total_ints - c) % 5 == 0]
    if not cands:
        return None
    for slot_idx in nz[:h][:16]:
        value = ints[slot_idx]
        if value <= 0 or value >= count:
            continue
        cands = [c for c in cands if c + 5 * value < total_ints
                 and ints[c + 5 * value] >= 0 and ints[c + 5 * value] % c == slot_idx]
        if len(cands) <= 1:
            break
    if len(cands) != 1:
        return None
    slots = cands[0]
    return IndexGeometry(slots, (total_ints - slots) // 5)


def resolve_geometry(files: list[tuple[Path, int]], slots: int | None = None,
                     entries: int | None = None) -> IndexGeometry:
    """Geometry for a set of index files: explicit, default, or inferred from content."""
    if slots and entries:
        geometry = IndexGeometry(slots, entries)
        for path, size in files:
            if size not in (geometry.file_size, 0):
                raise StoreLayoutError(
                    f"index file is {size} bytes but --index-slots {slots} / --index-entries {entries} "
                    f"give {geometry.file_size}", path, size)
        return geometry
    sizes = {size for _, size in files if size}
    if not sizes or sizes == {DEFAULT_GEOMETRY.file_size}:
        return DEFAULT_GEOMETRY
    for path, size in sorted(files, key=lambda f: f[0].name):
        if not size:
            continue
        guess = infer_geometry(path, size)
        if guess and (slots is None or guess.hash_slots == slots) and (
                entries is None or guess.index_entries == entries):
            return guess
    usual = max(sorted(sizes), key=[s for _, s in files].count)       # name the odd file out, with its size
    odd = next(((p, s) for p, s in files if s and s != usual), next(((p, s) for p, s in files if s), (None, None)))
    raise StoreLayoutError(
        f"cannot tell the index geometry from file sizes {sorted(sizes)}: pass --index-slots and "
        f"--index-entries (broker maxHashSlotNum / maxIndexNum)", *odd)


class IndexFileReader:
    """One index file, read with pread: header, a slot, an entry, or everything."""

    def __init__(self, path: Path, geometry: IndexGeometry):
        self.path = storage.path(path)
        self.geometry = geometry
        self.file = ReadOnlyFile(path)
        self.size = self.file.size()

    def close(self):
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def header(self) -> IndexHeaderValues:
        if self.size < INDEX_HEADER_SIZE:
            raise CorruptDataError(f"index file too short for its header ({self.size} bytes)",
                                   self.path, self.size)
        return parse_header(self.file.read(0, INDEX_HEADER_SIZE))

    def slot(self, slot: int) -> int:
        import numpy as np
        pos = slot_position(self.geometry.hash_slots, slot)
        return int(np.frombuffer(self.file.read(pos, INDEX_SLOT_SIZE), INDEX_SLOT_DTYPE)[0])

    def entry(self, number: int):
        import numpy as np
        pos = entry_position(self.geometry.hash_slots, number)
        return np.frombuffer(self.file.read(pos, INDEX_ENTRY_SIZE), layout.INDEX_ENTRY_DTYPE)[0]

    def entry_offset(self, number: int) -> int:
        return entry_position(self.geometry.hash_slots, number)

    def slots(self):
        import numpy as np
        n = self.geometry.hash_slots
        raw = self.file.read(slot_position(n, 0), n * INDEX_SLOT_SIZE, exact=False)
        return np.frombuffer(raw[:len(raw) // INDEX_SLOT_SIZE * INDEX_SLOT_SIZE], INDEX_SLOT_DTYPE)

    def entries(self, count: int | None = None):
        """Entries 0..count-1 (default: up to the header's indexCount)."""
        import numpy as np
        if count is None:
            count = max(self.header().index_count, 1)
        count = min(count, self.geometry.index_entries)
        raw = self.file.read(entry_position(self.geometry.hash_slots, 0), count * INDEX_ENTRY_SIZE,
                             exact=False)
        usable = len(raw) // INDEX_ENTRY_SIZE * INDEX_ENTRY_SIZE
        return np.frombuffer(raw[:usable], layout.INDEX_ENTRY_DTYPE)
