"""dump, locate and query-by-msgId over a simplified store (rows for ``common.emit``)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from formats import simplified as fmt
from rmqtool.errors import CorruptDataError, UsageError
from rmqtool.kernels.javahash import java_string_hash
from rmqtool.simplified import SimplifiedStore, target_file
from rmqtool.simplified.reader import (CommitLog, RecordBatch, read_commitlog, read_consumer_queue,
                                       read_index, walk_commitlog)

COMMITLOG_COLUMNS = ["file", "position", "kind", "size", "msg_id", "topic", "queue_offset", "body_size",
                     "transaction_id", "stored_commit_log_offset", "gap", "body"]
CQ_COLUMNS = ["file", "position", "kind", "queue_offset", "commit_log_offset", "msg_length", "tag_code"]
INDEX_COLUMNS = ["file", "position", "kind", "entry", "key_hash", "slot", "slot_holds", "phy_offset",
                 "time_diff", "time", "prev_index", "begin_timestamp", "end_timestamp", "begin_phy_offset",
                 "end_phy_offset", "hash_slot_count", "index_count"]
QUERY_COLUMNS = ["msg_id", "file", "position", "size", "topic", "queue_offset", "body_size", "via",
                 "entry", "index_points_at", "body"]


def _end_row(end) -> dict | None:
    if end is None or end.kind == "eof":
        return None
    return {"file": end.path, "position": end.position, "phy_offset": end.position, "kind": "END",
            "end": end.kind, "size": end.file_size - end.position, "detail": end.detail or None}


def commitlog_rows(path, body: str = "none", from_offset: int | None = None,
                   to_offset: int | None = None, topic: str | None = None) -> Iterator[dict]:
    """Every record of commitLog.txt with file and position, then where the data ends."""
    for item in walk_commitlog(target_file(path, fmt.COMMITLOG_NAME)):
        if isinstance(item, RecordBatch):
            keep = np.ones(len(item), bool)
            if from_offset is not None:
                keep &= item.position >= from_offset
            if to_offset is not None:
                keep &= item.position < to_offset
            for i in np.flatnonzero(keep):
                row = item.row(int(i), body)
                if topic is None or row["topic"] == topic:
                    yield row
        else:
            row = _end_row(item)
            if row and topic is None and (from_offset is None or row["position"] >= from_offset) \
                    and (to_offset is None or row["position"] < to_offset):
                yield row


def consumer_queue_rows(path) -> Iterator[dict]:
    """Every unit up to the first all-zero unit, then an END row (with stale units counted)."""
    cq = read_consumer_queue(target_file(path, fmt.CONSUMER_QUEUE_NAME))
    for i, u in enumerate(cq.units):
        yield {"file": cq.path, "position": i * fmt.CQ_UNIT_SIZE, "kind": "UNIT", "queue_offset": i,
               "commit_log_offset": int(u["commit_log_offset"]), "msg_length": int(u["msg_length"]),
               "tag_code": int(u["tag_code"])}
    yield {"file": cq.path, "position": len(cq) * fmt.CQ_UNIT_SIZE, "kind": "END", "queue_offset": len(cq),
           "stale_units_after_end": len(cq.stale_after_end)}


def index_rows(path, header_only: bool = False, from_offset: int | None = None,
               to_offset: int | None = None) -> Iterator[dict]:
    """The header, then entries 0 .. indexCount-1 with their slot and whether the slot still holds them."""
    ix = read_index(target_file(path, fmt.INDEX_NAME))
    yield {"file": ix.path, "position": 0, "kind": "HEADER", **ix.header, "hash_slots": ix.hash_slots,
           "capacity": ix.capacity}
    if header_only:
        return
    holds = ix.slot_holds()
    slots = ix.slot_of(ix.entries["key_hash"])
    for n, e in enumerate(ix.entries):
        phy = int(e["phy_offset"])
        if (from_offset is not None and phy < from_offset) or (to_offset is not None and phy >= to_offset):
            continue
        yield {"file": ix.path, "position": ix.entry_position(n), "kind": "ENTRY", "entry": n,
               "key_hash": int(e["key_hash"]), "slot": int(slots[n]), "slot_holds": bool(holds[n]),
               "phy_offset": phy, "time_diff": int(e["time_diff"]), "prev_index": int(e["prev_index"]),
               "time": ix.header["begin_timestamp"] + int(e["time_diff"])}


# --- locate ----------------------------------------------------------------------------------------
def _record_summary(cl: CommitLog, i: int, pos: int) -> dict:
    row = cl.row(i)
    fields_end = row["position"] + fmt.RECORD_FIELDS_SIZE + row["body_size"]
    return {"start": row["position"], "position": row["position"], "size": row["size"],
            "offset_in_record": pos - row["position"], "in_gap": pos >= fields_end,
            "msg_id": row["msg_id"], "topic": row["topic"], "queue_offset": row["queue_offset"]}


def locate_offset(path, offset: int) -> dict:
    """The record of commitLog.txt holding ``offset`` (the file is one segment: position = offset)."""
    if offset < 0:
        raise UsageError(f"offset {offset} is negative")
    store = SimplifiedStore.open(path)
    cl = read_commitlog(store.require(fmt.COMMITLOG_NAME))
    result = {"offset": offset, "file": cl.path, "file_start": 0, "position": offset, "found": False,
              "record": None}
    if offset >= cl.end.file_size:
        result.update(file=None, position=None, reason=f"outside commitLog.txt [0, {cl.end.file_size})")
        return result
    i = cl.containing(offset)
    if i is not None:
        result.update(found=True, kind="MESSAGE", record=_record_summary(cl, i, offset))
    else:
        result.update(kind="PAST_END", reason=f"past the end of the data ({cl.end.kind} at position "
                                              f"{cl.end.position}" + (f": {cl.end.detail})" if cl.end.detail else ")"))
    return result


def locate_queue_offset(path, queue_offset: int) -> dict:
    """Unit ``queue_offset`` of consumerQueue.txt and the record it points at."""
    if queue_offset < 0:
        raise UsageError(f"queue offset {queue_offset} is negative")
    store = SimplifiedStore.open(path)
    cq = read_consumer_queue(store.require(fmt.CONSUMER_QUEUE_NAME))
    result = {"queue_offset": queue_offset, "file": cq.path, "position": queue_offset * fmt.CQ_UNIT_SIZE,
              "found": False}
    if queue_offset >= len(cq):
        result["reason"] = f"past the queue's end (units 0 to {len(cq) - 1})" if len(cq) else "the queue is empty"
        return result
    u = cq.units[queue_offset]
    result["unit"] = {"commit_log_offset": int(u["commit_log_offset"]), "msg_length": int(u["msg_length"]),
                      "tag_code": int(u["tag_code"])}
    result["found"] = True
    if store.commitlog_path.is_file() and int(u["commit_log_offset"]) < 0:     # damaged unit: say so, no error
        result["commitlog"] = {"offset": int(u["commit_log_offset"]), "found": False,
                               "reason": "the unit's commitLogOffset is negative"}
        result["points_at_record_start"] = result["length_matches"] = False
    elif store.commitlog_path.is_file():
        target = locate_offset(path, int(u["commit_log_offset"]))
        rec = target.get("record")
        result["commitlog"] = target
        result["points_at_record_start"] = bool(rec and rec["offset_in_record"] == 0)
        result["length_matches"] = bool(rec and rec["size"] == int(u["msg_length"]))
    return result


# --- query by msgId --------------------------------------------------------------------------------
def _confirm(cl: CommitLog, match: np.ndarray, phy: int) -> tuple[int | None, str | None]:
    """Record for an entry's phyOffset: the record starting there, or (the article's writer) ending there."""
    i = cl.record_at(phy)
    if i is not None and match[i]:
        return i, "start"
    ends = cl.record_end
    j = int(np.searchsorted(ends, phy))
    if j < len(ends) and ends[j] == phy and match[j]:
        return j, "end"
    return None, None


def query_msg_id(path, msg_id: str, body: str = "text") -> tuple[list[dict], list[str]]:
    """Records whose msgId is ``msg_id``, found through index.txt, and notes for the reader.

    The slot keeps only the last key hashed to it; when a later key overwrote it the
    entry area (which keeps every entry) is scanned for the hash, and failing that
    commitLog.txt itself. Every answer is confirmed against the record's msgId.
    """
    store = SimplifiedStore.open(path)
    cl = read_commitlog(store.require(fmt.COMMITLOG_NAME))
    match = cl.msg_id_mask(msg_id)
    key_hash = java_string_hash(msg_id)
    notes: list[str] = []
    found: dict[int, dict] = {}
    ix = None
    if store.index_path.is_file():
        try:
            ix = read_index(store.index_path)
        except CorruptDataError as exc:           # a damaged index.txt: answer from commitLog.txt
            notes.append(f"{fmt.INDEX_NAME} is unreadable ({exc.message}): scanning {fmt.COMMITLOG_NAME}")
    if ix is not None:
        slot = int(ix.slot_of(key_hash))
        value = int(ix.slots[slot])
        hashes = ix.entries["key_hash"].astype(np.int64)
        via_slot = None
        if 0 <= value < len(ix) and int(ix.slot_of(hashes[value])) == slot:
            if hashes[value] == key_hash:
                via_slot = value
            else:
                notes.append(f"slot {slot} holds entry {value} (keyHash {int(hashes[value])}), a later key: "
                             f"the article's index keeps only the last key per slot, so {msg_id!r} "
                             f"was overwritten; scanning the entries instead")
        else:
            notes.append(f"slot {slot} is empty")
        for n in np.flatnonzero(hashes == key_hash):
            n = int(n)
            i, points_at = _confirm(cl, match, int(ix.entries["phy_offset"][n]))
            if i is None:
                notes.append(f"entry {n} has this keyHash but phyOffset {int(ix.entries['phy_offset'][n])} "
                             f"is not a record with this msgId (hash collision or stale entry)")
                continue
            if i not in found:
                found[i] = {"via": "index-slot" if n == via_slot else "index-entry-scan", "entry": n,
                            "index_points_at": points_at}
        if any(v["index_points_at"] == "end" for v in found.values()):
            notes.append("index entries hold the offset after their record (as the article's writer does)")
    elif not store.index_path.is_file():
        notes.append(f"no {fmt.INDEX_NAME}: scanning {fmt.COMMITLOG_NAME}")
    for i in map(int, np.flatnonzero(match)):
        if i not in found:
            found[i] = {"via": "commitlog-scan", "entry": None, "index_points_at": None}
            if ix is not None:
                notes.append(f"record at {int(cl.position[i])} has this msgId but no index entry points at it")
    rows = []
    for i in sorted(found):
        rec = cl.row(i, body)
        rows.append({**rec, **found[i]})
    return rows, notes
