"""What a DLedger member's recovery does with its data files at start-up (docs/format-dledger.md,
"Recovery"): where it starts, where its entry walk ends (the data is truncated there), from which
entry it rewrites its entry index, and whether it refuses to start instead.

Only entry headers are read (the member's walk never looks inside a body); the RocketMQ
records in the bodies are judged later by dispatch, as in the classic store.
"""
from __future__ import annotations

import struct
from pathlib import Path
from dataclasses import dataclass

from formats import dledger as dl
from rmqtool.io.dledger_layout import index_queue, read_index_units
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.records.scan import END_BLANK, END_CORRUPT, END_ZERO, FileEnd
from rmqtool.io import storage

#: DLedgerEntry.HEADER_SIZE: the header up to the body length field; an entry must be larger
HEADER_SIZE = dl.ENTRY_HEADER_OFFSETS["body_length"]
_HEAD = struct.Struct(">" + "".join("i" if dl.ENTRY_HEADER_DTYPE[n].itemsize == 4 else "q"
                                    for n in dl.ENTRY_HEADER_DTYPE.names))
_FIELDS = dl.ENTRY_HEADER_DTYPE.names
_WINDOW = 8 << 20
_UNITS = 1 << 15
START_RULE = ("DLedger: the third-to-last data file, or the newest older one whose first entry matches "
              "its index unit")


@dataclass
class DLedgerRecovery:
    start_index: int                 # data file the walk starts in
    start_file: str
    start_offset: int
    first_entry: int | None          # the entry index the start file begins with (None: no file passed)
    end: int                         # processOffset: the data is truncated here
    stop: FileEnd
    entries: int                     # entries walked from the start
    last_entry: int | None
    last_term: int | None
    index_rewritten_from: int | None  # the first entry whose index unit disagrees (the index is rebuilt from it)
    exits: bool                      # the end lies more than a file before the last file: the member exits

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "stop"}
        d.update(stop_kind=self.stop.kind, stop_file=self.stop.path, stop_position=self.stop.position,
                 stop_detail=self.stop.detail or None)
        return d


def _unit_mismatch(head: dict, unit, at: int) -> str | None:
    """Why an entry disagrees with its index unit, in DLedger's order of checks (None: it agrees)."""
    for name, mine in (("magic", head["magic"]), ("size", head["size"]), ("index", head["index"]),
                       ("term", head["term"]), ("pos", at)):
        if int(unit[name]) != mine:
            return f"{name} {mine} != {int(unit[name])}"
    return None


class _Units:
    """Index units read a block at a time along increasing entry indexes."""

    def __init__(self, member):
        self.queue = index_queue(member)
        self.first, self.units = 0, read_index_units(self.queue, 0, 0)

    def get(self, entry: int):
        if not self.first <= entry < self.first + len(self.units):
            self.first, self.units = entry, read_index_units(self.queue, entry, _UNITS)
        return self.units[entry - self.first]


class _Reader:
    """A data file as the member maps it: its full size, zeros past what is on disk."""

    def __init__(self, seg, file_size: int):
        self.seg, self.size = seg, file_size
        self.base, self.buf = 0, b""

    def read(self, pos: int, n: int) -> bytes:
        if not self.base <= pos or pos + n > self.base + len(self.buf):
            want = max(n, min(_WINDOW, self.size - pos))
            with ReadOnlyFile(self.seg.path) as fh:
                data = fh.read(pos, max(0, min(want, fh.size() - pos)), exact=False)
            self.base, self.buf = pos, data + bytes(max(0, want - len(data)))
        return self.buf[pos - self.base:pos - self.base + n]


def _first_entry(seg, file_size: int, units: _Units) -> int | None:
    """The entry index the file starts with when its first entry passes the start pre-check."""
    raw = _Reader(seg, file_size).read(0, dl.ENTRY_HEADER_SIZE)
    if len(raw) < dl.ENTRY_HEADER_SIZE:
        return None
    h = dict(zip(_FIELDS, _HEAD.unpack(raw)))
    if h["magic"] == dl.BLANK_MAGIC or h["magic"] < dl.ENTRY_MAGIC or h["size"] <= HEADER_SIZE \
            or h["pos"] != seg.start or h["body_length"] + dl.ENTRY_BODY_OFFSET != h["size"]:
        return None
    if h["index"] < 0 or _unit_mismatch(h, units.get(h["index"]), seg.start) is not None:
        return None
    return h["index"]


def _stop(seg, file_size: int, pos: int, kind: str, entries: int, detail: str = "", check: str = "") -> FileEnd:
    return FileEnd(str(seg.path), seg.start, file_size, pos, kind, entries, detail=detail, check=check)


def dledger_recovery(store) -> DLedgerRecovery | None:
    """Model of ``DLedgerMmapFileStore.recover`` on the store's DLedger member (None: no data files)."""
    files = store.commitlog.files
    if not files:
        return None
    size = store.commitlog.file_size
    units = _Units(storage.path(files[0].path).parent.parent)     # the member: data/ is its child
    start, first = 0, None
    for i in range(max(0, len(files) - 3), -1, -1):
        start = i
        first = _first_entry(files[i], size, units)
        if first is not None:
            break
    last_entry = last_term = rewrite_from = None
    entries = in_file = 0
    i = start
    seg = files[i]
    reader = _Reader(seg, size)
    pos, end = 0, seg.start
    while True:
        if pos + dl.BLANK_HEADER_SIZE > size:
            stop = _stop(seg, size, pos, END_CORRUPT, in_file, "no room for an entry's magic and size",
                         "dledger.torn-tail")
            break
        magic, length = struct.unpack(">ii", reader.read(pos, dl.BLANK_HEADER_SIZE))
        if magic == dl.BLANK_MAGIC:
            end = seg.start + size
            if i + 1 >= len(files):
                stop = _stop(seg, size, pos, END_BLANK, in_file)
                break
            i += 1
            seg, reader, pos, end, in_file = files[i], _Reader(files[i], size), 0, files[i].start, 0
            continue
        if length == 0:
            stop = _stop(seg, size, pos, END_ZERO, in_file)
            break
        if pos + dl.ENTRY_HEADER_SIZE > size:
            stop = _stop(seg, size, pos, END_CORRUPT, in_file, "an entry header cut by the end of the file",
                         "dledger.torn-tail")
            break
        h = dict(zip(_FIELDS, _HEAD.unpack(reader.read(pos, dl.ENTRY_HEADER_SIZE))))
        at = seg.start + pos
        why = check = None
        if h["pos"] != at:
            why, check = f"entry pos {h['pos']} != its offset {at}", "dledger.pos"
        elif h["body_length"] + dl.ENTRY_BODY_OFFSET != h["size"]:
            why, check = f"entry size {h['size']} != body length {h['body_length']} + {dl.ENTRY_BODY_OFFSET}", "dledger.size"
        elif pos + h["size"] > size or pos + h["size"] < 0:
            why, check = f"entry size {h['size']} runs past the end of the file", "dledger.torn-tail"
        elif h["magic"] != dl.ENTRY_MAGIC:
            why, check = f"illegal DLedger entry magic {h['magic']}", "dledger.magic"
        elif last_entry is not None and h["index"] != last_entry + 1:
            why, check = f"entry index {h['index']} follows {last_entry}", "dledger.index-gap"
        elif last_term is not None and h["term"] < last_term:
            why, check = f"entry {h['index']} has term {h['term']} after term {last_term}", "dledger.term"
        elif h["size"] <= HEADER_SIZE:
            why, check = f"entry size {h['size']} not above the {HEADER_SIZE}-byte header", "dledger.size"
        if why is not None:
            stop = _stop(seg, size, pos, END_CORRUPT, in_file, why, check)
            break
        if rewrite_from is None and (h["index"] < 0 or _unit_mismatch(h, units.get(h["index"]), at) is not None):
            rewrite_from = h["index"]
        last_entry, last_term = h["index"], h["term"]
        entries += 1
        in_file += 1
        pos += h["size"]
        end = seg.start + pos
    exits = files[-1].start - end > size
    return DLedgerRecovery(start, files[start].name, files[start].start, first, end, stop, entries,
                           last_entry, last_term, rewrite_from, exits)
