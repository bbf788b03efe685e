"""verify's checks of a RocksDB ConsumeQueue's own tables (docs/format-rocksdb-cq.md); its units
are checked against the records like any ConsumeQueue's (through the store's read-only view)."""
from __future__ import annotations


def check_rocksdb_cq(store, sink) -> dict | None:
    if not store.rocksdb_cq:
        return None
    r = store.rocksdb_units
    where = store.root / "consumequeue"
    for key, what in r.problems:
        sink.add("cq.rocksdb-entry", where, None, f"RocksDB entry with key {key[:96]}: {what}", excerpt=False)
    for (topic, qid), units in sorted(r.queues.items()):
        have = r.offsets.get((topic, qid), {}).get("max")
        last = units[-1]
        if have is None:
            sink.add("cq.rocksdb-offset", where, None, f"{topic}/{qid}: no max offset in the offset table "
                     f"(its last unit is at queue offset {last[0]})", excerpt=False)
        elif have != (last[1], last[0]):
            sink.add("cq.rocksdb-offset", where, None, f"{topic}/{qid}: the offset table's max is commitlog offset "
                     f"{have[0]} at queue offset {have[1]}, the last unit is {last[1]} at {last[0]}", excerpt=False)
    return {"queues": len(r.queues), "units": sum(len(u) for u in r.queues.values()), "bad_entries": len(r.problems)}
