"""The native window scan: a read window filled piece by piece, each piece walked and decoded
while its bytes are still in the CPU cache.

The reference ``scan.FileScan`` reads a window and then walks, decodes, splits properties and
CRCs it in separate passes; by the time a pass reaches a record the window has left the cache,
so every pass pays memory latency per record. Here the window is read in ``PIECE`` bytes at a
time and after each piece the native ``scan_records`` takes every record that lies whole in what
has been read: the chain walk, the columns, the property spans and (asked) the body CRC in one
pass (in a DLedger data file, entry by entry). The result is the batch the reference path makes
from the same window: where the walk stops is judged by the same scalar loop
(``scan._walk_chain_scalar``, ``scan._walk_entries``), a malformed record's or a bad
CRC's ``FileEnd`` is described by the reference decoder, and anything this path does not expect
is handed to the reference path whole (``tests/test_fastpath_equivalence.py``).
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from formats import commitlog as cl
from formats.derive import field_dtype

#: bytes read before the records in them are taken: small enough to stay in the L2/L3 cache
PIECE = 1 << 20
#: rows of columns first allocated per byte of window (grown by doubling when a window holds more)
BYTES_PER_ROW = 256
#: rows added to every column matrix's width: a power-of-two width puts every column's row i in the
#: same cache set, and the ~35 columns written per record then evict each other from the 8-way L1 and
#: L2 (scan_records of the rebuild bench's windows: 22 % faster with one cache line of padding)
ROW_PAD = 8


def scan_layout(core, head_dtype, tail_dtype, min_message: int) -> np.ndarray:
    """The int64 layout vector ``core.scan_records`` reads, by the names of ``core.SCAN_LAYOUT``,
    every value taken from ``formats.commitlog``."""
    values = {}
    for part, dtype in (("head", head_dtype), ("tail", tail_dtype)):
        for name in dtype.names:
            field, at = dtype.fields[name][:2]
            values[f"{part}.{name}.at"] = at
            values[f"{part}.{name}.size"] = field.itemsize
            values[f"{part}.{name}.signed"] = int(field.kind == "i")
    for name, subcon in (("store_timestamp", cl.StoreTimestamp), ("topic_length_v1", cl.TopicLengthV1),
                         ("topic_length_v2", cl.TopicLengthV2), ("properties_length", cl.PropertiesLength)):
        dtype = field_dtype(subcon)
        values[f"{name}.size"] = dtype.itemsize
        values[f"{name}.signed"] = int(dtype.kind == "i")
    v1, v2 = field_dtype(cl.TopicLengthV1), field_dtype(cl.TopicLengthV2)
    if v1.kind != v2.kind:
        raise TypeError("the two topic length fields differ in sign")
    values["topic_length.signed"] = int(v1.kind == "i")
    values.update(head_size=cl.MESSAGE_HEAD_SIZE, tail_size=cl.MESSAGE_TAIL_SIZE, fixed_size=cl.MESSAGE_FIXED_SIZE,
                  host_v4_size=cl.HOST_V4_SIZE, host_v6_size=cl.HOST_V6_SIZE, born_v6_flag=cl.BORNHOST_V6_FLAG,
                  store_v6_flag=cl.STOREHOST_V6_FLAG, magic_v1=cl.MESSAGE_MAGIC_V1, magic_v2=cl.MESSAGE_MAGIC_V2,
                  min_message=min_message, body_crc_mask=cl.BODY_CRC_MASK)
    return np.array([values[name] for name in core.SCAN_LAYOUT], dtype=np.int64)


class ArrayPool:
    """Arrays handed out again once nothing holds them: a window's pages (read buffer and
    columns) are faulted in once per process, not once per window, and a batch kept by its
    consumer keeps its bytes and columns (an array is not handed out while any view of it lives)."""

    def __init__(self, keep: int = 2) -> None:
        self._arrays: list[np.ndarray] = []
        self._keep = keep
        self._lock = threading.Lock()

    def take(self, shape: tuple, dtype, exact: bool = False) -> np.ndarray:
        """A free array of ``dtype`` with ``shape``'s leading dimensions and at least its last
        one (``exact``: that one too); its contents are whatever was there."""
        dtype = np.dtype(dtype)
        with self._lock:
            for arr in self._arrays:
                # held by the list, ``arr`` and getrefcount's argument only: no view is alive
                if (arr.dtype == dtype and arr.shape[:-1] == shape[:-1] and arr.shape[-1] >= shape[-1]
                        and (not exact or arr.shape[-1] == shape[-1]) and sys.getrefcount(arr) == 3):
                    return arr
            fresh = np.empty(shape, dtype=dtype)        # pages faulted by their first use, not zeroed here
            if len(self._arrays) >= self._keep:
                free = [a for a in self._arrays if sys.getrefcount(a) == 3]
                if free:                                 # replace a free one that was too small
                    smallest = min(free, key=lambda a: a.size)
                    # by identity: list.remove would compare arrays element by element
                    del self._arrays[next(i for i, a in enumerate(self._arrays) if a is smallest)]
            if len(self._arrays) < self._keep:
                self._arrays.append(fresh)
            return fresh


#: read windows, and the column and property matrices filled from them: three of each, for a walk
#: made one window ahead (``records.ahead``: one checked, one waiting, one being read)
_windows, _columns, _props = ArrayPool(3), ArrayPool(3), ArrayPool(3)


class WindowScan:
    """One FileScan's native window reads (see the module's docstring)."""

    def __init__(self, core, layout: np.ndarray, names: tuple, crc_mode: int, piece: int | None = None,
                 entry_layout: tuple | None = None, hash_prop: int = -1):
        self.core = core
        # which of ``names`` has its value hashed with the topic while in the cache (-1: none)
        self.hash_prop = hash_prop
        self.layout = layout
        self.names = names
        self.crc_mode = crc_mode          # core.CRC_NONE, CRC_STOP or CRC_NOTE
        self.piece = piece or PIECE
        # a DLedger data file: (entry magic, body offset, pos field, body length field)
        self.entry_layout = entry_layout

    def read_and_take(self, fh, pos: int, want: int, hi: int, buffer=None, file_base: int = 0):
        """Read ``want`` bytes at file position ``pos`` and take the records in them (in a
        DLedger data file based at ``file_base``: the records of the entries in them).

        Returns (window, columns, rows, stop position, why): ``columns`` the (columns, capacity)
        matrix and ``props`` rows filled for ``rows`` records; ``why`` is the core's stop reason
        at window position ``stop`` (SCAN_CHAIN once the whole window is read)."""
        core = self.core
        window = buffer.view(want, want) if buffer is not None else memoryview(_windows.take((want,), np.uint8))[:want]
        piece = want if fh.remote is not None else self.piece    # one ranged GET per window
        cap = max(want // BYTES_PER_ROW, 64) + ROW_PAD
        cols = _columns.take((len(core.SCAN_COLUMNS), cap), np.int64)
        props = _props.take((2 * len(self.names), cols.shape[1]), np.int64, exact=True)
        rows, p, read, limit = 0, 0, 0, hi - pos
        entries = None if self.entry_layout is None else (file_base + pos, *self.entry_layout)
        pieces = _Pieces(fh, window, pos, piece)
        try:
            while True:
                if read < want:
                    read = pieces.through(read + min(piece, want - read))
                taken, p, why = core.scan_records(window[:read], p, limit, self.crc_mode, self.layout, self.names,
                                                  cols, props, rows, entries, self.hash_prop)
                rows += taken
                if why == core.SCAN_FULL:
                    cols, props = _grown(cols, rows), _grown(props, rows)
                    continue
                if why != core.SCAN_CHAIN or read == want:
                    if read < want:    # the whole window, as the reference reads it (a stop is described from it)
                        pieces.through(want)
                    return window, cols, props, rows, p, why
        finally:
            pieces.close()


class _Pieces:
    """A window's bytes read piece by piece in order: by the caller (``through`` reads up to the
    asked end), or, with ``fileio.READ_AHEAD``, by a second thread that reads on while the caller
    scans what is already read (``preadv`` and ``scan_records`` release the GIL). The same reads
    in the same order either way; a read's error is raised by the ``through`` that needs its bytes,
    and ``close`` stops and joins the reader before the window can be handed out again."""

    def __init__(self, fh, window: memoryview, pos: int, piece: int):
        from rmqtool.io import fileio
        self.fh, self.window, self.pos, self.piece = fh, window, pos, piece
        self.done = 0                    # bytes of the window read
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._ahead = fileio.READ_AHEAD and fh.remote is None and len(window) > piece
        self._cond = threading.Condition()
        self._stop = False

    def _read(self, end: int) -> None:
        step = min(self.piece, end - self.done)
        self.fh.read_into(self.window[self.done:self.done + step], self.pos + self.done)
        self.done += step

    def through(self, end: int) -> int:
        """Wait until (or read until) at least ``end`` bytes are read; how many are."""
        if not self._ahead:
            while self.done < end:
                self._read(end)
            return self.done
        if self._thread is None:
            self._read(end)               # the first piece here: the reader starts behind it
            self._thread = threading.Thread(target=self._read_ahead, name="rmqtool-read-ahead", daemon=True)
            self._thread.start()
            return self.done
        with self._cond:
            while self.done < end and self.error is None:
                self._cond.wait()
            if self.done < end:
                raise self.error
            return self.done

    def _read_ahead(self) -> None:
        try:
            while self.done < len(self.window) and not self._stop:
                step = min(self.piece, len(self.window) - self.done)
                self.fh.read_into(self.window[self.done:self.done + step], self.pos + self.done)
                with self._cond:
                    self.done += step
                    self._cond.notify()
        except BaseException as exc:       # handed to the caller's ``through``
            with self._cond:
                self.error = exc
                self._cond.notify()

    def close(self) -> None:
        if self._thread is not None:
            self._stop = True
            self._thread.join()
            self._thread = None


def _grown(matrix: np.ndarray, rows: int) -> np.ndarray:
    out = np.empty((matrix.shape[0], matrix.shape[1] * 2 + ROW_PAD), dtype=matrix.dtype)
    out[:, :rows] = matrix[:, :rows]
    return out
