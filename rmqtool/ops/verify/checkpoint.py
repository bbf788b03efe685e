"""Checkpoint verification: file shape and its timestamps/offsets against what the data shows."""
from __future__ import annotations

import numpy as np

from formats.checkpoint import CHECKPOINT_FILE_SIZE, CHECKPOINT_OFFSETS
from rmqtool.io.checkpoint import CheckpointValues
from rmqtool.io.fileio import regular_file_present
from rmqtool.errors import RmqError
from rmqtool.ops.verify.findings import FindingSink
from rmqtool.ops.verify.records import RecordTable
from rmqtool.wording import agree, counted


def read_checkpoint_first(store) -> CheckpointValues | RmqError | None:
    """The checkpoint as it is now: read it before the data it describes.

    The broker records a timestamp in the checkpoint only after the data is flushed, and
    the data only grows; so a checkpoint read first can never legitimately claim more than
    the CommitLog, queues and index files read after it. (Read last, a live store's
    checkpoint could be ahead of the CommitLog as it was read earlier.)
    None when there is no checkpoint file; the error when it cannot be read."""
    if not regular_file_present(store.checkpoint_path):     # a FIFO or device: refused (exit 3)
        return None
    try:
        return store.checkpoint()
    except RmqError as exc:
        return exc


class RecordTimes:
    """Store times of the trusted records (walked, not carved, ending before the valid end),
    gathered chunk by chunk: the newest, and how many are newer than ``physic_ts``."""

    def __init__(self, valid_end: int, physic_ts: int | None):
        self.valid_end, self.physic_ts = valid_end, physic_ts
        self.records = 0
        self.trusted = 0
        self.newest = 0
        self.newer = 0

    def add(self, table: RecordTable) -> None:
        c = table.cols
        self.records += len(table)
        if not len(table):
            return
        trusted = ~c["carved"] & (c["phy"] + c["size"] <= self.valid_end)
        ts = c["store_ts"][trusted]
        if len(ts):
            self.trusted += len(ts)
            self.newest = max(self.newest, int(ts.max()))
            if self.physic_ts:
                self.newer += int(np.count_nonzero(ts > self.physic_ts))

    def merge(self, other: "RecordTimes") -> None:
        """Add the times gathered from other records (an engine task's chunk)."""
        self.records += other.records
        self.trusted += other.trusted
        self.newest = max(self.newest, other.newest)
        self.newer += other.newer


def check_checkpoint(store, cp: CheckpointValues | RmqError | None, times: RecordTimes | None, valid_end: int,
                     index_end_ts: int | None, sink: FindingSink) -> dict | None:
    """Findings on ``cp`` (from ``read_checkpoint_first``) against what the data shows."""
    path = store.checkpoint_path
    if cp is None:
        sink.add("checkpoint.missing", path, None, "no checkpoint file", excerpt=False)
        return None
    if isinstance(cp, RmqError):
        sink.add("checkpoint.size", path, cp.offset, cp.message)
        return None
    if cp.file_size != CHECKPOINT_FILE_SIZE:
        sink.add("checkpoint.size", path, min(cp.file_size, CHECKPOINT_FILE_SIZE),
                 f"checkpoint is {cp.file_size} bytes, expected {CHECKPOINT_FILE_SIZE}", excerpt=False)
    if cp.nonzero_bytes_after_fields:
        sink.add("checkpoint.trailing", path, None,
                 f"{counted(cp.nonzero_bytes_after_fields, 'non-zero byte')} after the five checkpoint fields", excerpt=False)
    if times is not None and times.records:
        max_ts = times.newest
        for name, value in (("physic_msg_timestamp", cp.physic_msg_timestamp),
                            ("logics_msg_timestamp", cp.logics_msg_timestamp),
                            ("index_msg_timestamp", cp.index_msg_timestamp)):
            if value > max_ts:
                sink.add("checkpoint.ahead", path, CHECKPOINT_OFFSETS[name],
                         f"{name} {value} is later than the newest record before the valid end "
                         f"({max_ts}): the checkpoint claims data the CommitLog does not hold", excerpt_len=8)
        if cp.physic_msg_timestamp and max_ts > cp.physic_msg_timestamp:
            sink.add("checkpoint.behind", path, CHECKPOINT_OFFSETS["physic_msg_timestamp"],
                     f"{counted(times.newer, 'record')} {agree(times.newer, 'is', 'are')} newer than physicMsgTimestamp {cp.physic_msg_timestamp} "
                     "(flush not yet recorded)", excerpt=False)
    elif times is not None and (cp.physic_msg_timestamp or cp.logics_msg_timestamp):
        sink.add("checkpoint.ahead", path, CHECKPOINT_OFFSETS["physic_msg_timestamp"],
                 "checkpoint has timestamps but the CommitLog holds no record", excerpt_len=8)
    if index_end_ts is not None and cp.index_msg_timestamp > index_end_ts:
        sink.add("checkpoint.ahead", path, CHECKPOINT_OFFSETS["index_msg_timestamp"],
                 f"indexMsgTimestamp {cp.index_msg_timestamp} is later than every index file's endTimestamp "
                 f"({index_end_ts})", excerpt_len=8)
    if cp.confirm_phy_offset > valid_end:
        sink.add("checkpoint.confirm-offset", path, CHECKPOINT_OFFSETS["confirm_phy_offset"],
                 f"confirmPhyOffset {cp.confirm_phy_offset} is past the CommitLog's valid end {valid_end}",
                 excerpt_len=8)
    return cp.as_dict()
