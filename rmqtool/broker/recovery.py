"""Where the broker's recovery would start and end (format.md §3.2, §3.3; a DLedger member's
data files: ``dledger_recovery``).

The rules are upstream 5.3.3's (the reference stores' version); 4.9.7's normal rule
(third-last file) is reported beside it.
"""
from __future__ import annotations

from dataclasses import dataclass

from formats import commitlog as cl
from rmqtool.io.consumequeue import read_units
from rmqtool.broker.dledger_recovery import START_RULE, DLedgerRecovery, dledger_recovery
from rmqtool.broker.dispatch import DISPATCH_STOP_CHECK, END_DISPATCH_STOP, delay_stop_text, schedule_delays
from rmqtool.errors import RmqError
from rmqtool.records.scan import FileEnd, FileScan, RecordBatch, walk_store


@dataclass
class RecoveryStart:
    mode: str              # "normal" (no abort file) or "abnormal"
    file_index: int
    file_name: str | None
    offset: int            # fileFromOffset of that file
    rule: str
    v4_9_normal_file: str | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def cq_totals(store, selected=None) -> tuple[int, int]:
    """(real units, max commitlog offset+size) over the ConsumeQueues' valid units, pre-blank
    fillers excluded; ``selected(topic, queue_id)`` limits it to some queues."""
    count, best = 0, 0
    for ref in store.queues():
        if selected is not None and not selected(ref.topic, ref.queue_id):
            continue
        cq = read_units(ref.topic, ref.queue_id, store.queue(ref.topic, ref.queue_id))
        real = cq.units[~cq.pre_blank]
        count += len(real)
        if len(real):
            best = max(best, int((real["commitlog_offset"] + real["size"]).max()))
    return count, best


def max_cq_phy_offset(store) -> int:
    """Max commitlog offset+size over every ConsumeQueue's valid units (dispatchFromPhyOffset)."""
    return cq_totals(store)[1]


def first_record(seg) -> tuple[RecordBatch | None, FileEnd | None]:
    """Decode the first record of a commitlog file (with CRC, as recovery does)."""
    scan = FileScan(seg.path, seg.start, check_crc=True, chunk_size=1 << 20)
    for batch in scan:
        return batch, None
    return None, scan.end


def recovery_start(store, mode: str | None = None, max_phy: int | None = None) -> RecoveryStart:
    """The file recovery starts from.

    ``mode`` ("normal"/"abnormal") overrides the abort-file test; ``max_phy`` is the
    ConsumeQueues' max offset when the caller already knows it.
    """
    files = store.commitlog.files
    abnormal = store.abort_present() if mode is None else mode == "abnormal"
    v49 = files[max(0, len(files) - 3)].name if files else None
    if not files:
        return RecoveryStart("abnormal" if abnormal else "normal", 0, None, 0, "no commitlog files", v49)
    if store.dledger:         # the member recovers its data files alike in both modes
        return dledger_start(dledger_recovery(store), "abnormal" if abnormal else "normal")
    if not abnormal:
        if max_phy is None:
            max_phy = max_cq_phy_offset(store)
        idx = 0
        for i in range(len(files) - 1, 0, -1):
            if files[i].start <= max_phy:
                idx = i
                break
        return RecoveryStart("normal", idx, files[idx].name, files[idx].start,
                             f"newest file starting at or below the ConsumeQueues' max offset {max_phy}", v49)
    try:
        cp = store.checkpoint()
    except RmqError:          # an unreadable checkpoint reads as zeros, like a fresh one
        cp = None
    min_ts = cp.min_timestamp if cp else 0
    for i in range(len(files) - 1, -1, -1):
        batch, _ = first_record(files[i])
        if batch is None or not len(batch):
            continue
        ts = int(batch.store_timestamp[0])
        if int(batch.magic[0]) in cl.MESSAGE_MAGICS and ts != 0 and ts <= min_ts:
            return RecoveryStart("abnormal", i, files[i].name, files[i].start,
                                 f"newest file whose first record's store time {ts} <= checkpoint "
                                 f"min timestamp {min_ts}", v49)
    return RecoveryStart("abnormal", 0, files[0].name, files[0].start,
                         f"no file's first record is at or before the checkpoint min timestamp {min_ts}; "
                         "recovery starts at the first file", v49)


def dledger_start(rec: DLedgerRecovery, mode: str) -> RecoveryStart:
    """The start a DLedger member's recovery takes (``dledger_recovery``), as a ``RecoveryStart``."""
    return RecoveryStart(mode, rec.start_index, rec.start_file, rec.start_offset, START_RULE, None)


def start_and_end(store, mode: str | None = None, max_phy: int | None = None):
    """``recovery_start`` and its ``valid_end`` at once: (start, (end, stop, messages), the DLedger
    member's recovery or None). A DLedger store's member walk runs once for both."""
    if store.dledger and store.commitlog.files:
        rec = dledger_recovery(store)
        abnormal = store.abort_present() if mode is None else mode == "abnormal"
        return dledger_start(rec, "abnormal" if abnormal else "normal"), (rec.end, rec.stop, rec.entries), rec
    start = recovery_start(store, mode, max_phy)
    return start, valid_end(store, start), None


def delay_stop_end(batch: RecordBatch, row: int, file_size: int) -> FileEnd:
    """The walk's end at a record whose DELAY fails the broker's record check."""
    pos = int(batch.position[row])
    text = schedule_delays(batch).failed_text
    return FileEnd(str(batch.path), batch.file_base, file_size, pos, END_DISPATCH_STOP,
                   detail=delay_stop_text(text, batch.file_base + pos), check=DISPATCH_STOP_CHECK,
                   total_size=int(batch.size[row]), magic=int(batch.magic[row]))


def valid_end(store, start: RecoveryStart) -> tuple[int, FileEnd | None, int]:
    """Walk from the recovery start like the broker: (valid end offset, stopping FileEnd, messages).
    A record whose DELAY fails the record check ends it (``dispatch.schedule_delays``)."""
    files = store.commitlog.files
    if not files:
        return 0, None, 0
    if store.dledger:         # DLedger's entry walk decides; the records inside are dispatch's business
        rec = dledger_recovery(store)
        return rec.end, rec.stop, rec.entries
    count, last_end = 0, None
    for item in walk_store(store, check_crc=True, files=files[start.file_index:], stop_at_break=True):
        if isinstance(item, RecordBatch):
            failed = schedule_delays(item).failed_row
            if failed is not None:          # the broker's record check fails there (DELAY)
                end = delay_stop_end(item, failed, store.commitlog.file_size)
                return end.phy_offset, end, count + failed
            count += len(item)
        else:
            last_end = item
    if last_end is None:
        return start.offset, None, count
    return last_end.log_end, last_end, count
