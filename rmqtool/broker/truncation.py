"""When a rebuild's walk stops before the CommitLog's last data: find it, measure it, skip it.

The broker's recovery walk ends the log at the first record it cannot read (a corrupt or
torn record, zeros where data should go on, a record whose dispatch fails). A rebuild that
follows it would drop every record after that point, and a broker restarted on the
rebuilt queues would then truncate the CommitLog there. ``walk_past_damage`` runs any
rebuild walker, and when it stopped with data after the stop, goes on with the resync
(``scan.next_record_after``, the rule ``verify`` carves with): with ``skip_corrupt`` the
records found are dispatched as usual, otherwise they are only counted (``on_tail``) so
the plan can say what the rebuild would drop. ``restart_forecast`` says what a broker
would do on restart with the rebuilt queues (``recovery``'s start rule and walk).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rmqtool.broker.dispatch import DISPATCH_STOP_CHECK, END_DISPATCH_STOP
from rmqtool.errors import RefusedError
from rmqtool.records.scan import END_CORRUPT, END_EOF, END_TORN, END_ZERO, FileScan, next_record_after
from rmqtool.wording import counted

#: walk ends after which the CommitLog may still hold records (BLANK goes on to the next
#: file; a range or --to-offset end is where the caller asked to stop)
STOP_KINDS = (END_CORRUPT, END_TORN, END_ZERO, END_EOF, END_DISPATCH_STOP)

#: ``walker(start, to_offset, on_dispatch) -> (records, end offset, end kind)``
Walker = Callable[[int, "int | None", Callable], tuple]


@dataclass
class Damage:
    """One place the walk could not go past, and where the resync found the next record."""
    offset: int                    # CommitLog offset where the walk stopped
    file: str
    position: int                  # in-file position of the stop
    kind: str                      # the walk's end kind (corrupt, torn, zero, eof, dispatch-stop)
    check: str                     # verify's check name for it
    detail: str
    resumed_at: int                # CommitLog offset of the next record the resync found

    @property
    def skipped_bytes(self) -> int:
        return self.resumed_at - self.offset

    def where(self) -> str:
        return f"{self.file}@{self.position}"

    def as_dict(self) -> dict:
        return {"offset": self.offset, "file": self.file, "position": self.position, "kind": self.kind,
                "check": self.check, "detail": self.detail, "resumed_at": self.resumed_at,
                "skipped_bytes": self.skipped_bytes}


@dataclass
class WalkOutcome:
    """A rebuild walk's result, with what lies past its first stop."""
    records: int                   # records dispatched
    end: int                       # CommitLog offset where the dispatched records end
    kind: str                      # why the walk ended there
    damage: list[Damage] = field(default_factory=list)
    skipped: bool = False          # the records past each damage were dispatched (--skip-corrupt)
    tail_records: int = 0          # records the resync found past the first damage
    data_end: int = 0              # where the last walk ended: the end of the CommitLog's data
    uncovered: dict | None = None  # data in a segment past data_end that no walk reached (``data_after_walk``)

    @property
    def stopped_early(self) -> bool:
        """The broker's walk ends before the last data (records were found past its stop)."""
        return bool(self.damage)

    def as_tuple(self) -> tuple[int, int, str]:
        return self.records, self.end, self.kind


def walk_past_damage(store, walk: Walker, start: int, to_offset: int | None, on_dispatch: Callable,
                     on_tail: Callable | None = None, skip_corrupt: bool = False,
                     check_crc: bool = True, stops: list[str] | None = None,
                     on_damage: Callable | None = None) -> WalkOutcome:
    """Run ``walk`` from ``start``; while it stops with records after the stop, resync and
    walk again from the next record. Past the first stop the records go to ``on_dispatch``
    with ``skip_corrupt``, else to ``on_tail`` (counted, not built). ``stops`` holds the
    dispatch-stop texts seen so far (the reason of a dispatch-stop end); ``on_damage(Damage)``
    hears of each stop before any record past it is dispatched."""
    records, end, kind = walk(start, to_offset, on_dispatch)
    out = WalkOutcome(records, end, kind, data_end=end)
    sink = on_dispatch
    while kind in STOP_KINDS and (to_offset is None or end < to_offset):
        after = next_record_after(store, end, kind, to_offset)
        if after is None or (kind == END_ZERO and after == end):    # the end, or a live file's growth
            break
        out.damage.append(describe_stop(store, end, kind, after, check_crc, stops))
        if on_damage is not None:
            on_damage(out.damage[-1])
        if not skip_corrupt:
            sink = on_tail or (lambda d: None)
        if after <= end:            # the resync never goes back: no loop on a bad anchor
            break
        stopped_at = end
        n, end, kind = walk(after, to_offset, sink)
        if end <= stopped_at:       # a walker that did not get past the stop: never loop on it
            raise RuntimeError(f"the walk resumed at {after} ended at {end}, not past the stop at {stopped_at}")
        out.tail_records += n
        out.data_end = end
        if skip_corrupt:
            out.records += n
    if skip_corrupt:
        out.end, out.kind, out.skipped = end, kind, bool(out.damage)
    if to_offset is None:
        out.uncovered = data_after_walk(store, out.data_end)
    return out


def data_after_walk(store, end: int) -> dict | None:
    """Where a CommitLog segment that starts after the walk's end ``end`` holds data (its first
    non-zero byte; holes are skipped, not read), as {file, position, walk_end}; None when every
    segment past the one the walk ended in is zeros (the broker's pre-allocated next file). The
    segment the walk ended in may hold bytes past the end (a crash's torn tail): the broker's
    recovery truncates those, and ``walk_past_damage`` has already looked there for records.
    A DLedger member's data files are judged by its own entry walk, not here."""
    from rmqtool.io.fileio import first_nonzero
    if store.dledger:
        return None
    for seg in store.commitlog.files:
        if seg.start <= end:
            continue
        pos = first_nonzero(seg.path, 0)
        if pos is not None:
            return {"file": str(seg.path), "position": pos, "walk_end": end}
    return None


def describe_stop(store, offset: int, kind: str, resumed_at: int, check_crc: bool,
                  stops: list[str] | None = None) -> Damage:
    """The stop at ``offset`` named as verify names it: the record there is read again."""
    loc = store.commitlog.locate(offset)
    seg, pos = loc if loc is not None else (store.commitlog.files[-1], offset - store.commitlog.files[-1].start)
    if kind == END_DISPATCH_STOP:
        detail = next((s for s in reversed(stops or []) if str(offset) in s), (stops or [""])[-1])
        return Damage(offset, str(seg.path), pos, kind, DISPATCH_STOP_CHECK, detail or "dispatch stopped", resumed_at)
    if kind == END_ZERO:
        return Damage(offset, str(seg.path), pos, kind, "commitlog.early-end",
                      "zeros where the data should go on", resumed_at)
    if kind == END_EOF:
        return Damage(offset, str(seg.path), pos, kind, "commitlog.early-end",
                      "file ends right after a record without a BLANK record", resumed_at)
    check, detail = f"commitlog.{kind}", kind
    try:
        scan = FileScan(seg.path, seg.start, lo=pos, check_crc=check_crc, chunk_size=1 << 20)
        for _ in scan:
            break
        if scan.end is not None and scan.end.position == pos:
            check, detail = scan.end.check or check, scan.end.detail or detail
    except Exception:      # noqa: BLE001 - a description only; the stop itself is already known
        pass
    return Damage(offset, str(seg.path), pos, kind, check, detail, resumed_at)


@dataclass
class RestartForecast:
    """What a broker restarted on the rebuilt queues would do (normal start unless ``abort``)."""
    mode: str
    start_file: str | None
    valid_end: int
    data_end: int
    files_deleted: list[str]

    @property
    def truncated_bytes(self) -> int:
        return max(0, self.data_end - self.valid_end)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["truncated_bytes"] = self.truncated_bytes
        return d


def restart_forecast(store, max_cq_phy: int, data_end: int) -> RestartForecast:
    """The broker's recovery with ConsumeQueues whose largest offset+size is ``max_cq_phy``:
    its start file (format.md §3.2), its walk's valid end (§3.3), and what it then truncates
    of the CommitLog data up to ``data_end``."""
    from rmqtool.broker.recovery import start_and_end
    start, (end, _, _), _ = start_and_end(store, None, max_phy=max_cq_phy)
    deleted = [seg.name for seg in store.commitlog.files if seg.start > end and seg.start < data_end]
    return RestartForecast(start.mode, start.file_name, end, data_end, deleted)


class TruncationRefused(RefusedError):
    """The rebuild would drop records past a stop; carries the plan for the caller to show."""

    def __init__(self, message: str, path, offset: int, results: list):
        super().__init__(message, path, offset)
        self.results = results


def refuse_truncation(results: list) -> None:
    """Raise ``TruncationRefused`` for rebuild results whose walk stopped early, or ended before
    a later segment's data (``WalkOutcome.uncovered``)."""
    left = next((r.uncovered for r in results if r.uncovered), None)
    if left is not None:
        raise TruncationRefused(
            f"the CommitLog walk ends at offset {left['walk_end']}, but this later segment holds data "
            "the walk never reached (no record could be found in it); the rebuild would leave it out "
            "and a broker restarted on it would delete it. Pass --allow-truncate to accept the loss",
            left["file"], left["position"], results)
    early = [r for r in results if r.damage and not r.skipped]
    if not early:
        return
    first = early[0].damage[0]
    changes = [f"{r.kind} {r.before} -> {r.after} ({r.after - r.before:+d})" for r in early if r.before is not None]
    dropped = (counted(early[0].tail_records, "record") if early[0].tail_records else "the records after it") + \
        (f" ({', '.join(changes)})" if changes else "")
    raise TruncationRefused(
        f"the CommitLog walk stops here ({first['check']}: {first['detail']}) but records follow "
        f"(the resync finds the next at offset {first['resumed_at']}); the rebuild would drop {dropped}. "
        "Pass --skip-corrupt to rebuild past the damage, or --allow-truncate to accept the loss",
        first["file"], first["position"], results)


def records_past(store, end: int, kind: str) -> int:
    """How many records lie past the valid end ``end`` (where the walk stopped, end ``kind``): the
    records a restart truncates. Found as verify carves past damage: resync, walk, repeat."""
    from rmqtool.records.scan import FileEnd, RecordBatch, next_record_after, walk_store
    count = 0
    at, stop_kind = end, kind
    while True:
        after = next_record_after(store, at, stop_kind)
        if after is None or after <= at or (stop_kind == "zero" and after == at):
            return count
        last = None
        for item in walk_store(store, start_offset=after, stop_at_break=True):
            if isinstance(item, RecordBatch):
                count += len(item)
            elif isinstance(item, FileEnd):
                last = item
        if last is None or last.phy_offset <= after:
            return count
        at, stop_kind = last.log_end, last.kind
