"""What the report says about one store, as plain data: gathered from ``ops/info`` (liveness, abort,
queues), ``ops/verify`` (findings, the recovery forecast and its per-queue counts of records not yet
dispatched / indexed: ``forecast.Pending.by_queue``) and ``ops/stats`` (per queue, per CommitLog file,
per topic and time bucket). Nothing here restates a broker rule; it picks, adds up and words.
"""
from __future__ import annotations

import json
import os

from rmqtool.io.topicpath import printable
from rmqtool.wording import counted

#: rows of each message list shown in the page (the forecast counts them all; JSON keeps the first ones too)
LISTED = 200
#: ConsumeQueue rows drawn in the file map (queues with findings first)
MAP_QUEUES = 120

#: the store's state, most urgent first: (key, label for the headline, CSS status)
STATES = {"damaged": "damaged", "running": "running broker", "abnormal": "abnormal shutdown",
          "clean": "clean shutdown"}
#: how bad each state is, for a fleet's worst
SEVERITY = {"clean": 0, "running": 1, "abnormal": 2, "damaged": 3}


def state_of(live: bool, abort: bool, errors: int) -> str:
    """The headline's state: a running broker holds the lock (the numbers are a live snapshot's),
    else damaged when verify found errors, else abnormal shutdown when the ``abort`` file is there,
    else a clean shutdown."""
    if live:
        return "running"
    if errors:
        return "damaged"
    return "abnormal" if abort else "clean"


def headline(state: str, info: dict, fc: dict, errors: int, damaged_files: int) -> str:
    """The one sentence under the state: why that state, and what the next start does."""
    abort = info["abort"]
    start = fc.get("start_file")
    restart = (f"the next start runs the {fc['mode']} recovery from CommitLog file {start}" if start
               else "the store has no CommitLog data")
    if state == "running":
        who = info.get("lock_owner_text") or "a running process"
        return (f"Running broker: {who} holds the store's lock, so this report is a snapshot of a store "
                f"being written; the forecast is what a start from this snapshot would do.")
    if state == "damaged":
        after = " after an abnormal shutdown (abort file present)" if abort else ""
        return (f"Damaged{after}: verify found {counted(errors, 'error')} in {counted(damaged_files, 'file')}; "
                f"{restart}.")
    if state == "abnormal":
        return f"Abnormal shutdown: the abort file is present (the broker did not shut down cleanly); {restart}."
    return f"Clean shutdown: no abort file, no lock held, no error found; {restart}."


def key_numbers(fc: dict, findings: list[dict], live: bool) -> list[dict]:
    """The numbers that matter at a glance, each with what it means."""
    truncated = sum(q["units"] for q in fc.get("consume_queues_truncated", []))
    errors = [f for f in findings if f["severity"] == "error"]
    deleted = len(fc.get("commitlog_files_deleted", [])) + len(fc.get("index_files_deleted", []))
    return [
        {"label": "lost at restart", "value": fc.get("lost_count", 0), "bad": fc.get("lost_count", 0) > 0,
         "hint": "records past the valid end: the restart truncates them"},
        {"label": "not dispatched", "value": fc.get("not_dispatched_count", 0), "bad": False,
         "hint": "in the CommitLog, not yet in their ConsumeQueue: dispatched at restart"},
        {"label": "not indexed", "value": fc.get("not_indexed_count", 0), "bad": False,
         "hint": "not yet in the IndexFile: indexed at restart"},
        {"label": "files deleted at restart", "value": deleted, "bad": deleted > 0,
         "hint": f"{counted(len(fc.get('commitlog_files_deleted', [])), 'CommitLog file')}, "
                 f"{counted(len(fc.get('index_files_deleted', [])), 'index file')}"},
        {"label": "queue units truncated", "value": truncated, "bad": truncated > 0,
         "hint": "ConsumeQueue units at or past the valid end"},
        {"label": "damaged places", "value": len(errors), "bad": bool(errors),
         "hint": f"error findings in {counted(len({f['file'] for f in errors}), 'file')}"},
    ] + ([{"label": "live", "value": "yes", "bad": False, "hint": "a running broker holds the lock"}] if live else [])


def _path_key(path) -> str:
    return os.path.normpath(str(path))


def _marks(findings: list[dict]) -> dict[str, list]:
    """file -> [(offset, severity)] of the findings that name a place in it."""
    out: dict[str, list] = {}
    for f in findings:
        if f.get("file") and f.get("offset") is not None and f["severity"] in ("error", "warning"):
            out.setdefault(_path_key(f["file"]), []).append((f["offset"], f["severity"]))
    return out


def _cell(path, size: int, marks: dict, title: str, fill: float | None = None, deleted: bool = False,
          end: float | None = None) -> dict:
    name = str(path).rsplit("/", 1)[-1]
    here = marks.get(_path_key(path), [])
    notes = [title] + [f"{sev} at byte {off}" for off, sev in here[:5]] + (
        [f"… {len(here) - 5} more"] if len(here) > 5 else [])
    return {"name": printable(name), "fill": fill, "deleted": deleted, "end": end,
            "marks": [(off / size if size else 0, sev) for off, sev in here], "title": printable("; ".join(notes))}


def file_groups(store, stats_files: list[dict], fc: dict, info: dict, findings: list[dict]) -> list[dict]:
    """The file map's rows: the CommitLog files (filled to where their data ends, the valid end and
    deleted files marked), each ConsumeQueue's files (filled to its last unit), the IndexFiles (those
    an abnormal start deletes marked); every finding drawn on the file it names."""
    from formats.consumequeue import CQ_UNIT_SIZE
    marks = _marks(findings)
    end = fc.get("valid_end")
    deleted_cl = set(fc.get("commitlog_files_deleted", []))
    data_end = {_path_key(f["file"]): f["data_end"] for f in stats_files}
    cl_cells = []
    for seg in store.commitlog.files:
        de = data_end.get(_path_key(seg.path))
        inside = end is not None and seg.start <= end < seg.start + seg.size
        title = (f"{seg.name}: {seg.size:,} bytes" + (f", data to {de:,}" if de is not None else "")
                 + (f", valid end at {end - seg.start:,}" if inside else "")
                 + (", deleted at restart" if seg.name in deleted_cl else ""))
        cl_cells.append(_cell(seg.path, seg.size, marks, title, fill=(de / seg.size if de is not None and seg.size
                                                                      else None),
                              deleted=seg.name in deleted_cl, end=(end - seg.start) / seg.size if inside else None))
    groups = [{"kind": "CommitLog" + (" (DLedger data files)" if store.dledger else ""),
               "rows": [{"label": f"{counted(len(cl_cells), 'file')}", "cells": cl_cells}]}]

    ends = {(q["topic"], q["queue_id"]): q["max_offset"] for q in info.get("queues", [])}
    rows = []
    refs = [(r, False) for r in store.queues()] + [(r, True) for r in store.queues(batch=True)]
    for ref, batch in refs:
        try:
            files = store.queue(ref.topic, ref.queue_id, batch=batch).files
        except Exception:           # noqa: BLE001 - a queue that cannot be listed is verify's finding, not the map's
            continue
        used = None if batch or (ref.topic, ref.queue_id) not in ends else ends[(ref.topic, ref.queue_id)] * CQ_UNIT_SIZE
        cells = [_cell(seg.path, seg.size, marks, f"{seg.name}: {seg.size:,} bytes",
                       fill=(min(max(used - seg.start, 0), seg.size) / seg.size if used is not None and seg.size
                             else None))
                 for seg in files]
        damaged = any(c["marks"] for c in cells)
        rows.append((not damaged, ref.topic, ref.queue_id,
                     {"label": printable(f"{ref.topic}/{ref.queue_id}" + (" (batch)" if batch else "")), "cells": cells}))
    rows.sort(key=lambda r: r[:3])
    drawn = [r[3] for r in rows[:MAP_QUEUES]]
    kind = "ConsumeQueue" + (" (RocksDB, as its units' view)" if store.rocksdb_cq else "")
    if len(rows) > MAP_QUEUES:
        kind += f" ({MAP_QUEUES} of {counted(len(rows), 'queue')} drawn: those with findings first)"
    if drawn:
        groups.append({"kind": kind, "rows": drawn})

    index_deleted = set(fc.get("index_files_deleted", []))
    ix = []
    for p in store.index_files():
        try:
            size = p.stat().st_size
        except (OSError, AttributeError):
            size = 0
        ix.append(_cell(p, size, marks, f"{p.name}: {size:,} bytes" + (", deleted at restart" if p.name in index_deleted else ""),
                        deleted=p.name in index_deleted))
    if ix:
        groups.append({"kind": "IndexFile", "rows": [{"label": counted(len(ix), "file"), "cells": ix}]})
    return groups


def waited(ms: int) -> str:
    """A wait for people: 0 ms, 850 ms, 12.5 s, 3.2 min, 5.1 h, 2.0 days."""
    for size, unit, limit in ((1, "ms", 1_000), (1_000, "s", 120_000), (60_000, "min", 7_200_000),
                              (3_600_000, "h", 172_800_000)):
        if ms < limit:
            return f"{ms} ms" if size == 1 else f"{ms / size:.1f} {unit}"
    return f"{ms / 86_400_000:.1f} days"


def dispatch_lag(pending, queues: list[dict], crash_at: int | None) -> list[dict]:
    """Per queue: the records in the CommitLog past its last unit (``Pending.by_queue`` of verify's
    not-dispatched gathering) and how long the oldest of them has waited at the last record's time."""
    last_unit = {(q["topic"], q["queue_id"]): q for q in queues}
    rows = []
    for (topic, qid), (n, oldest, newest) in sorted((pending.by_queue if pending else {}).items()):
        q = last_unit.get((topic, qid), {})
        rows.append({"queue": printable(f"{topic}/{qid}"), "topic": printable(topic), "queue_id": qid, "records": n,
                     "seconds": round((crash_at - oldest) / 1000, 3) if crash_at is not None else None,
                     "oldest_store_time": oldest, "newest_store_time": newest,
                     "queue_max_offset": q.get("max_offset"), "last_unit_end": q.get("max_phy_offset"),
                     "note": f"{counted(n, 'record')}" + (f", oldest waited {waited(crash_at - oldest)}"
                                                          if crash_at is not None else "")})
    rows.sort(key=lambda r: (-r["records"], r["queue"]))
    return rows


def index_lag(pending, fc: dict, crash_at: int | None) -> dict | None:
    """The records past the index's frontier (its endPhyOffset): how many, and how long the oldest has waited."""
    if pending is None or not pending.count:
        return None
    oldest = min(v[1] for v in pending.by_queue.values())
    return {"records": pending.count, "frontier": fc.get("index_frontier"), "oldest_store_time": oldest,
            "seconds": round((crash_at - oldest) / 1000, 3) if crash_at is not None else None}


def store_kinds(store, info: dict) -> list[str]:
    """What kind of store this is, in words (the report says so beside the path)."""
    kinds = []
    if store.dledger:
        kinds.append("DLedger")
    if "controller" in info:
        kinds.append("controller mode")
    if "timer" in info:
        kinds.append("timer store")
    if store.rocksdb_cq:
        kinds.append("RocksDB ConsumeQueue")
    qk = info.get("queue_kinds")
    if qk:
        if qk.get("lmq") or qk.get("multi_dispatch"):
            kinds.append("light queues")
        if qk.get("batch_cq_topics"):
            kinds.append("BatchConsumeQueue")
    if "consumequeue_ext" in info:
        kinds.append("ConsumeQueueExt")
    return kinds or ["classic"]


#: the consumer-groups table's columns (``ops/consumers.consumer_rows`` has more: the JSON block keeps them)
GROUP_COLUMNS = ["group", "topic", "queue_id", "committed_offset", "min_offset", "max_offset", "lag",
                 "restart_status", "restart_next_offset", "restart_effect"]


def consumer_groups_section(groups: list[dict] | None, total: int | None = None, error: str | None = None) -> dict:
    """The consumer-groups section: ``groups``, the (group, topic, queue) rows a restart moves, as
    ``rmqtool/ops/consumers`` reads them from the store's consumer offsets (None: the store has no
    consumerOffset.json; ``error``: it could not be read); ``total``: the rows read in all."""
    rows = list(groups or [])
    return {"read": groups is not None, "rows": [{k: r.get(k) for k in GROUP_COLUMNS} for r in rows],
            "total": total if total is not None else len(rows), "error": error, "json": as_json(rows)}


def _groups_number(section: dict) -> list[dict]:
    """The headline's number of consumer queues a restart moves, when the offsets were read."""
    if not section["read"]:
        return []
    moved = len(section["rows"])
    return [{"label": "consumer queues moved at restart", "value": moved, "bad": moved > 0,
             "hint": f"of {section['total']} committed (group, topic, queue)s: re-consumed, skipped or reset"}]


def read_consumer_groups(store, fc: dict | None = None) -> dict:
    """``consumer_groups_section`` of what the store's ``config/consumerOffset.json`` (and the LMQ file)
    say, as the broker would load them, after the restart verify's forecast ``fc`` predicts (None: the
    broker's recovery walk is run for it); a file that cannot be read is said in the section, not raised."""
    from rmqtool.errors import RmqError
    from rmqtool.ops.consumers import consumer_rows, forecast_restart, moved_by_restart
    try:
        rows, meta = consumer_rows(store, restart=forecast_restart(store, fc) if fc is not None else None)
    except RmqError as exc:
        return consumer_groups_section(None, error=str(exc))
    broken = [f"{load.says()} ({load.error()})" for load in meta["loads"] if not load.ok]
    if broken:
        return consumer_groups_section(None, error="; ".join(broken))
    if not any(load.source for load in meta["loads"]):
        return consumer_groups_section(None)
    return consumer_groups_section(moved_by_restart(rows), total=len(rows))


def as_json(value) -> str:
    return printable(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def store_model(store, name: str, level: str, engine=None, split_size: int | None = None, progress=None,
                consumer_groups: list[dict] | None = None) -> dict:
    """Everything one store's section shows. ``progress(done, total)``: CommitLog bytes of the two walks."""
    from rmqtool.ops.info import store_info
    from rmqtool.ops.stats import stats
    from rmqtool.ops.verify import VerifyOptions, verify
    on_verify, on_stats = _two_walks(progress, store)
    info = store_info(store)
    rep = verify(store, VerifyOptions(level=level), engine=engine, split_size=split_size, progress=on_verify)
    st, = stats([(name, store)], "auto", engine=engine, split_size=split_size, progress=on_stats)
    d = rep.as_dict()
    fc, findings, summary = d["forecast"], d["findings"], d["summary"]
    errors = summary["findings"]["error"]
    damaged_files = len({f["file"] for f in findings if f["severity"] == "error"})
    state = state_of(info["live"], info["abort"], errors)
    crash_at = st.total.last
    queue_rows = [r for r in st.rows() if r["kind"] == "queue"]
    lag = dispatch_lag(rep.pending.get("not_dispatched"), info["queues"], crash_at)
    root = store.root if store.remote else os.path.abspath(store.root)
    groups = file_groups(store, st.files, fc, info, findings)
    short = {k: v for k, v in fc.items() if k not in ("lost", "not_dispatched", "not_indexed")}
    groups_section = (read_consumer_groups(store, fc) if consumer_groups is None
                      else consumer_groups_section(consumer_groups))
    return {
        "name": printable(str(name)), "anchor": "", "root": printable(str(root)), "kinds": store_kinds(store, info),
        "level": level, "state": state, "state_label": STATES[state],
        "headline": printable(headline(state, info, fc, errors, damaged_files)),
        "numbers": key_numbers(fc, findings, info["live"]) + _groups_number(groups_section),
        "exit_code": rep.exit_code("error"),
        "forecast": fc, "errors": errors, "warnings": summary["findings"]["warning"],
        "lost": fc.get("lost", [])[:LISTED], "not_dispatched": fc["not_dispatched"][:LISTED],
        "not_indexed": fc["not_indexed"][:LISTED],
        "dispatch_lag": lag, "index_lag": index_lag(rep.pending.get("not_indexed"), fc, crash_at),
        "first_store_time": st.total.first, "last_store_time": crash_at, "messages": st.total.messages,
        "bucket_ms": st.bucket_ms, "topic_buckets": st.topic_buckets or {},
        "file_groups": groups,
        "findings": [dict(f, file=_relative(f.get("file"), store)) for f in findings[:LISTED]],
        "findings_count": len(findings),
        "queues": queue_rows, "topics": [r for r in st.rows() if r["kind"] == "topic"],
        "consumer_groups": groups_section,
        "json": {"info": as_json(info), "summary": as_json(summary), "forecast": as_json(short),
                 "lost": as_json(fc.get("lost", [])[:LISTED]), "not_dispatched": as_json(fc["not_dispatched"][:LISTED]),
                 "not_indexed": as_json(fc["not_indexed"][:LISTED]), "dispatch_lag": as_json(lag),
                 "findings": as_json(findings[:LISTED]), "queues": as_json(queue_rows),
                 "rate": as_json({"bucket_ms": st.bucket_ms, "first_store_time": st.total.first,
                                  "last_store_time": crash_at,
                                  "buckets": [{"bucket_start": b, "topic": t, "messages": v[0], "bytes": v[1]}
                                              for (b, t), v in sorted((st.topic_buckets or {}).items())]}),
                 "files": as_json(groups)},
    }


def _relative(path, store) -> str | None:
    """A finding's file as a path inside the store (the store's path is in the page's head); a remote
    store's as it is."""
    if path is None:
        return None
    rel = str(path) if store.remote else os.path.relpath(str(path), str(store.root))
    return printable(str(path) if rel.startswith("..") else rel)


def _two_walks(progress, store):
    """``progress(done, total)`` over the report's two CommitLog walks (verify's, then stats'):
    (verify's callable, told each file's size as it is done; stats' callable)."""
    if progress is None:
        return None, None
    size = sum(seg.size for seg in store.commitlog.files)
    verified = [0]

    def on_verify(n: int) -> None:
        verified[0] += n
        progress(min(verified[0], size), 2 * size)
    on_verify.restart = lambda: verified.__setitem__(0, 0)      # verify reads a replaced store again
    return on_verify, lambda done, total: progress(size + min(done, size), 2 * size)
