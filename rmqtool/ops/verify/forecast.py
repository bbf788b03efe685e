"""Recovery forecast: what the broker would do with this store at its next start (format.md §3).

The valid end comes from the broker's own walk (``recovery.valid_end``: from the start
file, CRC on, BLANK moves to the next file, first failure stops). From it follow the
CommitLog files deleted (wholly past the end), the ConsumeQueue tails truncated (units
at or past the end), and on an abnormal start the index files deleted (endTimestamp >
checkpoint indexMsgTimestamp). Records past the dispatch and index frontiers are the
ones the broker has not dispatched / indexed yet.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqtool.broker.dledger_recovery import dledger_recovery
from rmqtool.output.schema import record_to_dict
from rmqtool.broker.recovery import RecoveryStart, dledger_start, recovery_start, valid_end
from rmqtool.ops.verify.records import RecordTable, per_queue

LIST_LIMIT = 10_000


@dataclass
class Pending:
    """Records past a frontier (or past the valid end: lost at restart), gathered chunk by chunk: all
    counted, the first ``LIST_LIMIT`` listed (``identify`` adds what names each message)."""
    count: int = 0
    listing: list = field(default_factory=list)
    first: tuple | None = None            # (file, position, commitlog offset) of the first one
    #: (topic, queue id) -> [records, oldest store time, newest store time]: every one counted, listed or not
    by_queue: dict = field(default_factory=dict)

    def add(self, table: RecordTable, rows: list[int]) -> None:
        if rows and self.first is None:
            path, pos = table.where(rows[0])
            self.first = (path, pos, int(table.cols["phy"][rows[0]]))
        self.count += len(rows)
        room = LIST_LIMIT - len(self.listing)
        self.listing.extend(table.describe(i) for i in rows[:max(room, 0)])
        if rows:
            c, at = table.cols, np.asarray(rows, np.int64)
            for tid, qid, n, _, oldest, newest in per_queue(c["topic_id"][at], c["queue_id"][at], c["store_ts"][at]):
                self._count((table.topics.names[tid], qid), n, oldest, newest)

    def _count(self, queue: tuple, n: int, oldest: int, newest: int) -> None:
        acc = self.by_queue.get(queue)
        if acc is None:
            self.by_queue[queue] = [n, oldest, newest]
        else:
            acc[0] += n
            acc[1] = min(acc[1], oldest)
            acc[2] = max(acc[2], newest)

    def merge(self, later: "Pending") -> None:
        """Append what ``later`` gathered over the records after these (an engine task's chunk)."""
        if self.first is None:
            self.first = later.first
        self.count += later.count
        self.listing.extend(later.listing[:max(LIST_LIMIT - len(self.listing), 0)])
        for queue, (n, oldest, newest) in later.by_queue.items():
            self._count(queue, n, oldest, newest)


def recovery_walk(store, dispatch_from: int, replay=None) -> dict:
    """Start files for both modes and the valid end of the mode the abort file selects.

    ``replay(start)`` may give the walk's result from data already read (deep verify);
    otherwise the broker's walk runs again from the start file.
    """
    mode = "abnormal" if store.abort_present() else "normal"
    if store.dledger and store.commitlog.files:     # the member's own walk decides (docs/format-dledger.md)
        rec = dledger_recovery(store)
        start = dledger_start(rec, mode)
        return {"mode": mode, "starts": {"normal": start, "abnormal": start}, "start": start,
                "valid_end": rec.end, "stop": rec.stop, "messages_walked": rec.entries, "dledger": rec}
    starts: dict[str, RecoveryStart] = {
        "normal": recovery_start(store, "normal", max_phy=dispatch_from),
        "abnormal": recovery_start(store, "abnormal"),
    }
    start = starts[mode]
    end, stop, messages = replay(start) if replay is not None else valid_end(store, start)
    return {"mode": mode, "starts": starts, "start": start, "valid_end": end, "stop": stop,
            "messages_walked": messages}


def truncated_units(qu, end: int) -> dict | None:
    """What recovery truncates of one queue (``QueueUnits``): its units at or past ``end``."""
    past = qu.offset >= end
    if not past.any():
        return None
    return {"topic": qu.topic, "queue_id": qu.queue_id, "from_queue_offset": int(qu.qoff[past][0]),
            "units": int(past.sum()), "to_queue_offset": int(qu.end_qoff)}


def forecast(store, walk: dict, truncated: list[dict], index_states: list, checkpoint: dict | None,
             dispatch_from: int, index_frontier: int | None, not_dispatched: Pending, not_indexed: Pending,
             lost: Pending | None = None) -> dict:
    """``truncated``: ``truncated_units`` of every queue, sorted by topic and queue."""
    end = walk["valid_end"]
    stop = walk["stop"]
    files = store.commitlog.files
    rec = walk.get("dledger")
    exits = rec is not None and rec.exits
    deleted_cl = [] if exits else [seg.name for seg in files if seg.start > end]
    if exits:               # the member refuses to start: nothing is truncated
        truncated = []
    index_deleted = []
    if checkpoint is not None:
        limit = checkpoint["index_msg_timestamp"]
        index_deleted = [s.path.rsplit("/", 1)[-1] for s in index_states
                         if s.header is not None and s.header.end_timestamp > limit]

    return {
        "mode": walk["mode"],
        "abort_present": store.abort_present(),
        "start_file": walk["start"].file_name,
        "start_rule": walk["start"].rule,
        "normal_start_file": walk["starts"]["normal"].file_name,
        "abnormal_start_file": walk["starts"]["abnormal"].file_name,
        "v4_9_normal_start_file": walk["start"].v4_9_normal_file,
        "valid_end": end,
        "end_kind": stop.kind if stop else None,
        "end_file": stop.path if stop else None,
        "end_position": stop.position if stop else None,
        "end_detail": (stop.detail or None) if stop else None,
        "messages_walked_from_start": walk["messages_walked"],
        "commitlog_files_deleted": deleted_cl,
        "consume_queues_truncated": truncated,
        "index_files_deleted": index_deleted if walk["mode"] == "abnormal" else [],
        "index_files_deleted_on_abnormal_start": index_deleted,
        "dispatch_from": dispatch_from,
        "not_dispatched_count": not_dispatched.count,
        "not_dispatched": not_dispatched.listing,
        "index_frontier": index_frontier,
        "not_indexed_count": not_indexed.count,
        "not_indexed": not_indexed.listing,
        "lost_count": lost.count if lost is not None else 0,
        "lost": lost.listing if lost is not None else [],
        **({"dledger_recovery": rec.as_dict()} if rec is not None else {}),
    }


def identify(store, listing: list[dict]) -> None:
    """Add to each listed record what names the message (keys, UNIQ_KEY, offsetMsgId, tags), read
    from the CommitLog record itself; the lists are capped, so this reads at most ``LIST_LIMIT`` each."""
    from rmqtool.records.single import RecordReader
    reader = RecordReader(store)
    try:
        for row in listing:
            rec = reader.read(row["phy_offset"])
            if rec is None:
                row.update(keys=None, uniq_key=None, offset_msg_id=None, tags=None)
                continue
            d = record_to_dict(rec, 0)
            row.update(keys=d["keys"], uniq_key=d["uniq_key"], offset_msg_id=d["offset_msg_id"], tags=d["tags"])
    finally:
        reader.close()
