"""Which file and position hold a commitlog offset or a queue offset, and the record there."""
from __future__ import annotations

from formats.consumequeue import CQ_UNIT_SIZE
from rmqtool.errors import UsageError
from rmqtool.output.schema import record_to_dict
from rmqtool.io.fileio import ReadOnlyFile


def locate_offset(store, offset: int) -> dict:
    """The commitlog file and position of ``offset`` and the record (or padding) containing it."""
    import numpy as np
    from rmqtool.records.scan import END_BLANK, FileScan
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
    scan = FileScan(seg.path, seg.start, hi=pos + 1)
    for batch in scan:
        starts = batch.position
        i = int(np.searchsorted(starts, pos, side="right")) - 1
        if i >= 0 and starts[i] <= pos < starts[i] + batch.size[i]:
            rec = record_to_dict(batch, i)
            result["record"] = {"start": rec["phy_offset"], "position": rec["position"], "size": rec["size"],
                                "offset_in_record": pos - rec["position"], "topic": rec["topic"],
                                "queue_id": rec["queue_id"], "queue_offset": rec["queue_offset"],
                                "store_timestamp": rec["store_timestamp"],
                                "offset_msg_id": rec["offset_msg_id"], "uniq_key": rec["uniq_key"]}
            result["kind"] = "MESSAGE"
            return result
    end = scan.end
    if end is not None and end.position <= pos:
        if end.kind == END_BLANK:
            result["kind"] = "BLANK"
            result["record"] = {"start": end.phy_offset, "position": end.position, "size": end.blank_size}
        else:
            result["kind"] = "PAST_END"      # inside a file, but no record holds it: nothing found
            result["found"] = False
            result["reason"] = f"past the end of the data in this file ({end.kind} at position {end.position}" + (
                f": {end.detail})" if end.detail else ")")
    return result


def locate_queue_offset(store, topic: str, queue_id: int, queue_offset: int) -> dict:
    """The CQ file and position of ``queue_offset``, the unit there, and the record it points at."""
    import numpy as np
    from formats.consumequeue import CQ_UNIT_DTYPE
    if queue_offset < 0:
        raise UsageError(f"queue offset {queue_offset} is negative")
    queue = store.queue(topic, queue_id)
    if not queue.files:
        raise UsageError(f"no ConsumeQueue files for {topic}/{queue_id}", store.consumequeue_dir / topic / str(queue_id))
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
