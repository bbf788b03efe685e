"""Everything `rmqtool info` reports about a store, as one dict."""
from __future__ import annotations

from dataclasses import asdict

from rmqtool.broker.epochs import epoch_ranges
from rmqtool.broker.queuekinds import detect as detect_queue_kinds
from rmqtool.broker.recovery import start_and_end
from rmqtool.broker.truncation import records_past
from rmqtool.io.consumequeue import read_units
from rmqtool.io.controller import read_broker_identity, read_epochs


def queue_summary(store, ref) -> dict:
    q = store.queue(ref.topic, ref.queue_id)
    units = read_units(ref.topic, ref.queue_id, q)
    real = ~units.pre_blank
    min_cl = store.commitlog.min_offset
    alive = real & (units.units["commitlog_offset"] >= min_cl)
    first = units.queue_offset[alive][0] if alive.any() else units.end_queue_offset
    u = units.units[real]
    return {
        "topic": ref.topic, "queue_id": ref.queue_id, "files": len(q.files),
        "min_offset": int(first), "max_offset": int(units.end_queue_offset),
        "max_phy_offset": int((u["commitlog_offset"] + u["size"]).max()) if len(u) else None,
        "pre_blank_units": int((~real).sum()),
    }


def ext_summary(store) -> dict | None:
    """``consumequeue_ext/`` (4.x ``enableConsumeQueueExt``): its queues, files and file size;
    None when the store has none."""
    from rmqtool.io.consumequeue_ext import EXT_DIR, ExtProblem, ExtQueue, ext_file_size, ext_queues, has_ext
    if not has_ext(store.root):
        return None
    size = ext_file_size(store.root)
    queues = []
    for topic, qid, d in ext_queues(store.root):
        q = ExtQueue(d, size)
        row = {"topic": topic, "queue_id": qid, "files": len(q.segments.files), "end_offset": None}
        try:
            row["end_offset"] = q.end_offset()
        except ExtProblem as exc:
            row["problem"] = f"{exc.path}@{exc.position}: {exc.message}"
        queues.append(row)
    return {"path": str(store.root / EXT_DIR), "file_size": size, "queues": len(queues),
            "files": sum(q["files"] for q in queues), "queue_ends": queues}


def count_messages(store, progress=None) -> int:
    """MESSAGE records in every CommitLog file, each walked from its start to where its data ends
    (a file that stops early is counted up to the stop, as the broker's walk reads it).
    ``progress(files_done, files)`` after each file."""
    from rmqtool.records.scan import RecordBatch, walk_store
    files, done, messages = len(store.commitlog.files), 0, 0
    for item in walk_store(store):
        if isinstance(item, RecordBatch):
            messages += len(item)
        elif progress is not None:                  # a FileEnd: that file is walked
            done += 1
            progress(done, files)
    return messages


def controller_info(store, max_offset: int) -> dict | None:
    """Controller mode: the broker identity and the epochs, the newest ending at ``max_offset`` (the
    CommitLog's valid end); None when the store has neither file."""
    epochs, identity = read_epochs(store.root), read_broker_identity(store.root)
    if epochs is None and identity is None:
        return None
    return {
        "broker_identity": identity.as_dict() if identity else None,
        "epoch_file": epochs.as_dict() if epochs else None,
        "epochs": [asdict(r) for r in epoch_ranges(epochs.entries, max_offset)] if epochs else [],
        "max_offset": max_offset,
    }


def store_info(store, count_all: bool = False, progress=None) -> dict:
    """``count_all``: count every message (a walk of every file, ``progress`` told the files walked);
    otherwise only the recovery walk's own count, from its start file (fast on a store of hundreds of GB)."""
    cl = store.commitlog
    start, (end, stop, messages), dledger_rec = start_and_end(store)
    cp = store.checkpoint()
    index_files = store.index_files()
    owner = store.lock_owner()
    info = {
        "root": str(store.root),
        "live": owner is not None,
        "lock_holder": owner.pid if owner is not None else None,
        "lock_owner": owner.as_dict() if owner is not None else None,
        "lock_owner_text": owner.describe() if owner is not None else None,
        "symlinks": [{"path": str(path), "target": dest} for path, dest in store.symlinks()],
        "abort": store.abort_present(),
        "commitlog": {
            "dirs": [str(d) for d in store.commitlog_dirs],
            "files": len(cl.files),
            "file_size": cl.file_size,
            "min_offset": cl.min_offset,
            "valid_end": end,
            "end_kind": stop.kind if stop else None,
            "end_detail": stop.detail if stop else None,
            "messages": count_messages(store, progress) if count_all else None,
            "messages_from_recovery_start": messages,
            "records_past_valid_end": records_past(store, end, stop.kind) if stop is not None else 0,
            "messages_counted_from": start.offset,
            "problems": [f"{p.check}: {p.path}: {p.message}" for p in cl.problems],
        },
        "recovery": {**start.as_dict(), "start_file": start.file_name},
        "index": {
            "files": len(index_files),
            "names": [p.name for p in index_files],
            "hash_slots": store.index_geometry.hash_slots if index_files else None,
            "index_entries": store.index_geometry.index_entries if index_files else None,
        },
        "checkpoint": cp.as_dict() if cp else None,
        "queues": [queue_summary(store, ref) for ref in store.queues()],
        "config_files": sorted(store.config().keys()),
    }
    from rmqtool.io.timerstore import TimerStore
    ts = TimerStore.of(store)
    if ts is not None:                                     # only timer stores have the key
        from rmqtool.ops.timer import timer_summary
        info["timer"] = timer_summary(store, ts)
    if store.rocksdb_cq:                                   # only RocksDB ConsumeQueue stores have the key
        r = store.rocksdb_units
        info["rocksdb_consumequeue"] = {
            "path": str(store.root / "consumequeue"), "read_only": True, "queues": len(r.queues),
            "units": sum(len(u) for u in r.queues.values()), "max_phy_offset_checkpoint": r.checkpoint_phy,
            "bad_entries": len(r.problems), "view": str(store.consumequeue_dir)}
    ext = ext_summary(store)
    if ext is not None:                                    # only ConsumeQueueExt stores have the key
        info["consumequeue_ext"] = ext
    kinds = detect_queue_kinds(store)
    if kinds.multi_dispatch or kinds.batch_cq_topics:      # only 5.x stores using them have the key
        info["queue_kinds"] = {"multi_dispatch": kinds.multi_dispatch, "lmq": kinds.lmq,
                               "batch_cq_topics": sorted(kinds.batch_cq_topics), "source": kinds.source,
                               "batch_queues": [{"topic": r.topic, "queue_id": r.queue_id}
                                                for r in store.queues(batch=True)]}
    from rmqtool.ops.consumers import Restart, restart_moves
    moves = restart_moves(store, Restart(start.mode, int(end), cl.min_offset, cl.file_size)   # this walk's restart
                          if cl.files else None)
    if moves is not None:                # only stores with a consumerOffset.json have the key
        info["consumer_restart"] = moves
    controller = controller_info(store, end)
    if controller is not None:           # only controller-mode stores have the key
        info["controller"] = controller
    if store.dledger:                    # only DLedger-mode stores have the key
        from rmqtool.ops.dledger import group_view
        info["dledger"] = group_view(store)
        info["dledger"]["recovery"] = dledger_rec.as_dict() if dledger_rec else None
    return info
