"""Which file and position hold a commitlog offset or a queue offset, and the record there."""
from __future__ import annotations

from formats.consumequeue import CQ_UNIT_SIZE
from rmqtool.errors import UsageError
from rmqtool.output.schema import record_to_dict
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io.topicpath import queue_dir


#: how far into a file ``locate`` follows the record chain with ``struct`` before the bulk walk
CHAIN_BYTES = 1 << 20


def locate_offset(store, offset: int, chain_bytes: int = CHAIN_BYTES) -> dict:
    """The commitlog file and position of ``offset`` and the record (or padding) containing it.

    Record boundaries are known only by walking the file from its start. Within its first
    ``chain_bytes`` the chain of whole records is followed with ``struct`` (``ChainWalk``, no numpy);
    anything else (an offset further in, a BLANK, damage, a DLedger data file) takes the bulk walk,
    the reference, which ``chain_bytes=0`` forces (tests prove the two equal)."""
    if offset < 0:
        raise UsageError(f"offset {offset} is negative")
    hit = store.locate(offset)
    cl = store.commitlog
    if hit is None:
        return {"offset": offset, "file": None, "position": None, "found": False,
                "reason": f"outside the commitlog files [{cl.min_offset}, {cl.end_offset})"}
    seg, pos = hit
    result = {"offset": offset, "file": str(seg.path), "file_start": seg.start, "position": pos,
              "found": True, "record": None}
    found = _chained(seg, pos, chain_bytes) if pos < chain_bytes else None
    end = None
    if found is None:
        found, end = _walked(seg, pos)
    if found is not None:
        rec = record_to_dict(*found)
        result["record"] = {"start": rec["phy_offset"], "position": rec["position"], "size": rec["size"],
                            "offset_in_record": pos - rec["position"], "topic": rec["topic"],
                            "queue_id": rec["queue_id"], "queue_offset": rec["queue_offset"],
                            "store_timestamp": rec["store_timestamp"],
                            "offset_msg_id": rec["offset_msg_id"], "uniq_key": rec["uniq_key"]}
        result["kind"] = "MESSAGE"
        return result
    from rmqtool.records.scan import END_BLANK
    if end is not None and end.position <= pos:           # no record holds it: padding, or past the data
        if end.kind == END_BLANK:
            result["kind"] = "BLANK"
            result["record"] = {"start": end.phy_offset, "position": end.position, "size": end.blank_size}
        else:
            result["kind"] = "PAST_END"      # inside a file, but no record holds it: nothing found
            result["found"] = False
            result["reason"] = f"past the end of the data in this file ({end.kind} at position {end.position}" + (
                f": {end.detail})" if end.detail else ")")
    return result


def _chained(seg, pos: int, chain_bytes: int):
    """``(record, 0)`` of the MESSAGE holding ``pos`` when the chain from the file's start reaches it
    within ``chain_bytes``; None for anything the bulk walk must judge."""
    from rmqtool.io.dledger_layout import is_entry_file
    from rmqtool.records.single import ChainWalk
    if is_entry_file(seg.path):
        return None
    with ReadOnlyFile(seg.path) as fh:
        window = fh.read(0, min(fh.size(), chain_bytes), exact=False)
    for rec in ChainWalk(window, 0, str(seg.path), seg.start):
        start = int(rec.position[0])
        if start > pos:
            return None
        if pos < start + int(rec.size[0]):
            return rec, 0
    return None


def _walked(seg, pos: int):
    """By the bulk walk from the file's start: ``((batch, row) of the MESSAGE holding pos, or None;
    where the walk ended)``."""
    import numpy as np
    from rmqtool.records.scan import FileScan
    scan = FileScan(seg.path, seg.start, hi=pos + 1)
    for batch in scan:
        starts = batch.position
        i = int(np.searchsorted(starts, pos, side="right")) - 1
        if i >= 0 and starts[i] <= pos < starts[i] + batch.size[i]:
            return (batch, i), None
    return None, scan.end


def locate_queue_offset(store, topic: str, queue_id: int, queue_offset: int) -> dict:
    """The CQ file and position of ``queue_offset``, the unit there, and the record it points at."""
    import numpy as np
    from formats.consumequeue import CQ_UNIT_DTYPE
    if queue_offset < 0:
        raise UsageError(f"queue offset {queue_offset} is negative")
    queue = store.queue(topic, queue_id)
    if not queue.files:
        raise UsageError(f"no ConsumeQueue files for {topic}/{queue_id}", queue_dir(store.consumequeue_dir, topic, queue_id))
    logical = queue_offset * CQ_UNIT_SIZE
    hit = queue.locate(logical)
    result = {"topic": topic, "queue_id": queue_id, "queue_offset": queue_offset, "found": False}
    if hit is None:
        result["reason"] = (f"outside the queue's files (queue offsets {queue.min_offset // CQ_UNIT_SIZE}"
                            f" to {queue.end_offset // CQ_UNIT_SIZE})")
        return result
    seg, pos = hit
    result.update(file=str(seg.path), position=pos)
    with ReadOnlyFile(seg.path) as fh:
        raw = fh.read(pos, CQ_UNIT_SIZE, exact=False)
    if len(raw) < CQ_UNIT_SIZE:
        result["reason"] = "the file ends before this unit"
        return result
    unit = np.frombuffer(raw, CQ_UNIT_DTYPE)[0]
    result["unit"] = {name: int(unit[name]) for name in CQ_UNIT_DTYPE.names}
    if unit["commitlog_offset"] < 0 or unit["size"] <= 0:
        result["reason"] = "no unit here (past the queue's logical end)"
        return result
    result["found"] = True
    target = locate_offset(store, int(unit["commitlog_offset"]))
    rec = target.get("record")
    result["commitlog"] = target
    result["points_at_record_start"] = bool(rec and rec.get("offset_in_record") == 0)
    return result
