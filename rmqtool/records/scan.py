"""CommitLog scanning: the broker's recovery walk, decoded into numpy record batches.

Per file, from a start position: MESSAGE records are collected while their TOTALSIZE
chain holds; BLANK ends the file; zero magic ends the data; anything else (bad magic,
a length past the file, computed length != TOTALSIZE, bad CRC when asked) stops the walk
and is described by ``FileEnd``. The chain is followed with a tight ``struct`` loop;
every field is then decoded for the whole batch at once with numpy gathers whose
offsets come from ``formats.commitlog``. ``decode_record_reference`` is the construct
path the bulk decoder is tested against.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from formats import commitlog as cl
from formats import dledger as dl
from formats.derive import field_offsets, numpy_dtype, struct_of
from rmqtool.records.layout import PREFIX
from rmqtool.errors import FileChangedError
from rmqtool.io.dledger_layout import is_entry_file
from rmqtool.io.fileio import CACHE_WINDOW, CHUNK_SIZE, ReadOnlyFile, file_size, first_nonzero
from rmqtool.io.storage import is_remote
from rmqtool.kernels import native
from rmqtool.kernels.crc import crc32_spans
from rmqtool.kernels.gather import distinct_widths, gather_bytes, gather_ints, row_width, span_rows, strided_view

_ENTRY_HEAD = struct_of(dl.EntryHeader)
_ENTRY_HEAD_DTYPE = dl.ENTRY_HEADER_DTYPE
_BLANK_HEAD = struct_of(dl.BlankHeader)
_POS = list(dl.ENTRY_HEADER_OFFSETS).index("pos")
_BODY_LENGTH = list(dl.ENTRY_HEADER_OFFSETS).index("body_length")
_PREFIX_DTYPE = numpy_dtype(cl.RecordPrefix)
_MAGIC_AT = field_offsets(cl.RecordPrefix)["magic"]
_HEAD_DTYPE = numpy_dtype(cl.MessageHead)
_MAGIC_FIRST_BYTES = sorted({m.to_bytes(4, "big")[0] for m in cl.MESSAGE_MAGICS})
_MIN_MESSAGE = cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 0, 0, 0)
_TAIL_DTYPE = np.dtype([(sc.name, ">i4" if sc.sizeof() == 4 else ">i8") for sc in cl.MessageTail.subcons])

#: the property whose value the native scan hashes with the topic (the dispatcher's tagsCode)
HASHED_PROPERTY = "tags"
# keys whose values the bulk property parser extracts, by upstream property name
EXTRACTED_PROPERTIES = {
    "tags": cl.PROPERTY_TAGS,
    "keys": cl.PROPERTY_KEYS,
    "uniq": cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    "delay": cl.PROPERTY_DELAY_TIME_LEVEL,
}

# end kinds
END_BLANK = "blank"          # BLANK record: the rest of the file is padding
END_ZERO = "zero"            # zero magic: end of data (normal tail of the live file)
END_EOF = "eof"              # the file ended exactly after a record (no BLANK, no zeros)
END_RANGE = "range"          # the requested byte range [lo, hi) was covered
END_TORN = "torn"            # a record claims more bytes than the file has
END_CORRUPT = "corrupt"      # bad magic, bad lengths or bad CRC


@dataclass
class FileEnd:
    """Where and why the walk of one file stopped."""
    path: str
    file_base: int
    file_size: int
    position: int                 # in-file position where the walk stopped
    kind: str
    messages: int = 0
    blank_size: int | None = None
    detail: str = ""
    check: str = ""               # stable check name for verify ("" when clean)
    total_size: int | None = None  # TOTALSIZE read at the stop position
    magic: int | None = None

    @property
    def phy_offset(self) -> int:
        return self.file_base + self.position

    @property
    def clean(self) -> bool:
        return self.kind in (END_BLANK, END_ZERO, END_EOF, END_RANGE)

    @property
    def ends_log(self) -> bool:
        """A file not ending in a BLANK ends the CommitLog's valid data (the broker's recovery and
        reput go on into the next file only past a BLANK)."""
        return self.kind != END_BLANK

    @property
    def log_end(self) -> int:
        """Where the valid log ends as far as this file says: past a BLANK the file is full to its
        end (base + file size, where the next file starts); any other end stops the log where the
        walk stopped. The one statement of the rule: recovery, verify, rebuild and write take it."""
        return self.phy_offset if self.ends_log else self.file_base + self.file_size


@dataclass
class RecordBatch:
    """MESSAGE records of one window of one commitlog file, as columns."""
    path: str
    file_base: int
    buf: np.ndarray               # uint8 window
    buf_base: int                 # file position of buf[0]
    columns: dict = field(default_factory=dict)
    carved: bool = False          # found past a corruption by resync: not trusted
    #: Java hashes of spans the native scan made while each record was in the cache ("topic" and
    #: ``HASHED_PROPERTY``; int64, -1 where a span is not ASCII): ``span_hashes(known=...)`` skips them
    hashes: dict = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.columns.get("position", ()))

    def __getattr__(self, name):
        cols = self.__dict__.get("columns")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    # -- per-record access ---------------------------------------------------------------
    def span(self, name: str, i: int) -> bytes | None:
        length = int(self.columns[f"{name}_len"][i])
        if length < 0:
            return None
        start = int(self.columns[f"{name}_start"][i])
        return self.buf[start:start + length].tobytes()

    def text(self, name: str, i: int) -> str | None:
        raw = self.span(name, i)
        return None if raw is None else raw.decode("utf-8", "replace")

    def topic(self, i: int) -> str:
        return self.text("topic", i) or ""

    def properties(self, i: int) -> dict[str, str]:
        raw = self.span("props", i)
        return cl.decode_properties(raw) if raw else {}

    def body(self, i: int) -> bytes:
        return self.span("body", i) or b""

    def host(self, which: str, i: int) -> tuple[bytes, int]:
        start = int(self.columns[f"{which}_host_start"][i])
        v6 = bool(self.columns["sys_flag"][i] & (cl.BORNHOST_V6_FLAG if which == "born" else cl.STOREHOST_V6_FLAG))
        size = cl.HOST_V6_SIZE if v6 else cl.HOST_V4_SIZE
        raw = self.buf[start:start + size].tobytes()
        return raw[:-4], struct.unpack(">i", raw[-4:])[0]


class ReadBuffer:
    """A read buffer that scans running one after another share (never two at once): the
    pages are faulted in once, not once per file."""

    def __init__(self) -> None:
        self._buf: bytearray | None = None

    def view(self, want: int, hint: int) -> memoryview:
        if self._buf is None or len(self._buf) < want:
            self._buf = bytearray(max(want, hint))
        return memoryview(self._buf)[:want]


class FileScan:
    """Iterate the record batches of one commitlog file; ``end`` is set when exhausted."""

    def __init__(self, path: Path | str, file_base: int, lo: int = 0, hi: int | None = None,
                 check_crc: bool = False, chunk_size: int | None = None, carved: bool = False,
                 reuse_buffer: bool = False, buffer: ReadBuffer | None = None, core=native.core,
                 piece_size: int | None = None, crc_column: bool = False):
        self.location = path    # resolved (a ``pathlib.Path`` or ``RemotePath``): what is opened
        self.path = str(path)   # what rows and file ends name
        self.file_base = file_base
        self.lo, self.hi = lo, hi
        self.check_crc = check_crc
        # crc_column: every batch also has ``body_crc_ok`` (body_crc_matches of each record)
        self.crc_column = crc_column
        if chunk_size is None:          # the native scan of a local file: windows that stay in the cache
            chunk_size = CACHE_WINDOW if core is not None and not is_remote(path) else CHUNK_SIZE
        self.chunk_size = max(chunk_size, 1 << 16)
        self.carved = carved
        # read every window into one buffer: no fresh allocation (and page faults) per window,
        # but a batch's ``buf`` is overwritten by the next window: consume batches one at a time.
        # ``buffer``: the same for consecutive scans (a file after another)
        self.reuse_buffer = reuse_buffer or buffer is not None
        self._buffer = buffer if buffer is not None else ReadBuffer()
        self.end: FileEnd | None = None
        # a DLedger member's data file: records sit inside entries (docs/format-dledger.md)
        entries = is_entry_file(self.path)
        self._walk_window = _walk_entries_window(file_base) if entries else _walk_chain
        # with the native ``core`` each window is read and decoded piece by piece (``window_scan``;
        # ``piece_size`` bytes at a time; a DLedger file entry by entry); core=None: the numpy reference
        self._entries = entries
        self._native = None if core is None else _window_scan(core, check_crc, crc_column, piece_size, entries)

    def __iter__(self) -> Iterator[RecordBatch]:
        with ReadOnlyFile(self.location) as fh:
            size = fh.size()          # reads are bounded by the size seen at the start
            yield from self._walk(fh, size)

    def _walk(self, fh: ReadOnlyFile, size: int) -> Iterator[RecordBatch]:
        pos = self.lo
        hi = size if self.hi is None else min(self.hi, size)
        messages = 0
        take_window = self._reference_read if self._native is None else self._native_read
        while True:
            if pos >= hi:
                kind = END_EOF if pos >= size else END_RANGE
                self.end = FileEnd(self.path, self.file_base, size, pos, kind, messages)
                return
            want = min(self.chunk_size, size - pos)
            batch, stop, next_pos = take_window(fh, pos, want, size, hi)
            if batch is not None:
                batch.carved = self.carved
                if len(batch):
                    messages += len(batch)
                    yield batch
            if stop is not None:
                stop.path, stop.file_base, stop.file_size, stop.messages = (
                    self.path, self.file_base, size, messages)
                self.end = stop
                return
            if next_pos == pos:     # one record larger than the window: widen it
                self.chunk_size = min(self.chunk_size * 2, size)
            pos = next_pos

    def _reference_read(self, fh: ReadOnlyFile, pos: int, want: int, size: int, hi: int):
        """One window read, walked and decoded by the reference path: (batch or None, stop, resume)."""
        window = self._read_reused(fh, pos, want) if self.reuse_buffer else fh.read(pos, want)
        return self._reference_window(window, pos, size, hi)

    def _reference_window(self, window, pos: int, size: int, hi: int):
        starts, stop, next_pos = self._walk_window(window, pos, size, hi)
        if not len(starts):
            return None, stop, next_pos
        batch, bad = _decode_window(window, pos, self.path, self.file_base, starts, self.check_crc, self.crc_column)
        return batch, (bad if bad is not None else stop), next_pos

    def _native_read(self, fh: ReadOnlyFile, pos: int, want: int, size: int, hi: int):
        """``_reference_read`` by the native window scan (``window_scan``): the same batch and ends."""
        core = self._native.core
        window, cols, props, rows, p, why = self._native.read_and_take(
            fh, pos, want, hi, self._buffer if self.reuse_buffer else None, self.file_base)
        buf = np.frombuffer(window, dtype=np.uint8)
        if why == core.SCAN_CHAIN:      # where the walk ends is judged by the reference loop
            if self._entries:
                rest, stop, next_pos = _walk_entries(window, pos, self.file_base, size, hi, p, core=None)
            else:
                rest, stop, next_pos = _walk_chain_scalar(window, pos, size, hi, p)
            agree = not len(rest)       # the core takes every record the loop would take
        else:                           # a malformed record or a CRC stop (in an entry: its record)
            at = p + dl.ENTRY_BODY_OFFSET if self._entries else p
            stop, next_pos = _reference_stop(buf, pos, at, why == core.SCAN_LENGTH), None
            agree = stop is not None
        if not agree:                   # never expected: the reference path decides this window
            return self._reference_window(window, pos, size, hi)
        return (_native_batch(self.path, self.file_base, buf, pos, core.SCAN_COLUMNS, cols, props, rows,
                              self.crc_column), stop, next_pos)

    def _read_reused(self, fh: ReadOnlyFile, pos: int, want: int) -> memoryview:
        """``fh.read(pos, want)`` (exact) into the scan's reused buffer."""
        view = self._buffer.view(want, min(self.chunk_size, fh.size()))
        fh.read_into(view, pos)
        return view


def _walk_chain(window: bytes, base: int, file_size: int, hi: int):
    """Follow TOTALSIZE through one window. Returns (starts, stop FileEnd|None, resume pos).

    The run of well-formed MESSAGE records from the window's start is found with numpy
    (``_message_run``); the record-by-record loop then only judges where that run ends."""
    run, p = _message_run(window, hi - base)
    rest, stop, resume = _walk_chain_scalar(window, base, file_size, hi, p)
    starts = np.concatenate([run, np.asarray(rest, dtype=np.int64)]) if rest else run
    return starts, stop, resume


def _message_run(window, limit: int, core=native.core) -> tuple[np.ndarray, int]:
    """The chain of MESSAGE records from position 0 that ``_walk_chain_scalar`` would accept
    without stopping, found without a per-record Python step; and the position after it.

    Candidates are every position below ``limit`` where a MESSAGE magic sits; a candidate is
    complete when its TOTALSIZE is at least the smallest message and it ends inside the window
    (so inside the file). Consecutive complete candidates that
    chain (start + TOTALSIZE == next start) are taken at once; a magic inside a body (a
    candidate the chain steps over) costs one lookup. The walk stops at the first position
    that is not a complete candidate: the scalar loop judges it.
    """
    n = len(window)
    if core is not None:        # the same chain followed record by record in C
        out = np.empty(n // _MIN_MESSAGE + 1, dtype=np.int64)
        count, stop = core.message_run(window, limit, _MIN_MESSAGE, cl.MESSAGE_MAGIC_V1, cl.MESSAGE_MAGIC_V2, out)
        return out[:count], stop
    if n < _PREFIX_DTYPE.itemsize:
        return np.zeros(0, np.int64), 0
    buf = np.frombuffer(window, dtype=np.uint8)
    last = min(limit, n - _PREFIX_DTYPE.itemsize + 1)          # candidate starts c < last
    if last <= 0:
        return np.zeros(0, np.int64), 0
    starts, total = _message_candidates(buf, last)
    if not len(starts) or starts[0] != 0:
        return np.zeros(0, np.int64), 0
    ends = starts + total
    complete = (ends - starts >= _MIN_MESSAGE) & (ends <= n)
    linked = complete[:-1] & (ends[:-1] == starts[1:])
    breaks = np.flatnonzero(~linked)
    pieces = []
    i, m = 0, len(starts)
    while True:
        b = np.searchsorted(breaks, i)
        j = int(breaks[b]) if b < len(breaks) else m - 1       # i..j-1 complete and chained
        if not complete[j]:
            pieces.append(starts[i:j])
            return _joined(pieces), int(starts[j])
        pieces.append(starts[i:j + 1])
        after = int(ends[j])
        k = int(np.searchsorted(starts, after))
        if k == m or starts[k] != after:
            return _joined(pieces), after
        i = k


def _message_candidates(buf: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray]:
    """Every position below ``last`` where a MESSAGE magic sits, and the TOTALSIZE there.
    ``last`` must leave room for the record prefix in ``buf``."""
    hits = _first_magic_bytes(buf[_MAGIC_AT:_MAGIC_AT + last])
    prefix = strided_view(buf, _PREFIX_DTYPE)[hits]
    is_message = np.isin(prefix["magic"], cl.MESSAGE_MAGICS)
    return hits[is_message].astype(np.int64), prefix["total_size"][is_message].astype(np.int64)


#: bytes compared per step: the step's mask stays in the CPU cache
_PROBE_STEP = 1 << 20


def _first_magic_bytes(probe: np.ndarray) -> np.ndarray:
    """Positions in ``probe`` holding the first byte of a MESSAGE magic."""
    found = []
    for at in range(0, len(probe), _PROBE_STEP):
        part = probe[at:at + _PROBE_STEP]
        mask = part == _MAGIC_FIRST_BYTES[0] if len(_MAGIC_FIRST_BYTES) == 1 else np.isin(part, _MAGIC_FIRST_BYTES)
        hit = np.flatnonzero(mask)
        if len(hit):
            found.append(hit + at if at else hit)
    return np.concatenate(found) if len(found) > 1 else found[0] if found else np.zeros(0, np.intp)


def _joined(pieces: list) -> np.ndarray:
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _walk_chain_scalar(window: bytes, base: int, file_size: int, hi: int, p: int = 0):
    """Follow TOTALSIZE from window position ``p`` one record at a time (the reference walk)."""
    starts = []
    n = len(window)
    unpack = PREFIX.unpack_from
    v1, v2, blank = cl.MESSAGE_MAGIC_V1, cl.MESSAGE_MAGIC_V2, cl.BLANK_MAGIC
    limit = hi - base
    while p < limit:
        if p + 8 > n:
            if base + n >= file_size:     # fewer than 8 bytes left in the file
                rest = window[p:]
                kind = END_ZERO if not any(rest) else END_TORN
                return starts, FileEnd("", 0, 0, base + p, kind,
                                       detail="" if kind == END_ZERO else "fewer than 8 bytes left",
                                       check="" if kind == END_ZERO else "commitlog.torn-tail"), None
            return starts, None, base + p
        total, magic = unpack(window, p)
        if magic == v1 or magic == v2:
            if total < _MIN_MESSAGE:
                return starts, FileEnd("", 0, 0, base + p, END_CORRUPT, total_size=total, magic=magic,
                                       detail=f"TOTALSIZE {total} is below the smallest message ({_MIN_MESSAGE})",
                                       check="commitlog.total-size"), None
            if base + p + total > file_size:
                return starts, FileEnd("", 0, 0, base + p, END_TORN, total_size=total, magic=magic,
                                       detail=f"TOTALSIZE {total} runs past the end of the file "
                                              f"({file_size - base - p} bytes left)",
                                       check="commitlog.torn-tail"), None
            if p + total > n:
                return starts, None, base + p
            starts.append(p)
            p += total
            continue
        if magic == blank:
            return starts, FileEnd("", 0, 0, base + p, END_BLANK, blank_size=total,
                                   total_size=total, magic=magic), None
        if magic == 0:
            return starts, FileEnd("", 0, 0, base + p, END_ZERO, total_size=total, magic=magic,
                                   detail="" if total == 0 else f"zero magic with TOTALSIZE {total}"), None
        return starts, FileEnd("", 0, 0, base + p, END_CORRUPT, total_size=total, magic=magic,
                               detail=f"illegal magic code 0x{magic:08X}",
                               check="commitlog.magic"), None
    return starts, None, base + p


def _walk_entries_window(file_base: int):
    """``_walk_chain`` for a DLedger data file based at ``file_base``."""
    def walk(window: bytes, base: int, file_size: int, hi: int):
        starts, stop, resume = _walk_entries(window, base, file_base, file_size, hi)
        return np.asarray(starts, dtype=np.int64), stop, resume
    return walk


def _walk_entries(window: bytes, base: int, file_base: int, file_size: int, hi: int, p: int = 0,
                  core=native.core):
    """Follow DLedger entries (``formats.dledger``) from window position ``p``: each entry's
    header is checked (magic, size, its own pos) and its body must be one whole MESSAGE record
    (TOTALSIZE equal to the body length); the record starts are returned as ``_walk_chain``
    returns them, so records decode and carry their offsets exactly as in a CommitLog. The
    DLedger blank ends the file (the next file continues), zeros end the data.

    With the native ``core`` the entries this loop would take without stopping are taken in C
    first (``entry_run``); the loop then judges where they end."""
    starts = []
    n = len(window)
    limit = hi - base
    if core is not None and p == 0:
        out = np.empty(n // (dl.ENTRY_BODY_OFFSET + _MIN_MESSAGE) + 1, dtype=np.int64)
        count, p = core.entry_run(window, limit, file_base + base, dl.ENTRY_MAGIC, dl.ENTRY_BODY_OFFSET,
                                  dl.ENTRY_HEADER_OFFSETS["pos"], dl.ENTRY_HEADER_OFFSETS["body_length"],
                                  _MIN_MESSAGE, cl.MESSAGE_MAGIC_V1, cl.MESSAGE_MAGIC_V2, out)
        starts = out[:count].tolist()
    head = _ENTRY_HEAD.unpack_from
    body_at = dl.ENTRY_BODY_OFFSET
    prefix = PREFIX.unpack_from
    while p < limit:
        at = base + p
        if p + dl.BLANK_HEADER_SIZE > n:
            if base + n >= file_size:
                kind = END_ZERO if not any(window[p:]) else END_TORN
                return starts, FileEnd("", 0, 0, at, kind,
                                       detail="" if kind == END_ZERO else "an entry header cut by the end of the file",
                                       check="" if kind == END_ZERO else "dledger.torn-tail"), None
            return starts, None, at
        magic, size = _BLANK_HEAD.unpack_from(window, p)
        if magic == dl.BLANK_MAGIC:
            return starts, FileEnd("", 0, 0, at, END_BLANK, blank_size=size, total_size=size, magic=magic), None
        if magic == 0:
            return starts, FileEnd("", 0, 0, at, END_ZERO, total_size=size, magic=magic,
                                   detail="" if size == 0 else f"zero magic with size {size}"), None
        if magic != dl.ENTRY_MAGIC:
            return starts, FileEnd("", 0, 0, at, END_CORRUPT, total_size=size, magic=magic,
                                   detail=f"illegal DLedger entry magic {magic}", check="dledger.magic"), None
        if size < body_at + _MIN_MESSAGE:
            return starts, FileEnd("", 0, 0, at, END_CORRUPT, total_size=size, magic=magic,
                                   detail=f"entry size {size} cannot hold a message", check="dledger.size"), None
        if at + size > file_size:
            return starts, FileEnd("", 0, 0, at, END_TORN, total_size=size, magic=magic,
                                   detail=f"entry size {size} runs past the end of the file "
                                          f"({file_size - at} bytes left)", check="dledger.torn-tail"), None
        if p + size > n:
            return starts, None, at
        fields = head(window, p)
        pos, body_length = fields[_POS], fields[_BODY_LENGTH]
        if pos != file_base + at:
            return starts, FileEnd("", 0, 0, at, END_CORRUPT, total_size=size, magic=magic,
                                   detail=f"entry pos {pos} is not its offset {file_base + at}",
                                   check="dledger.pos"), None
        total, record_magic = prefix(window, p + body_at)
        if body_length != size - body_at or total != body_length or record_magic not in cl.MESSAGE_MAGICS:
            return starts, FileEnd("", 0, 0, at, END_CORRUPT, total_size=size, magic=magic,
                                   detail=f"entry body ({body_length} bytes of {size}) is not one message "
                                          f"(TOTALSIZE {total}, magic 0x{record_magic & 0xFFFFFFFF:08X})",
                                   check="dledger.body"), None
        starts.append(p + body_at)
        p += size
    return starts, None, base + p


def _decode_window(window: bytes, base: int, path: str, file_base: int, starts: np.ndarray,
                   check_crc: bool, crc_column: bool = False):
    """Decode every record starting at ``starts`` (window positions). Stops at the first bad one."""
    buf = np.frombuffer(window, dtype=np.uint8)
    cols = _decode_columns(buf, starts)
    ok = cols.pop("_valid")
    bad = None
    if not ok.all():
        first = int(np.argmin(ok))
        detail = cols.pop("_why")[first]
        bad = FileEnd("", 0, 0, base + int(starts[first]), END_CORRUPT,
                      total_size=int(cols["size"][first]), magic=int(cols["magic"][first]),
                      detail=detail, check="commitlog.length")
        cols = {k: v[:first] for k, v in cols.items() if k != "_why"}
    else:
        cols.pop("_why")
    if check_crc and len(cols["position"]):
        crc_ok = body_crc_matches(buf, cols)
        if not crc_ok.all():
            first = int(np.argmin(crc_ok))
            bad = FileEnd("", 0, 0, base + int(cols["position"][first]), END_CORRUPT,
                          total_size=int(cols["size"][first]), magic=int(cols["magic"][first]),
                          detail=f"body CRC mismatch: stored {int(cols['body_crc'][first])}",
                          check="commitlog.body-crc")
            cols = {k: v[:first] for k, v in cols.items()}
    if crc_column:
        cols["body_crc_ok"] = body_crc_matches(buf, cols)
    cols["position"] = cols["position"] + base
    cols["phy_offset"] = cols["position"] + file_base
    return RecordBatch(path, file_base, buf, base, cols), bad


def _window_scan(core, check_crc: bool, crc_column: bool, piece_size: int | None, entries: bool = False):
    from rmqtool.records.window_scan import WindowScan, scan_layout
    layout = _SCAN_LAYOUTS.get(id(core))
    if layout is None:
        layout = _SCAN_LAYOUTS[id(core)] = scan_layout(core, cl.MESSAGE_HEAD_DTYPE, _TAIL_DTYPE, _MIN_MESSAGE)
    crc_mode = core.CRC_STOP if check_crc else core.CRC_NOTE if crc_column else core.CRC_NONE
    entry_layout = (dl.ENTRY_MAGIC, dl.ENTRY_BODY_OFFSET, dl.ENTRY_HEADER_OFFSETS["pos"],
                    dl.ENTRY_HEADER_OFFSETS["body_length"]) if entries else None
    return WindowScan(core, layout, _NATIVE_NAMES, crc_mode, piece_size, entry_layout,
                      hash_prop=list(EXTRACTED_PROPERTIES).index(HASHED_PROPERTY))


#: the layout vector of each native core (in practice one), built from formats/ on first use
_SCAN_LAYOUTS: dict = {}


def _native_batch(path: str, file_base: int, buf: np.ndarray, base: int, names: tuple, cols: np.ndarray,
                  props: np.ndarray, rows: int, crc_column: bool) -> RecordBatch:
    """The batch of the native window scan: its column rows by name, as ``_decode_window`` makes it."""
    out = {name: cols[i, :rows] for i, name in enumerate(names)}
    crc_ok = out.pop("body_crc_ok")
    hashes = {"topic": out.pop("topic_hash"), HASHED_PROPERTY: out.pop("prop_hash")}
    k = len(EXTRACTED_PROPERTIES)
    for j, name in enumerate(EXTRACTED_PROPERTIES):
        out[f"{name}_start"], out[f"{name}_len"] = props[j, :rows], props[k + j, :rows]
    if crc_column:
        out["body_crc_ok"] = crc_ok == 1
    out["position"] = out["position"] + base
    out["phy_offset"] = out["position"] + file_base
    return RecordBatch(path, file_base, buf, base, out, hashes=hashes)


def _reference_stop(buf: np.ndarray, base: int, p: int, malformed: bool) -> FileEnd:
    """The ``FileEnd`` ``_decode_window`` gives for the record at window position ``p``, which
    the native scan found malformed (computed length) or with a body CRC that differs."""
    one = np.array([p], dtype=np.int64)
    cols = _decode_columns(buf, one)
    if malformed != (not cols["_valid"][0]) or not malformed and body_crc_matches(buf, cols)[0]:
        return None             # the reference sees it otherwise: the caller lets it decide
    if malformed:
        return FileEnd("", 0, 0, base + p, END_CORRUPT, total_size=int(cols["size"][0]),
                       magic=int(cols["magic"][0]), detail=cols["_why"][0], check="commitlog.length")
    return FileEnd("", 0, 0, base + p, END_CORRUPT, total_size=int(cols["size"][0]), magic=int(cols["magic"][0]),
                   detail=f"body CRC mismatch: stored {int(cols['body_crc'][0])}", check="commitlog.body-crc")


def body_crc_matches(buf: np.ndarray, cols: dict) -> np.ndarray:
    """crc32(body) & 0x7FFFFFFF == BODYCRC; no check for an empty body (as upstream)."""
    start = cols["body_start"]
    length = cols["body_len"]
    if not len(start):
        return np.ones(0, dtype=bool)
    got = crc32_spans(buf, start, np.maximum(length, 0)).astype(np.int64)
    return ((got & cl.BODY_CRC_MASK) == cols["body_crc"]) | (length <= 0)


def _decode_columns(buf: np.ndarray, starts: np.ndarray) -> dict:
    """Vectorized decode of MESSAGE records at ``starts`` (positions in ``buf``)."""
    head = np.ascontiguousarray(gather_bytes(buf, starts, cl.MESSAGE_HEAD_SIZE)).view(
        cl.MESSAGE_HEAD_DTYPE).reshape(-1)
    sys_flag = head["sys_flag"].astype(np.int64)
    born_size = np.where(sys_flag & cl.BORNHOST_V6_FLAG, cl.HOST_V6_SIZE, cl.HOST_V4_SIZE)
    store_size = np.where(sys_flag & cl.STOREHOST_V6_FLAG, cl.HOST_V6_SIZE, cl.HOST_V4_SIZE)
    born_host_start = starts + cl.MESSAGE_HEAD_SIZE
    store_ts_pos = born_host_start + born_size
    store_host_start = store_ts_pos + cl.STORE_TIMESTAMP_SIZE
    tail_pos = store_host_start + store_size
    tail = np.ascontiguousarray(gather_bytes(buf, tail_pos, cl.MESSAGE_TAIL_SIZE)).view(_TAIL_DTYPE).reshape(-1)
    body_length = tail["body_length"].astype(np.int64)
    body_start = tail_pos + cl.MESSAGE_TAIL_SIZE
    body_len = np.maximum(body_length, 0)
    magic = head["magic"].astype(np.int64)
    v2 = magic == cl.MESSAGE_MAGIC_V2
    topic_len_pos = body_start + body_len
    if v2.all():
        topic_len = gather_ints(buf, topic_len_pos, ">i2")
    elif not v2.any():
        topic_len = gather_ints(buf, topic_len_pos, ">i1")
    else:
        topic_len = np.where(v2, gather_ints(buf, topic_len_pos, ">i2"), gather_ints(buf, topic_len_pos, ">i1"))
    topic_field = np.where(v2, cl.TopicLengthV2.sizeof(), cl.TopicLengthV1.sizeof())
    topic_start = topic_len_pos + topic_field
    props_len_pos = topic_start + np.maximum(topic_len, 0)
    props_length = gather_ints(buf, props_len_pos, ">i2")
    props_start = props_len_pos + cl.PropertiesLength.sizeof()
    total = head["total_size"].astype(np.int64)
    computed = (cl.MESSAGE_FIXED_SIZE + born_size + store_size + topic_field + body_len
                + np.maximum(topic_len, 0) + np.maximum(props_length, 0))
    valid = (topic_len >= 0) & (computed == total)
    why = np.where(topic_len < 0, "negative topic length",
                   np.char.add(np.char.add("computed length ", computed.astype(str)),
                               np.char.add(" != TOTALSIZE ", total.astype(str)))) if not valid.all() else None
    props_len = np.where(props_length > 0, props_length, -1)
    cols = {
        "position": starts,
        "size": total,
        "magic": magic,
        "body_crc": head["body_crc"].astype(np.int64),
        "queue_id": head["queue_id"].astype(np.int64),
        "flag": head["flag"].astype(np.int64),
        "queue_offset": head["queue_offset"].astype(np.int64),
        "stored_phy_offset": head["physical_offset"].astype(np.int64),
        "sys_flag": sys_flag,
        "born_timestamp": head["born_timestamp"].astype(np.int64),
        "born_host_start": born_host_start,
        "store_timestamp": gather_ints(buf, store_ts_pos, ">i8"),
        "store_host_start": store_host_start,
        "reconsume_times": tail["reconsume_times"].astype(np.int64),
        "prepared_transaction_offset": tail["prepared_transaction_offset"].astype(np.int64),
        "body_length": body_length,
        "body_start": body_start,
        "body_len": np.where(body_length > 0, body_length, 0),
        "topic_start": topic_start,
        "topic_len": np.maximum(topic_len, 0),
        "props_start": props_start,
        "props_len": props_len,
        "_valid": valid,
        "_why": why,
    }
    if not valid.all():
        keep = int(np.argmin(valid))
        sub = {k: (v[:keep + 1] if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
        sub["_why"] = why
        sub["_valid"] = valid[:keep + 1]
        cols = sub
    good = cols["_valid"]
    n_good = int(np.argmin(good)) if not good.all() else len(good)
    cols.update(extract_properties(buf, cols["props_start"][:n_good], cols["props_len"][:n_good],
                                   pad_to=len(good)))
    return cols


_KEY_PATTERNS = {name: np.frombuffer((key + cl.NAME_VALUE_SEPARATOR).encode("ascii"), np.uint8)
                 for name, key in EXTRACTED_PROPERTIES.items()}
_KEY_HEADS = {name: np.ascontiguousarray(p[:4]).view(np.uint32)[0] for name, p in _KEY_PATTERNS.items()}
_KEY_WORDS = {name: [(j, np.ascontiguousarray(p[j:j + 4]).view(np.uint32)[0]) for j in range(4, len(p) - 3, 4)]
              for name, p in _KEY_PATTERNS.items()}
_MIN_KEY = min(len(p) for p in _KEY_PATTERNS.values())
assert _MIN_KEY >= 5
_SEP = ord(cl.PROPERTY_SEPARATOR)


_NATIVE_NAMES = tuple(key.encode("ascii") for key in EXTRACTED_PROPERTIES.values())


def extract_properties(buf: np.ndarray, props_start: np.ndarray, props_len: np.ndarray,
                       pad_to: int | None = None, core=native.core) -> dict:
    """Spans of the TAGS/KEYS/UNIQ_KEY/DELAY values, parsed like upstream (last duplicate wins).

    Byte-level equivalent of the Java parser: a segment (split on 0x02) whose key is
    exactly NAME (the first 0x01 follows it) and whose value is non-empty; the
    separators are ASCII, which UTF-8 replacement never swallows, and the length rule
    (>= 3 chars) is implied by a non-empty key and value. Each record's properties are
    copied into a row of a (records, power-of-two width) matrix, so every search is a
    vectorized pass over only the properties bytes. With the native ``core`` one C loop
    splits each record's properties on the separators instead.
    """
    n = len(props_start)
    props_start = np.ascontiguousarray(props_start, dtype=np.int64)
    props_len = np.ascontiguousarray(props_len, dtype=np.int64)
    if core is not None:
        starts = np.zeros((len(EXTRACTED_PROPERTIES), pad_to or n), dtype=np.int64)
        lens = np.full((len(EXTRACTED_PROPERTIES), pad_to or n), -1, dtype=np.int64)
        core.split_properties(buf, props_start, props_len, _NATIVE_NAMES, starts, lens)
        out = {}
        for j, name in enumerate(EXTRACTED_PROPERTIES):
            out[f"{name}_start"], out[f"{name}_len"] = starts[j], lens[j]
        return out
    out = {}
    for name in EXTRACTED_PROPERTIES:
        out[f"{name}_start"] = np.zeros(pad_to or n, dtype=np.int64)
        out[f"{name}_len"] = np.full(pad_to or n, -1, dtype=np.int64)
    rec = np.flatnonzero(props_len > 0)
    if not len(rec):
        return out
    widths = row_width(props_len[rec], 64, steps=4)
    for width in distinct_widths(widths):
        group = rec[widths == width] if len(rec) else rec
        _extract_rows(buf, group, props_start[group], props_len[group], int(width), out)
    return out


def _extract_rows(buf, rec, starts, lens, width: int, out: dict) -> None:
    """``extract_properties`` for records whose properties fit ``width`` bytes.

    Segments open at a row's start and after every 0x02 inside the row. Their first four
    bytes are matched against each key at once, the rest of the key on the survivors. A
    segment's value ends at the next 0x02 (the separator after the one that opened it, or
    the row's first one) or at the row's end. The segments after separators are in row and
    position order, and every row-start segment precedes them in its row: assigning the
    row-start matches first and the last separator match of a row after them keeps the last
    duplicate, as the Java parser does, without sorting.
    """
    flat = span_rows(buf, starts, width).reshape(-1)
    size = len(flat)
    nrows = len(rec)
    row_base = np.arange(nrows, dtype=np.int64) * width
    row_end = row_base + lens
    seps = np.flatnonzero(flat == _SEP)
    seps = seps[seps < row_end[seps // width]]                 # bytes past a row's length are not its own
    sep_row = seps // width
    opening = np.flatnonzero(seps + 1 < row_end[sep_row])      # a trailing 0x02 opens no segment
    # index of each row's first separator (== len(seps) past the last one)
    row_first_sep = np.zeros(nrows + 1, dtype=np.int64)
    np.cumsum(np.bincount(sep_row, minlength=nrows), out=row_first_sep[1:])
    n_seps = len(seps)
    heads = strided_view(flat, np.uint32) if size >= 4 else np.zeros(0, np.uint32)
    kinds = []      # (segment starts, their first four bytes, index of the separator that may end them, rows)
    for seg, nxt_sep, seg_row in ((row_base, row_first_sep[:nrows], None),
                                  (seps[opening] + 1, opening + 1, sep_row[opening])):
        room = seg < size - _MIN_KEY        # a match needs the key, 0x01 and one value byte in the row
        if not room.all():
            seg, nxt_sep = seg[room], nxt_sep[room]
            seg_row = None if seg_row is None else seg_row[room]
        kinds.append((seg, heads[seg], nxt_sep, seg_row))
    for name, pattern in _KEY_PATTERNS.items():
        m = len(pattern)
        for seg, head, nxt_sep, seg_row in kinds:
            hit = np.flatnonzero(head == _KEY_HEADS[name])     # first four bytes at once
            hit = hit[seg[hit] < size - m]
            for j, word in _KEY_WORDS[name]:                   # the rest four bytes at a time
                if not len(hit):
                    break
                hit = hit[heads[seg[hit] + j] == word]
            for j in range(4 + 4 * len(_KEY_WORDS[name]), m):
                if not len(hit):
                    break
                hit = hit[flat[seg[hit] + j] == pattern[j]]
            if not len(hit):
                continue
            s = seg[hit]
            r = s // width if seg_row is None else seg_row[hit]
            v0 = s + m
            k = nxt_sep[hit]
            v1 = row_end[r]
            if n_seps:
                cut = seps[np.minimum(k, n_seps - 1)]
                v1 = np.where((k < n_seps) & (cut < v1), cut, v1)
            ok = v1 > v0                                       # empty values are dropped
            r, v0, v1 = r[ok], v0[ok], v1[ok]
            if not len(r):
                continue
            if seg_row is not None and len(r) > 1:
                last = np.ones(len(r), dtype=bool)
                last[:-1] = r[:-1] != r[1:]                    # the last duplicate wins
                r, v0, v1 = r[last], v0[last], v1[last]
            out[f"{name}_start"][rec[r]] = starts[r] + (v0 - row_base[r])
            out[f"{name}_len"][rec[r]] = v1 - v0


def decode_record_reference(raw: bytes) -> dict:
    """Parse one MESSAGE with the construct declaration (the reference path)."""
    return cl.Message.parse(raw)


# --- whole store ------------------------------------------------------------------------
def walk_progress(stores, progress):
    """``walked(path, position)`` that reports ``progress(done, total)`` as bytes of all of ``stores``'
    CommitLog files, walked one file after another (None without ``progress``)."""
    if progress is None:
        return None
    before, total = {}, 0                       # each file: the bytes of the files walked before it
    for s in stores:
        for seg in s.commitlog.files:
            before[str(seg.path)] = total
            total += seg.size

    def walked(path, position: int) -> None:
        progress(min(before.get(str(path), 0) + position, total), total)
    return walked


def walk_store(store, check_crc: bool = False, start_offset: int = 0, stop_at_break: bool = False,
               files=None, reuse_buffer: bool = False, chunk_size: int | None = None) -> Iterator[RecordBatch | FileEnd]:
    """Yield every file's record batches followed by its ``FileEnd``, in commitlog order.

    With ``stop_at_break`` the walk stops at the first file that does not end in a BLANK,
    as the broker's recovery does. ``reuse_buffer``: every window is read into one buffer
    (memory: one window), for a caller done with each batch before it takes the next;
    ``chunk_size``: the window (``FileScan``'s).
    """
    buffer = ReadBuffer() if reuse_buffer else None
    for seg in files if files is not None else store.commitlog.files:
        if seg.start + store.commitlog.file_size <= start_offset:
            continue
        lo = max(start_offset - seg.start, 0)
        scan = FileScan(seg.path, seg.start, lo=lo, check_crc=check_crc, buffer=buffer, chunk_size=chunk_size)
        try:
            yield from scan
        except FileChangedError as exc:
            yield FileEnd(str(seg.path), seg.start, seg.size, exc.offset or 0, END_TORN,
                          detail=exc.message, check="commitlog.file-changed")
            if stop_at_break:
                return
            continue
        yield scan.end
        if stop_at_break and scan.end.ends_log:
            return


#: bytes that must be zero at a piece's start for the piece to count as past the data
ZERO_PROBE = 64 << 10


def past_data_end(path: Path | str, pos: int) -> bool:
    """Whether a piece of a CommitLog file that starts at ``pos`` (not a known record start) lies
    past the end of the file's data: it starts in zeros (the pre-allocated tail of the newest
    file, a sparse file's holes, which are skipped, not read). Such a piece is not resynced
    through: whoever splits a file into pieces (rebuild's pieces, the engines' tasks) gives it no
    records. Were a record there after all (a body of zeros across the cut), the chain from the
    previous piece reaches it and the piece is scanned again from there."""
    return pos < file_size(path) and first_nonzero(path, pos, pos + ZERO_PROBE) is None


def find_record_start(path: Path | str, file_base: int, lo: int, hi: int | None = None) -> int | None:
    """Resync: first position >= lo where a MESSAGE magic sits and PHYSICALOFFSET == base + pos.
    In a DLedger data file, the first entry >= lo whose header (magic, pos) is right and whose
    body is such a record: where an entry walk can start."""
    entries = is_entry_file(path)
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        end = size if hi is None else min(hi, size)
        pos = lo
        step = 1 << 20              # most records are small: read more only when no anchor turns up
        while pos < end:
            window = fh.read(pos, min(step + cl.MESSAGE_HEAD_SIZE, size - pos), exact=False)
            buf = np.frombuffer(window, dtype=np.uint8)
            if len(buf) < cl.MESSAGE_HEAD_SIZE:
                return None
            cand, _ = _message_candidates(buf, len(buf) - _HEAD_DTYPE.itemsize + 1)
            if len(cand):
                phys = strided_view(buf, _HEAD_DTYPE)[cand]["physical_offset"]
                hit = cand[phys == file_base + pos + cand]
                if entries:
                    hit = _entry_heads(buf, hit, file_base + pos)
                hit = hit[pos + hit < end]
                if len(hit):
                    return pos + int(hit[0])
            pos += step
            step = min(step * 2, CHUNK_SIZE)
        return None


def _entry_heads(buf: np.ndarray, records: np.ndarray, base: int) -> np.ndarray:
    """The entry starts (window positions) of the ``records`` found in a DLedger data window
    whose entry header sits whole in the window with the entry magic and its own pos."""
    heads = records[records >= dl.ENTRY_BODY_OFFSET] - dl.ENTRY_BODY_OFFSET
    if not len(heads):
        return heads
    h = strided_view(buf, _ENTRY_HEAD_DTYPE)[heads]
    return heads[(h["magic"] == dl.ENTRY_MAGIC) & (h["pos"] == base + heads)]


def resync_in_file(path: Path | str, file_base: int, pos: int, kind: str) -> int | None:
    """Where a walk that stopped at in-file ``pos`` (end ``kind``) finds its next record in the
    same file, or None: past zeros (END_ZERO: the first non-zero byte, then the resync), or
    past the bad record (from ``pos + 1``)."""
    if kind == END_ZERO:
        nz = first_nonzero(path, pos)
        return None if nz is None else find_record_start(path, file_base, nz)
    return find_record_start(path, file_base, pos + 1)


def next_record_after(store, offset: int, kind: str, to_offset: int | None = None) -> int | None:
    """The CommitLog offset of the first record the resync finds after a walk stopped at
    ``offset`` (end ``kind``): in that file past the stop, else at the start of a later file
    that holds data. None when the rest of the CommitLog (below ``to_offset``) holds none.

    A record exactly at the stop of an END_ZERO is returned too: the caller tells a live
    file's growth (a record written where the zeros were) from a hole in the data."""
    for seg in store.commitlog.files:
        if to_offset is not None and seg.start >= to_offset:
            return None
        if seg.start + store.commitlog.file_size <= offset or seg.size == 0:
            continue
        try:
            if seg.start <= offset:
                found = resync_in_file(seg.path, seg.start, offset - seg.start, kind)
            else:
                nz = first_nonzero(seg.path, 0)
                found = None if nz is None else find_record_start(seg.path, seg.start, nz)
        except FileChangedError:
            continue
        if found is not None:
            at = seg.start + found
            return at if to_offset is None or at < to_offset else None
    return None
