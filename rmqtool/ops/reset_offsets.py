"""`reset-offsets`: a consumer group's committed offsets moved offline (the twin of ``mqadmin
resetOffsetByTime`` and ``kafka-consumer-groups --reset-offsets``).

The plan is computed on the queues as they are on disk (``query.byqueue.QueueView``: the same min,
max and ``getOffsetInQueueByTime`` as ``query-queue``); ``write_plan`` then writes
``config/consumerOffset.json`` the way the broker's ``ConfigManager.persist`` leaves it
(``MixAll.string2File``: the previous content becomes ``consumerOffset.json.bak``, the new content
is fastjson's pretty layout, ``formats.fastjson.dumps``), each of the two files swapped in whole by
``io.install.install`` (temporary file, fsync, rename; the replaced file kept as
``<name>.backup-<UTC time>``), under the store's writer lock.
"""
from __future__ import annotations

from dataclasses import dataclass

from formats.fastjson import dumps
from rmqtool.errors import RefusedError, UsageError
from rmqtool.io.brokerconfig import (BAK, CONSUMER_OFFSET, LMQ_CONSUMER_OFFSET, TOPIC_GROUP_SEPARATOR, committed_offsets,
                                     lmq_broker, load_config, offset_table_shape, read_text)

MODES = ("to_time", "to_earliest", "to_latest", "to_offset", "shift_by")


@dataclass
class Target:
    mode: str
    value: int | None = None      # ms for to_time, the offset, or the shift


def plan(store, group: str, target: Target, topic: str | None = None) -> list[dict]:
    """One row per queue of the group (its committed queues, and every queue on disk of its
    topics or of ``topic``): old offset -> new offset, and what the move means in messages."""
    from rmqtool.ops.query.byqueue import QueueView
    if lmq_broker(store.config_dir):
        raise RefusedError(f"the broker ran with enableLmq: it loads {LMQ_CONSUMER_OFFSET}, not {CONSUMER_OFFSET}, "
                           f"which reset-offsets writes", store.config_dir)
    offsets, loads = committed_offsets(store.config_dir)
    main = loads[0]
    if not main.ok:
        raise main.error()
    mine = [c for c in offsets if c.group == group and c.source.startswith(CONSUMER_OFFSET)
            and (topic is None or c.topic == topic)]
    topics = {topic} if topic is not None else {c.topic for c in mine}
    if not topics:
        raise UsageError(f"group {group!r} has no committed offset in {CONSUMER_OFFSET}; name its --topic")
    old = {(c.topic, c.queue_id): c.offset for c in mine}
    present = {(r.topic, r.queue_id) for r in store.queues()}
    keys = sorted(set(old) | {k for k in present if k[0] in topics})
    rows = []
    for t, q in keys:
        view = QueueView(store, t, q) if (t, q) in present else None
        try:
            lo, hi = (view.min_offset, view.max_offset) if view is not None else (0, 0)
            before = old.get((t, q))
            base = before if before is not None else lo
            if target.mode == "to_earliest":
                want = lo
            elif target.mode == "to_latest":
                want = hi
            elif target.mode == "to_offset":
                want = target.value
            elif target.mode == "shift_by":
                want = base + target.value
            elif target.mode == "to_time":
                want = view.offset_by_time(target.value, "lower") if view is not None else 0
            else:
                raise UsageError(f"unknown reset mode {target.mode}")
        finally:
            if view is not None:
                view.close()
        new = min(max(want, lo), hi)
        change = new - base
        rows.append({"group": group, "topic": t, "queue_id": q, "old_offset": before, "new_offset": new,
                     "min_offset": lo, "max_offset": hi, "clamped": new != want,
                     "effect": ("unchanged" if change == 0 else f"re-consumes {-change}" if change < 0
                                else f"skips {change}")})
    return rows


def new_text(store, rows: list[dict]) -> tuple[str, str | None]:
    """(the new consumerOffset.json text, the current main file's text or None): the file the
    broker loads (``io.brokerconfig.load_config``: the main, else its .bak), with the plan's offsets
    set, in fastjson's layout. Neither decoding (the broker would not start) raises its error."""
    load = load_config(store.config_dir, CONSUMER_OFFSET, offset_table_shape)
    if not load.ok:
        raise load.error()
    tree = load.data if isinstance(load.data, dict) else {}
    table = tree.get("offsetTable")
    if table is None:
        table = tree["offsetTable"] = {}
    for r in rows:
        key = f"{r['topic']}{TOPIC_GROUP_SEPARATOR}{r['group']}"
        queues = table.setdefault(key, {})
        queues[r["queue_id"]] = r["new_offset"]
    return dumps(tree), read_text(store.config_dir / CONSUMER_OFFSET)


def write_plan(store, rows: list[dict]) -> dict:
    """Write the plan (module docstring); refused while a broker or another rmqtool holds the
    store's lock. What was written and where the originals went."""
    from pathlib import Path
    from rmqtool.io import install as inst
    from rmqtool.io.storelock import refuse_if_held, writer_lock
    if store.remote:
        raise RefusedError("reset-offsets --execute writes a local store only", store.root)
    refuse_if_held(store)
    config = Path(store.config_dir)
    main, bak = config / CONSUMER_OFFSET, config / (CONSUMER_OFFSET + BAK)
    with writer_lock(store, "reset-offsets"):
        notes = inst.recover_leftovers(main) + inst.recover_leftovers(bak)
        text, previous = new_text(store, rows)
        backups = {}
        if previous is not None:             # MixAll.string2File: the previous content becomes the .bak
            backups[bak.name] = _swap(bak, previous.encode("utf-8"))
        inst.crash_point("staged")
        backups[main.name] = _swap(main, text.encode("utf-8"))
    return {"file": str(main), "bytes": len(text.encode("utf-8")), "backups": backups, "recovered": notes}


def _swap(target, data: bytes) -> str | None:
    """``data`` installed as ``target`` whole or not at all; the replaced file's backup path."""
    from rmqtool.io import install as inst
    tmp = target.with_name(f"{target.name}{inst.TMP_MARK}{inst.utc_stamp()}")
    inst.write_synced(tmp, data)
    return inst.install(target, tmp).backup
