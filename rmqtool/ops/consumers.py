"""The consumers' side of a store: committed offsets, lag, and what a restart does to each group.

``consumer_rows(store)`` gives one row per (group, topic, queue) the broker loads from
``config/consumerOffset.json`` and ``lmqConsumerOffset.json`` (``io.brokerconfig``), with the
queue's min and max offset as the broker serves them **after the restart the recovery forecast
predicts** (``restart_of``: the CommitLog's valid end ``recovery_walk`` finds; ConsumeQueue units at
or past it truncated, ``forecast.truncated_units``), the lag, and upstream
``DefaultMessageStore.getMessage``'s answer at the committed offset (``ServedQueue.get_message``:
status, nextBeginOffset, and the ``PullMessageProcessor`` response each status maps to). See
docs/format-config.md for the upstream lines each rule follows.

Limits: messages the broker would dispatch at restart (past the ConsumeQueues' end, before the
valid end) are not added to the queues' max; getMessage's batch is computed as if the pulled
messages were in memory (within ``accessMessageInMemoryMaxRatio`` of RAM from the CommitLog's end).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from formats.consumequeue import BCQ_UNIT_SIZE, CQ_UNIT_DTYPE, CQ_UNIT_SIZE
from rmqtool.io.brokerconfig import committed_offsets, subscription_groups
from rmqtool.output.system_topics import DLQ_PREFIX, RETRY_PREFIX
from rmqtool.wording import counted

# MessageStoreConfig defaults (5.3.3) that getMessage's batch follows
MAX_FILTER_MESSAGE_SIZE = 16000
MAX_TRANSFER_BYTES_IN_MEMORY = 256 * 1024
MAX_TRANSFER_COUNT_IN_MEMORY = 32
MAX_PULL_MSG_SIZE = 128 * 1024 * 1024        # DefaultMessageStore.MAX_PULL_MSG_SIZE
#: a push consumer's pullBatchSize (DefaultMQPushConsumer), the maxMsgNums of its pull
PULL_BATCH_SIZE = 32
#: CleanCommitLogService defaults: fileReservedTime (hours) and deleteWhen (hours, ';'-separated)
FILE_RESERVED_HOURS = 72
DELETE_WHEN = "04"

#: PullMessageProcessor: GetMessageStatus -> response code (NO_MESSAGE_IN_QUEUE / NO_MATCHED_LOGIC_QUEUE:
#: PULL_OFFSET_MOVED when the request offset is not 0, else PULL_NOT_FOUND)
RESPONSES = {
    "FOUND": "SUCCESS",
    "MESSAGE_WAS_REMOVING": "PULL_RETRY_IMMEDIATELY",
    "NO_MATCHED_MESSAGE": "PULL_RETRY_IMMEDIATELY",
    "OFFSET_FOUND_NULL": "PULL_NOT_FOUND",
    "OFFSET_OVERFLOW_ONE": "PULL_NOT_FOUND",
    "OFFSET_OVERFLOW_BADLY": "PULL_OFFSET_MOVED",
    "OFFSET_TOO_SMALL": "PULL_OFFSET_MOVED",
}

COLUMNS = ["group", "topic", "queue_id", "committed_offset", "min_offset", "max_offset", "lag",
           "next_store_time", "lag_seconds", "restart_status", "restart_next_offset", "restart_response",
           "restart_effect", "max_offset_on_disk", "retention_file", "retention_deleted_at", "retention_loses",
           "source"]


def pull_response(status: str, offset: int) -> str:
    if status in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"):
        return "PULL_OFFSET_MOVED" if offset != 0 else "PULL_NOT_FOUND"
    return RESPONSES.get(status, status)


@dataclass
class Restart:
    """The restart the recovery forecast predicts: the CommitLog's valid end and its min offset."""
    mode: str
    valid_end: int | None          # None: the store is served as it is (no CommitLog files)
    commitlog_min: int
    commitlog_file_size: int


def restart_of(store) -> Restart:
    """The restart of the store (the abort file decides the mode) as a ``Restart``: the broker's
    recovery start and valid end (``broker.recovery.start_and_end``, the walk ``recovery_walk`` and
    ``info`` run), without the other mode's start ``recovery_walk`` also finds."""
    from rmqtool.broker.recovery import start_and_end
    cl = store.commitlog
    if not cl.files:
        return Restart("normal", None, 0, 0)
    start, (end, _, _), _ = start_and_end(store)
    return restart_at(store, start.mode, end)


def restart_at(store, mode: str, valid_end: int | None) -> Restart | None:
    """The ``Restart`` a recovery that ends at ``valid_end`` makes (a caller that walked already:
    info, verify, report); None without CommitLog files or a valid end (``restart_of`` then decides)."""
    cl = store.commitlog
    if not cl.files or valid_end is None:
        return None
    return Restart(mode, int(valid_end), cl.min_offset, cl.file_size)


def forecast_restart(store, fc: dict) -> Restart | None:
    """The restart a recovery forecast (``verify``'s ``forecast``) predicts, as a ``Restart``, without
    walking the CommitLog again; None when it has no valid end (no CommitLog files: ``restart_of``)."""
    return restart_at(store, fc["mode"], fc.get("valid_end"))


def bounds_answer(offset: int, lo: int, hi: int) -> dict:
    """getMessage's answer decided by the queue's min ``lo`` and max ``hi`` alone (status None: the
    offset is inside, and the pull reads the units: ``ServedQueue._found``)."""
    out = {"status": None, "next_begin_offset": offset, "min_offset": lo, "max_offset": hi, "message_count": 0}
    if hi == 0:
        out.update(status="NO_MESSAGE_IN_QUEUE", next_begin_offset=0)
    elif offset < lo:
        out.update(status="OFFSET_TOO_SMALL", next_begin_offset=lo)
    elif offset == hi:
        out.update(status="OFFSET_OVERFLOW_ONE", next_begin_offset=offset)
    elif offset > hi:
        out.update(status="OFFSET_OVERFLOW_BADLY", next_begin_offset=hi)
    return out


class ServedQueue:
    """One consume queue as the broker serves it after ``restart``: units up to the logical end,
    less those recovery truncates; min/max as ``getMinOffsetInQueue``/``getMaxOffsetInQueue``. A
    queue with no directory is the empty one ``findOrCreateConsumeQueue`` makes (min = max = 0).
    ``batch``: a BatchConsumeQueue (``BatchQueueView``: offsets are message offsets, a unit covers
    batch-size messages)."""

    def __init__(self, store, topic: str, queue_id: int, restart: Restart | None, present: bool = True,
                 batch: bool = False):
        from rmqtool.ops.query.byqueue import BatchQueueView, QueueView
        self.topic, self.queue_id, self.batch = topic, queue_id, batch and present
        self._units: tuple[np.ndarray, np.ndarray] | None = None
        self.view = (BatchQueueView if self.batch else QueueView)(store, topic, queue_id) if present else None
        self.unit_size = BCQ_UNIT_SIZE if self.batch else CQ_UNIT_SIZE
        self.per_file = (self.view.queue.file_size // self.unit_size) if present and self.view.queue.file_size else 0
        if self.view is None:
            self.max_on_disk = self.max_offset = self.min_offset = 0
            self.cl_min, self.cl_end = 0, 0
            return
        self.max_on_disk = self.view.max_offset
        self.max_offset = self.max_on_disk
        self.cl_min = self.view.cl_min
        self.cl_end = self.view.cl_max
        if restart is not None and restart.valid_end is not None:
            self.cl_end = restart.valid_end
            cut = self._truncated(restart.valid_end)
            if cut is not None:
                self.max_offset = cut
        self.min_offset = min(self.view.min_offset, self.max_offset)

    def units_array(self) -> tuple[np.ndarray, np.ndarray]:
        """(queue offsets, units) of every unit before the logical end, built once from the
        ``QueueView``'s files; those at or past ``max_offset`` are the ones the restart truncates."""
        if self._units is None and self.batch:
            u = self.view.batch_units
            self._units = (u["msg_base_offset"].astype(np.int64), u)
        if self._units is None:
            qoffs, parts = [], []
            for f in self.view.files if self.view is not None else ():
                u = np.frombuffer(f.data, CQ_UNIT_DTYPE)
                parts.append(u)
                qoffs.append(f.start // CQ_UNIT_SIZE + np.arange(len(u), dtype=np.int64))
            self._units = ((np.concatenate(qoffs), np.concatenate(parts)) if parts
                           else (np.zeros(0, np.int64), np.zeros(0, CQ_UNIT_DTYPE)))
        return self._units

    def _truncated(self, end: int) -> int | None:
        """The queue's max after recovery truncates its units at or past ``end``
        (``forecast.truncated_units``, the one rule), None when nothing is truncated."""
        from rmqtool.ops.verify.forecast import truncated_units
        qoff, units = self.units_array()
        cut = truncated_units(SimpleNamespace(topic=self.topic, queue_id=self.queue_id,
                                              offset=units["commitlog_offset"], qoff=qoff,
                                              end_qoff=self.max_on_disk), end)
        return None if cut is None else cut["from_queue_offset"]

    def unit(self, q: int) -> tuple[int, int, int] | None:
        if self.view is None or not (0 <= q < self.max_offset):
            return None
        got = self.view.units(q, 1)
        return tuple(got[0][1:]) if got else None

    def store_time(self, q: int) -> int | None:
        u = self.unit(q)
        if u is None:
            return None
        t = self.view.store_time(u[0], u[1])
        return t if t >= 0 else None

    def close(self):
        if self.view is not None:
            self.view.close()

    # --- DefaultMessageStore.getMessage ----------------------------------------------------------
    def get_message(self, offset: int, max_msg_nums: int = PULL_BATCH_SIZE) -> dict:
        """Status, nextBeginOffset and message count of getMessage(group, topic, queue, offset,
        max_msg_nums, no filter) on a master."""
        out = bounds_answer(offset, self.min_offset, self.max_offset)
        if out["status"] is None:
            out.update(self._found(offset, max_msg_nums))
        return out

    def _found(self, offset: int, max_msg_nums: int) -> dict:
        """The pull loop over the units one iterateFrom gives (``_pull_units``)."""
        status, nxt = "NO_MATCHED_MESSAGE", offset
        max_filter = max(MAX_FILTER_MESSAGE_SIZE, max_msg_nums * self.unit_size)
        pulled = self._pull_units(offset, max_msg_nums, reach=-(-max_filter // self.unit_size))
        if isinstance(pulled, int):                                     # iterateFrom: null
            return {"status": "OFFSET_FOUND_NULL", "next_begin_offset": pulled}
        total = count = 0
        next_file_start = None
        for q, phy, size, batch in pulled:
            if nxt >= self.max_offset:
                break
            if (q - offset) * self.unit_size >= max_filter:
                break
            if total and count and (count + batch > max_msg_nums or total + size > MAX_PULL_MSG_SIZE
                                    or total + size > MAX_TRANSFER_BYTES_IN_MEMORY
                                    or count > MAX_TRANSFER_COUNT_IN_MEMORY - 1):
                break                                                   # isTheBatchFull (in memory)
            if total >= MAX_PULL_MSG_SIZE:
                break
            nxt = q + batch
            if next_file_start is not None and phy < next_file_start:
                continue
            if phy < self.cl_min or phy + size > self.cl_end:            # CommitLog.getMessage: null
                if total == 0:
                    status = "MESSAGE_WAS_REMOVING"
                fs = self.view.store.commitlog.file_size
                next_file_start = phy + fs - phy % fs
                continue
            total += size
            count += batch
            status = "FOUND"
            next_file_start = None
        return {"status": status, "next_begin_offset": nxt, "message_count": count}

    def _pull_units(self, offset: int, max_msg_nums: int, reach: int) -> list[tuple[int, int, int, int]] | int:
        """``iterateFrom(offset, maxMsgNums)`` of the queue's kind: (queue offset, commitlog offset, size,
        batch num) of each unit one pull may walk, or, when there is none, the offset OFFSET_FOUND_NULL
        moves to. A ConsumeQueue: the rest of the one file holding ``offset``
        (travelCqFileNumWhenGetMessage = 1), read no further than the ``reach`` units the pull's filter
        budget lets it look at (``_found`` stops there); a BatchConsumeQueue: the unit holding message
        ``offset`` and the rest of its file; a RocksDB ConsumeQueue (no files): min(max - offset,
        maxMsgNums) units."""
        if self.batch:
            got = self.view.pull_units(offset)
            return offset if got is None else got
        if self.view.store.rocksdb_cq:
            got = self.view.units(offset, min(self.max_offset - offset, max_msg_nums))
            return [(q, phy, size, 1) for q, phy, size, _ in got] if got else offset
        per = self.per_file or max(self.max_offset, 1)
        file_start = offset // per * per
        if not any(f.start == file_start * CQ_UNIT_SIZE for f in self.view.files):
            return offset + per - offset % per                                # rollNextFile
        stop = min(file_start + per, self.max_offset, offset + reach)
        return [(q, phy, size, 1) for q, phy, size, _ in self.view.units(offset, stop - offset)]


def restart_effect(committed: int, answer: dict) -> str:
    """What the pull at ``committed`` does to the group, in messages."""
    status, nxt = answer["status"], answer["next_begin_offset"]
    if status == "FOUND":
        return "consumes"
    if status in ("OFFSET_OVERFLOW_ONE", "OFFSET_FOUND_NULL") or nxt == committed:
        return "waits"
    if nxt > committed:
        return f"moved forward to {nxt}: skips {counted(nxt - committed, 'deleted message')}"
    return f"moved back to {nxt} ({counted(committed - nxt, 'offset')} back): consumes what is stored from there"


# --- retention -------------------------------------------------------------------------------------

def deletion_time(due_ms: int, delete_when: str = DELETE_WHEN) -> int:
    """The first moment at or after ``due_ms`` inside an hour of ``delete_when``: when
    CleanCommitLogService's isTimeToDelete lets a file expired at ``due_ms`` go. The hours are the
    broker JVM's local time (``UtilAll.isItTimeToDo``: ``Calendar.getInstance()``), taken here as this
    machine's local time zone (``TZ``), daylight saving included."""
    hours = sorted({int(h) for h in delete_when.split(";") if h.strip().isdigit() and 0 <= int(h) < 24})
    if not hours:
        return due_ms
    tm = time.localtime(due_ms // 1000)
    for d in range(-1, 3):
        for h in hours:
            # mktime normalises the day past the month's end; -1: the zone says whether DST applies
            start = int(time.mktime((tm.tm_year, tm.tm_mon, tm.tm_mday + d, h, 0, 0, 0, 0, -1))) * 1000
            if start + 3_600_000 > due_ms:
                return max(start, due_ms)
    return due_ms


def file_mtimes(store) -> list[int | None]:
    """Last-modified time (ms) of each CommitLog file: what the broker's expiry counts from."""
    out = []
    for seg in store.commitlog.files:
        try:
            out.append(int(os.stat(seg.path).st_mtime * 1000))
        except (OSError, TypeError, ValueError):
            out.append(None)
    return out


# --- the rows --------------------------------------------------------------------------------------

def _retention(sq: ServedQueue, nxt: int, store, mtimes, reserved_hours: int, delete_when: str) -> dict:
    """The CommitLog file holding the group's next unconsumed message, when cleanup deletes it
    (never the newest file; files go oldest first) and the group's messages it takes with it."""
    none = {"retention_file": None, "retention_deleted_at": None, "retention_loses": 0}
    u = sq.unit(nxt)
    files = store.commitlog.files
    if u is None or not files:
        return none
    hit = store.locate(u[0])
    if hit is None:
        return none
    idx = next(i for i, f in enumerate(files) if f.start == hit[0].start)
    out = dict(none, retention_file=hit[0].name)
    if idx >= len(files) - 1 or any(m is None for m in mtimes[:idx + 1]):
        return out
    due = max(mtimes[:idx + 1]) + reserved_hours * 3_600_000
    end = files[idx].start + store.commitlog.file_size
    qoff, units = sq.units_array()
    live = (qoff >= nxt) & (qoff < sq.max_offset)
    if sq.batch:                # messages, not units: a unit holds batch_size messages from its base
        stop = np.minimum(qoff + units["batch_size"], sq.max_offset)
        live = (stop > nxt) & (units["commitlog_offset"] < end)
        loses = int((stop - np.maximum(qoff, nxt))[live].sum())
    else:
        loses = int(np.count_nonzero(live & (units["commitlog_offset"] < end)))
    out.update(retention_deleted_at=deletion_time(due, delete_when), retention_loses=loses)
    return out


def consumer_rows(store, group: str | None = None, topic: str | None = None, restart: Restart | None = None,
                  reserved_hours: int = FILE_RESERVED_HOURS, delete_when: str = DELETE_WHEN,
                  committed=None) -> tuple[list[dict], dict]:
    """(one row per committed (group, topic, queue) after the forecast restart, {"loads": how each
    config file was loaded, "groups": per-group summary rows, "restart": the restart}).
    ``restart`` defaults to ``restart_of(store)``; ``committed``: ``committed_offsets`` of the store
    when the caller has read them already."""
    offsets, loads = committed if committed is not None else committed_offsets(store.config_dir)
    if restart is None:
        restart = restart_of(store)
    present = {(r.topic, r.queue_id) for r in store.queues()}
    batch = {(r.topic, r.queue_id) for r in store.queues(batch=True)}
    served: dict[tuple[str, int], ServedQueue] = {}

    def serve(t: str, q: int) -> ServedQueue:
        if (t, q) not in served:
            served[t, q] = ServedQueue(store, t, q, restart, (t, q) in present or (t, q) in batch,
                                       batch=(t, q) in batch and (t, q) not in present)
        return served[t, q]

    mtimes = file_mtimes(store)
    rows = []
    try:
        for c in offsets:
            if (group is not None and c.group != group) or (topic is not None and c.topic != topic):
                continue
            sq = serve(c.topic, c.queue_id)
            answer = sq.get_message(c.offset)
            nxt = max(c.offset, sq.min_offset)
            lag = max(sq.max_offset - nxt, 0)
            next_time = sq.store_time(nxt) if lag else None
            last_time = sq.store_time(sq.max_offset - 1) if lag else None
            row = {"group": c.group, "topic": c.topic, "queue_id": c.queue_id, "committed_offset": c.offset,
                   "min_offset": sq.min_offset, "max_offset": sq.max_offset, "lag": lag,
                   "next_store_time": next_time,
                   "lag_seconds": (last_time - next_time) / 1000 if next_time is not None and last_time is not None
                   else None,
                   "restart_status": answer["status"], "restart_next_offset": answer["next_begin_offset"],
                   "restart_response": pull_response(answer["status"], c.offset),
                   "restart_effect": restart_effect(c.offset, answer),
                   "max_offset_on_disk": sq.max_on_disk,
                   **_retention(sq, nxt, store, mtimes, reserved_hours, delete_when),
                   "source": c.source}
            rows.append(row)
        groups = group_summary(store, rows, present, serve)
    finally:
        for sq in served.values():
            sq.close()
    return rows, {"loads": loads, "groups": groups, "restart": restart}


def group_summary(store, rows: list[dict], present, serve) -> list[dict]:
    """Per group: queues, total lag, how many queues the restart moves, and the sizes (max - min
    over their queues) of its retry and dead-letter topics."""
    subs, _ = subscription_groups(store.config_dir)
    out: dict[str, dict] = {}
    for r in rows:
        g = out.setdefault(r["group"], {"group": r["group"], "topics": [], "queues": 0, "lag": 0,
                                        "moved_at_restart": 0, "subscribed": r["group"] in subs})
        if r["topic"] not in g["topics"]:
            g["topics"].append(r["topic"])
        g["queues"] += 1
        g["lag"] += r["lag"]
        g["moved_at_restart"] += int(moves(r))
    for name, g in out.items():
        for prefix, key in ((RETRY_PREFIX, "retry_size"), (DLQ_PREFIX, "dlq_size")):
            t = prefix + name
            qs = [q for (tt, q) in present if tt == t]
            g[key] = sum(serve(t, q).max_offset - serve(t, q).min_offset for q in qs) if qs else None
    return list(out.values())


def moves(row: dict) -> bool:
    """The restart moves this consumer: its pull at the committed offset is not FOUND and the broker
    answers with another offset (PULL_OFFSET_MOVED: re-consumes or skips). A caught-up group
    (OFFSET_OVERFLOW_ONE: it waits where it is) is not moved."""
    return row["restart_status"] != "FOUND" and row["restart_next_offset"] != row["committed_offset"]


def moved_by_restart(rows: list[dict]) -> list[dict]:
    """The rows of ``consumer_rows`` the restart moves (``moves``): the ones an operator has to look at."""
    return [r for r in rows if moves(r)]


def restart_forecast(store, restart: Restart | None = None) -> list[dict]:
    """``moved_by_restart`` of the store's rows."""
    rows, _ = consumer_rows(store, restart=restart)
    return moved_by_restart(rows)


#: the fields of a ``restart_moves`` row (``info``'s short section)
MOVE_FIELDS = ["group", "topic", "queue_id", "committed_offset", "restart_status", "restart_next_offset",
               "restart_effect"]


def restart_moves(store, restart: Restart | None = None) -> list[dict] | None:
    """The queues whose committed offset the restart moves (``moved_by_restart``), in ``MOVE_FIELDS``;
    None when the broker loads no committed offsets file (then ``info`` has no such section). The
    offsets files are read once."""
    committed = committed_offsets(store.config_dir)
    if all(x.source is None for x in committed[1]):
        return None
    rows, _ = consumer_rows(store, restart=restart, committed=committed)
    return [{k: r[k] for k in MOVE_FIELDS} for r in moved_by_restart(rows)]


# --- what a rebuild does to each group ---------------------------------------------------------------


def _answer_key(answer: dict) -> tuple:
    """What a consumer meets: the status, and the offset it is moved to unless it reads (FOUND)."""
    return answer["status"], None if answer["status"] == "FOUND" else answer["next_begin_offset"]


def rebuild_moves(store, rebuilt: dict[tuple[str, int], tuple[int, int]], selected) -> list[dict] | None:
    """The committed offsets whose getMessage answer a ConsumeQueue rebuild changes: the queue as it
    is served now (on disk, no restart) against the rebuilt one (``rebuilt``: (min, max) per queue
    built, ``CqBuilder.bounds``). ``selected(topic, queue_id)``: the queues the rebuild replaces; one
    of them with no units rebuilt is removed, and the broker then serves the empty queue
    ``findOrCreateConsumeQueue`` makes (max 0). Offsets inside the rebuilt bounds read the rebuilt
    units (FOUND: every rebuilt unit points into the CommitLog). None when the broker loads no
    committed offsets file."""
    offsets, loads = committed_offsets(store.config_dir)
    if all(x.source is None for x in loads):
        return None
    present = {(r.topic, r.queue_id) for r in store.queues()}
    batch = {(r.topic, r.queue_id) for r in store.queues(batch=True)} - present
    served: dict[tuple[str, int], ServedQueue] = {}
    out = []
    try:
        for c in offsets:
            if not selected(c.topic, c.queue_id) or (c.topic, c.queue_id) in batch:
                continue            # a BatchConsumeQueue: not rebuilt into consumequeue/
            key = (c.topic, c.queue_id)
            if key not in served:
                served[key] = ServedQueue(store, c.topic, c.queue_id, None, key in present)
            now = served[key].get_message(c.offset)
            lo, hi = rebuilt.get(key, (0, 0))
            after = bounds_answer(c.offset, lo, hi)
            if after["status"] is None:
                after.update(status="FOUND", next_begin_offset=None)
            if _answer_key(now) == _answer_key(after):
                continue
            out.append({"group": c.group, "topic": c.topic, "queue_id": c.queue_id, "committed_offset": c.offset,
                        "min_offset": now["min_offset"], "max_offset": now["max_offset"], "status": now["status"],
                        "rebuilt_min_offset": lo, "rebuilt_max_offset": hi, "rebuilt_status": after["status"],
                        "rebuilt_next_offset": after["next_begin_offset"],
                        "effect": restart_effect(c.offset, after)})
    finally:
        for sq in served.values():
            sq.close()
    return out
