"""Read a 5.x timer store (``formats.timer``; docs/format-timer.md): the timer log's units, the
wheel's slots and the timer checkpoint, bounded and read-only like every other reader.

Damage is data, not an exception: the log walk reports where and why a file's units stop
(``LogEnd``), the slot chain walk stops at a loop or a position outside the log.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from formats import timer as tf
from rmqtool.io.fileio import ReadOnlyFile, next_data, regular_file_present, unit_file_head
from rmqtool.io import storage
from rmqtool.io.segments import SegmentQueue

WHEEL_NAME = "timerwheel"
LOG_DIR = "timerlog"
CHECKPOINT_PATH = ("config", "timercheck")
#: MessageStoreConfig defaults
DEFAULT_PRECISION_MS = 1000
DEFAULT_LOG_FILE_SIZE = 100 * 1024 * 1024
_UNIT_NAMES = tuple(sc.name for sc in tf.TimerLogUnit.subcons)
_SLOT_NAMES = tuple(sc.name for sc in tf.WheelSlot.subcons)
_CHECKPOINT_NAMES = tuple(sc.name for sc in tf.TimerCheckpoint.subcons)


@dataclass
class Unit:
    pos: int                      # position in the timer log (file base + in-file position)
    path: str
    position: int                 # in-file
    size: int
    prev_pos: int
    magic: int
    enqueue_time_ms: int
    delay_ms: int
    offset_py: int
    size_py: int
    real_topic_hash: int
    reserved: int

    @property
    def slot_time_ms(self) -> int:
        """The slot the unit was put in: enqueue time + delay (doEnqueue's delayedTime)."""
        return self.enqueue_time_ms + self.delay_ms

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["slot_time_ms"] = self.slot_time_ms
        d["roll"] = bool(self.magic & tf.MAGIC_ROLL)
        d["delete"] = bool(self.magic & tf.MAGIC_DELETE)
        return d


@dataclass
class LogEnd:
    """Where a timer log file's units stop: ``blank`` (the filler), ``zero`` (end of data),
    ``eof`` or ``corrupt`` (``detail`` says why)."""
    path: str
    position: int
    kind: str
    detail: str = ""


@dataclass
class Slot:
    index: int
    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Chain:
    """A slot's units from its last back to its first (``prev_pos``), and why the walk stopped
    early when it did (a loop, a position outside the log, a unit that is not one)."""
    units: list = field(default_factory=list)
    problem: str | None = None
    at: int | None = None          # the log position the problem is at


class TimerStore:
    def __init__(self, root: Path, precision_ms: int | None = None):
        self.root = storage.path(root)
        self.wheel_path = self.root / WHEEL_NAME
        self.log_dir = self.root / LOG_DIR
        self.checkpoint_path = self.root.joinpath(*CHECKPOINT_PATH)
        sizes = sorted({p.stat().st_size for p in self.log_dir.iterdir()}) if self.log_dir.is_dir() else []
        self.log = SegmentQueue.discover([self.log_dir], "timerlog", None,
                                         1) if self.log_dir.is_dir() else None
        self.log_file_size = max(sizes) if sizes else DEFAULT_LOG_FILE_SIZE
        self._precision = precision_ms
        self._log_end: int | None = None

    @classmethod
    def of(cls, store, precision_ms: int | None = None) -> "TimerStore | None":
        root = storage.path(store.root)
        if not ((root / WHEEL_NAME).is_file() or (root / LOG_DIR).is_dir()):
            return None
        return cls(root, precision_ms)

    # --- checkpoint ---------------------------------------------------------------------------
    def checkpoint(self) -> dict | None:
        if not regular_file_present(self.checkpoint_path):
            return None
        with ReadOnlyFile(self.checkpoint_path) as fh:
            raw = fh.read(0, min(fh.size(), tf.CHECKPOINT_STRUCT.size), exact=False)
        raw = raw + bytes(tf.CHECKPOINT_STRUCT.size - len(raw))       # a short file reads as zeros
        return dict(zip(_CHECKPOINT_NAMES, tf.CHECKPOINT_STRUCT.unpack(raw)))

    # --- timer log ----------------------------------------------------------------------------
    def log_files(self):
        return self.log.files if self.log is not None else []

    def walk_log(self) -> Iterator[Unit | LogEnd]:
        """Every unit in log order; after each file, where its units stopped."""
        nominal = self.log.file_size if self.log is not None else 0
        for seg in self.log_files():
            with ReadOnlyFile(seg.path) as fh:
                data, _, end = unit_file_head(fh, tf.UNIT_SIZE, nominal, tf.MAX_TIMER_LOG_FILE_SIZE,
                                              "timer log file")
            yield from _file_units(str(seg.path), seg.start, data, end)

    def unit_at(self, pos: int) -> Unit | None:
        """The unit at timer log position ``pos`` (None: no file holds a whole unit there)."""
        for seg in self.log_files():
            if seg.start <= pos < seg.start + max(seg.size, self.log_file_size):
                at = pos - seg.start
                with ReadOnlyFile(seg.path) as fh:
                    raw = fh.read(at, tf.UNIT_SIZE, exact=False) if at >= 0 else b""
                if len(raw) < tf.UNIT_SIZE:
                    return None
                return Unit(pos, str(seg.path), at, *tf.UNIT_STRUCT.unpack(raw))
        return None

    def log_end(self) -> int:
        """The timer log position after the last unit (the write position)."""
        if self._log_end is None:
            self._log_end = 0
            for item in self.walk_log():
                if isinstance(item, Unit):
                    self._log_end = item.pos + tf.UNIT_SIZE
        return self._log_end

    # --- wheel --------------------------------------------------------------------------------
    def slots(self) -> list[Slot]:
        """Every slot that holds something (a zero slot was never written)."""
        import numpy as np
        if not regular_file_present(self.wheel_path):
            return []
        with ReadOnlyFile(self.wheel_path) as fh:
            size = fh.size()
            out = []
            chunk = tf.SLOT_SIZE * (1 << 16)
            pos = 0
            while pos < size:
                pos = next_data(fh, pos, size) // tf.SLOT_SIZE * tf.SLOT_SIZE    # a hole holds no slot
                if pos >= size:
                    break
                raw = fh.read(pos, min(chunk, size - pos), exact=False)
                raw = raw[:len(raw) // tf.SLOT_SIZE * tf.SLOT_SIZE]
                if not raw:
                    break
                arr = np.frombuffer(raw, tf.SLOT_DTYPE)
                used = np.flatnonzero(arr["time"] | arr["first_pos"] | arr["last_pos"] | arr["num"] | arr["magic"])
                for k in used.tolist():
                    s = arr[k]
                    out.append(Slot(pos // tf.SLOT_SIZE + k, int(s["time"]), int(s["first_pos"]),
                                    int(s["last_pos"]), int(s["num"]), int(s["magic"])))
                pos += len(raw)
        precision = self.precision_ms(out)
        for s in out:
            s.time_ms = s.time_ms * precision
        return out

    def precision_ms(self, raw_slots: list[Slot] | None = None) -> int:
        """``timerPrecisionMs``: given, else found from a slot whose last unit is readable (its
        enqueue time + delay is the slot's time; the slot stores time / precision: ``raw_slots``
        hold that stored value in ``time_ms``), else 1000."""
        if self._precision is not None:
            return self._precision
        if raw_slots is None:
            self.slots()                   # finds it from the wheel (and sets it)
            return self._precision
        for s in raw_slots:
            u = self.unit_at(s.last_pos) if s.time_ms > 0 and s.last_pos >= 0 else None
            if u is not None and u.size == tf.UNIT_SIZE and u.slot_time_ms > 0 and u.slot_time_ms % s.time_ms == 0:
                p = u.slot_time_ms // s.time_ms
                if p > 0 and tf.slot_index(u.slot_time_ms, p) == s.index:
                    self._precision = p
                    return p
        self._precision = DEFAULT_PRECISION_MS
        return self._precision

    def chain(self, slot: Slot) -> Chain:
        """The slot's units from ``last_pos`` back through ``prev_pos`` to ``first_pos``; bounded:
        every unit lies below the log's end on a unit boundary, and each step must go back in the
        log, so a loop ends the walk (``problem``)."""
        out = Chain()
        pos, end = slot.last_pos, self.log_end()
        while pos >= 0:
            u = self.unit_at(pos) if pos < end else None
            if u is None or u.size != tf.UNIT_SIZE or u.position % tf.UNIT_SIZE:
                out.problem, out.at = f"no timer log unit at position {pos} (the log's units end at {end})", pos
                return out
            out.units.append(u)
            if pos == slot.first_pos:
                return out
            if u.prev_pos >= pos:
                out.problem, out.at = (f"unit at {pos} links forward to {u.prev_pos}: the chain would loop", pos)
                return out
            pos = u.prev_pos
        if out.units and out.units[-1].pos != slot.first_pos:
            out.problem, out.at = (f"the chain ends at {out.units[-1].pos}, the slot's first unit is "
                                   f"{slot.first_pos}", out.units[-1].pos)
        return out


def _file_units(path: str, base: int, data: bytes, file_end: int | None = None) -> Iterator[Unit | LogEnd]:
    """The units of a timer log file's ``data`` (its first bytes; ``file_end``: where the file, as
    far as it is read, ends, by default where ``data`` does)."""
    pos = 0
    n = len(data)
    file_end = n if file_end is None else file_end
    while True:
        if pos + 4 > n:
            yield LogEnd(path, pos, "eof")
            return
        size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        if size == 0:
            yield LogEnd(path, pos, "zero")
            return
        if pos + tf.BLANK_SIZE <= n:
            left, _, magic = tf.BLANK_STRUCT.unpack_from(data, pos)
            if magic == tf.BLANK_MAGIC:
                detail = "" if left == file_end - pos else f"the filler says {left} bytes are left, {file_end - pos} are"
                yield LogEnd(path, pos, "blank", detail)
                return
        if size != tf.UNIT_SIZE:
            yield LogEnd(path, pos, "corrupt", f"unit size {size}, a unit is {tf.UNIT_SIZE} bytes")
            return
        if pos + tf.UNIT_SIZE > n:
            yield LogEnd(path, pos, "corrupt", "a unit cut by the end of the file")
            return
        yield Unit(base + pos, path, pos, *tf.UNIT_STRUCT.unpack_from(data, pos))
        pos += tf.UNIT_SIZE


def is_timer_store(root: Path) -> bool:
    root = storage.path(root)
    return (root / WHEEL_NAME).is_file() or (root / LOG_DIR).is_dir()


