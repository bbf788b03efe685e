"""`query-id`: an offsetMsgId if a record really starts there, else a UNIQ_KEY (format.md §2.7)."""
from __future__ import annotations

from dataclasses import dataclass, field

from rmqtool.records.ids import decode_offset_msg_id, decode_uniq_key
from rmqtool.output.schema import record_to_dict
from rmqtool.ops.query.bykey import Hit, query_key
from rmqtool.ops.query.keyscan import query_key_scan
from rmqtool.records.single import RecordReader

KIND_OFFSET = "offsetMsgId"
KIND_UNIQ = "uniqKey"


@dataclass
class IdResult:
    kind: str | None
    hits: list[Hit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    decoded: dict | None = None     # offsetMsgId: host/port/offset; UNIQ_KEY: ip/pid/time


def query_id(store, msg_id: str, scan: bool = False, engine=None, split_size: int | None = None,
             progress=None) -> IdResult:
    """What ``msg_id`` names in ``store``; ``engine`` (None: this process) runs the CommitLog scans
    of a UNIQ_KEY (``scan``, or after the index found nothing); ``progress(done, total)``: their bytes."""
    msg_id = msg_id.strip()
    res = IdResult(None)
    decoded = decode_offset_msg_id(msg_id)
    if decoded is not None:
        address, port, offset = decoded
        reader = RecordReader(store)
        try:
            batch = reader.read(offset)
            if batch is not None and int(batch.stored_phy_offset[0]) == offset \
                    and batch.host("store", 0) == (address, port):
                res.kind = KIND_OFFSET
                res.decoded = {"store_host": record_to_dict(batch, 0)["store_host"], "phy_offset": offset}
                res.hits = [Hit(batch, 0, offset, "offset_msg_id", True)]
                return res
        finally:
            reader.close()
        res.notes.append(f"not an offsetMsgId of this store (no record at offset {offset} from "
                         f"that store host); trying it as a UNIQ_KEY")

    def by_key(scan: bool):
        if scan and engine is not None:
            return query_key_scan(store, msg_id, engine, None, uniq_only=True, rollback=True, split_size=split_size,
                                  progress=progress)
        return query_key(store, msg_id, None, uniq_only=True, scan=scan, rollback=True, progress=progress)
    found = by_key(scan)
    if not found.hits and not scan:
        found.notes.append("not found through the index; scanning the whole CommitLog")
        again = by_key(True)
        found.hits, found.notes = again.hits, found.notes + again.notes
    res.notes += found.notes
    res.hits = found.hits
    res.kind = KIND_UNIQ
    born = store_ts = None
    if found.hits:
        rec = found.hits[-1].batch                 # the oldest copy: the producer's original
        born = int(rec.born_timestamp[found.hits[-1].row])
        store_ts = int(rec.store_timestamp[found.hits[-1].row])
    res.decoded = decode_uniq_key(msg_id, born, store_ts)
    return res
