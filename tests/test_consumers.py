"""`consumers`, `reset-offsets` and the broker's config files, against upstream's answers for the
`consumers` reference store (fixtures/reference/consumers, written by upstream 5.3.3's
ConsumerOffsetManager / ScheduleMessageService / SubscriptionGroupManager through fastjson 1.2.83)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings, strategies as st

import pause_at
from conftest import load_answers, reference_store, run_cli
from consumers_crash import crash_copy
from formats.fastjson import FastjsonError, MAX_DEPTH, dumps, parse
from rmqtool.io.brokerconfig import committed_offsets, delay_offsets, load_config, offset_table_shape
from rmqtool.ops.consumers import deletion_time

STORE = "consumers"
ANSWERS = load_answers(STORE)["consumers"]
CONFIG = reference_store(STORE) / "config"


def _ints(table: dict) -> dict:
    """An answers' offset table ({"0": 3}) with integer queue ids, as the file's keys are."""
    return {k: ({int(q): v for q, v in qs.items()} if isinstance(qs, dict) else qs) for k, qs in table.items()}


# --- formats.fastjson ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in CONFIG.iterdir()))
def test_every_reference_config_file_round_trips_byte_for_byte(name):
    raw = (CONFIG / name).read_bytes()
    sha = {f["name"]: f for f in ANSWERS["configFiles"]}[name]
    assert len(raw) == sha["size"]
    assert dumps(parse(raw.decode("utf-8"))).encode("utf-8") == raw


def test_strict_json_refuses_what_fastjson_wrote_and_the_parser_reads_it_as_the_broker():
    text = (CONFIG / "consumerOffset.json").read_text()
    with pytest.raises(ValueError):
        json.loads(text)
    files = ANSWERS["afterCleanShutdown"]["consumerOffsetFiles"]
    for name, decoded in files.items():
        got = parse((CONFIG / name).read_text())
        assert got["offsetTable"] == _ints(decoded["offsetTable"])
        assert got["dataVersion"] == decoded["dataVersion"]


_keys = st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=8))
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=12))
_trees = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_keys, inner, max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_trees)
def test_dumps_then_parse_gives_the_tree_back(tree):
    assert parse(dumps(tree)) == tree


@settings(max_examples=300, deadline=None)
@given(st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=20))
def test_strict_json_is_read_as_json_reads_it(tree):
    for indent in (None, 1, "\t"):
        assert parse(json.dumps(tree, indent=indent, ensure_ascii=bool(indent))) == tree


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]:,"\'\\ \t\n0123456789-abcnrtulefs@%')), max_size=60))
def test_any_text_parses_or_fails_with_a_line_and_column(text):
    try:
        parse(text)
    except FastjsonError as exc:
        lines = text.split("\n")
        assert 1 <= exc.line <= len(lines)
        assert 1 <= exc.col <= len(lines[exc.line - 1]) + 1


def test_errors_name_line_and_column_and_depth_is_bounded():
    with pytest.raises(FastjsonError) as e:
        parse('{\n\t"offsetTable":{\n\t\t"a@b":{0:1,1:}\n\t}\n}')
    assert (e.value.line, e.value.col) == (3, 16)          # the "}" where a value belongs
    with pytest.raises(FastjsonError, match="deeper"):
        parse("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2))
    assert parse(" \t\n") is None


# --- ConfigManager.load -------------------------------------------------------------------------

def test_committed_offsets_are_what_the_broker_loads():
    rows, loads = committed_offsets(CONFIG)
    want = _ints(ANSWERS["afterCleanShutdown"]["consumerOffsetManagerLoad"]["offsetTable"])
    got: dict = {}
    for r in rows:
        got.setdefault(f"{r.topic}@{r.group}", {})[r.queue_id] = r.offset
    assert got == want
    assert [x.source for x in loads] == ["consumerOffset.json", None] and all(x.ok for x in loads)


def test_delay_offsets_are_the_files():
    table, load = delay_offsets(CONFIG)
    assert table == {int(k): v for k, v in
                     ANSWERS["afterCleanShutdown"]["delayOffsets"]["delayOffset.json"]["offsetTable"].items()}


@pytest.mark.parametrize("damage", ["missing", "empty", "torn", "not-a-table"])
def test_a_bad_main_file_falls_back_to_the_bak(tmp_path, damage):
    cfg = tmp_path / "config"
    cfg.mkdir()
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (cfg / name).write_bytes((CONFIG / name).read_bytes())
    main = cfg / "consumerOffset.json"
    if damage == "missing":
        main.unlink()
    elif damage == "empty":
        main.write_bytes(b"")
    elif damage == "torn":
        main.write_bytes(main.read_bytes()[:200])
    else:
        main.write_text('{"offsetTable":{"a@b":{0:"x"}}}')
    load = load_config(cfg, "consumerOffset.json", offset_table_shape)
    bak = ANSWERS["afterCleanShutdown"]["consumerOffsetFiles"]["consumerOffset.json.bak"]
    assert load.ok and load.source == "consumerOffset.json.bak"
    assert load.data["offsetTable"] == _ints(bak["offsetTable"])
    assert ("consumerOffset.json.bak" in load.says())
    if damage in ("torn", "not-a-table"):
        assert str(load.problems[0]).startswith(f"{main}:")


def test_cli_on_a_torn_main_gives_the_bak_and_says_so_and_both_torn_is_exit_2(store_copy):
    root = store_copy(STORE)
    main = root / "config" / "consumerOffset.json"
    main.write_bytes(main.read_bytes()[:300])
    r = run_cli("consumers", root, "-f", "jsonl")
    assert r.code == 0, r.err
    bak = ANSWERS["afterCleanShutdown"]["consumerOffsetFiles"]["consumerOffset.json.bak"]["offsetTable"]
    got = {}
    for row in r.jsonl():
        got.setdefault(f"{row['topic']}@{row['group']}", {})[row["queue_id"]] = row["committed_offset"]
        assert row["source"] == "consumerOffset.json.bak"
    assert got == _ints(bak)
    assert "the broker loads consumerOffset.json.bak" in r.err
    bak_file = root / "config" / "consumerOffset.json.bak"
    bak_file.write_bytes(b'{\n\t"offsetTable":{\n\t\t"x@y":{0:1,\n')
    r = run_cli("consumers", root, "-f", "jsonl")
    assert r.code == 2
    lines = [x for x in r.err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {main}:") and "Traceback" not in r.err
    assert len(lines[0].split(":")) >= 4        # error: FILE:LINE:COL: what


# --- the rows against upstream's answers, both views ---------------------------------------------

def _check_view(rows: list[dict], view: dict) -> None:
    by = {(r["group"], r["topic"], r["queue_id"]): r for r in rows}
    assert len(by) == len(rows) == len(view["groups"])
    for g in view["groups"]:
        r = by[(g["group"], g["topic"], g["queueId"])]
        probe = next(p for p in g["probes"] if p["kind"] == "committed")
        want = {"committed_offset": g["committedOffset"], "min_offset": g["getMinOffsetInQueue"],
                "max_offset": g["getMaxOffsetInQueue"],
                "next_store_time": None if g["storeTimeAtCommitted"] == -1 else g["storeTimeAtCommitted"],
                "restart_status": probe["status"], "restart_next_offset": probe["nextBeginOffset"]}
        assert {k: r[k] for k in want} == want, (g["group"], g["topic"], g["queueId"])
        assert g["queryOffset"] == r["committed_offset"]
        assert r["lag"] == max(r["max_offset"] - max(r["committed_offset"], r["min_offset"]), 0)
        assert (r["lag_seconds"] is None) == (r["next_store_time"] is None)


def test_rows_after_a_clean_shutdown_equal_upstreams():
    r = run_cli("consumers", reference_store(STORE), "-f", "jsonl")
    assert r.code == 0, r.err
    _check_view(r.jsonl(), ANSWERS["afterCleanShutdown"])


def test_rows_after_the_readme_crash_equal_upstreams(tmp_path):
    root = tmp_path / "crashed"
    cut = crash_copy(reference_store(STORE), root)
    view = ANSWERS["afterCrash"]
    assert {k: cut[k] for k in ("cutAtPhyOffset", "file", "zeroedFrom", "messagesBeforeCut", "messagesLost")} == \
        {k: view["cut"][k] for k in ("cutAtPhyOffset", "file", "zeroedFrom", "messagesBeforeCut", "messagesLost")}
    r = run_cli("consumers", root, "-f", "jsonl")
    assert r.code == 0, r.err
    _check_view(r.jsonl(), view)


def _committed_probe(g: dict) -> dict:
    return next(p for p in g["probes"] if p["kind"] == "committed")


def _meets(p: dict) -> tuple:
    """What a consumer meets at a probe: the status, and the offset it is moved to unless it reads."""
    return p["status"], None if p["status"] == "FOUND" else p["nextBeginOffset"]


def test_rebuild_plan_forecasts_the_groups_the_crash_moves_as_upstream(tmp_path):
    """A ConsumeQueue rebuild of the README's crash: its walk ends where the broker's recovery ends, so the
    committed offsets whose answer the rebuilt queues change are exactly those whose upstream answer the
    crash changed (the queues on disk are the clean store's), each with upstream's after-crash answer."""
    root = tmp_path / "crashed"
    crash_copy(reference_store(STORE), root)
    r = run_cli("rebuild", "consumequeue", root, "--dry-run", "-f", "json")
    assert r.code == 0, r.err
    clean = {(g["group"], g["topic"], g["queueId"]): g for g in ANSWERS["afterCleanShutdown"]["groups"]}
    want = {}
    for g in ANSWERS["afterCrash"]["groups"]:
        k = (g["group"], g["topic"], g["queueId"])
        before, after = _committed_probe(clean[k]), _committed_probe(g)
        if _meets(before) != _meets(after):
            want[k] = {"committed_offset": g["committedOffset"], "status": before["status"],
                       "min_offset": clean[k]["getMinOffsetInQueue"], "max_offset": clean[k]["getMaxOffsetInQueue"],
                       "rebuilt_status": after["status"], "rebuilt_next_offset": _meets(after)[1],
                       "rebuilt_min_offset": g["getMinOffsetInQueue"], "rebuilt_max_offset": g["getMaxOffsetInQueue"]}
    assert want, "the crash moves no group: the test would prove nothing"
    rows = json.loads(r.out)[0]["consumers"]
    got = {(x["group"], x["topic"], x["queue_id"]): {k: x[k] for k in want[next(iter(want))]} for x in rows}
    assert got == want
    plan = run_cli("rebuild", "consumequeue", root, "--dry-run")
    assert plan.code == 0, plan.err
    groups = sorted({k[0] for k in want})
    assert f"the rebuilt queues change what {len(groups)} groups ({', '.join(groups)}) read at " \
        f"{len(want)} committed offsets:" in plan.out


def test_rebuild_plan_says_nothing_of_consumers_where_nothing_changes_and_has_no_key_without_offsets():
    r = run_cli("rebuild", "consumequeue", reference_store(STORE), "--dry-run", "-f", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)[0]["consumers"] == []
    r = run_cli("rebuild", "consumequeue", reference_store("basic"), "--dry-run", "-f", "json")
    assert r.code == 0, r.err
    assert "consumers" not in json.loads(r.out)[0]


def test_a_rebuild_that_removes_a_queue_forecasts_the_move_to_zero(tmp_path):
    """A queue whose records the CommitLog no longer holds is not rebuilt: the broker then serves the
    empty queue it creates, and a group committed past 0 is moved back to 0."""
    import shutil
    root = tmp_path / "store"
    shutil.copytree(reference_store(STORE), root)
    (root / "consumequeue" / "GhostTopic" / "0").mkdir(parents=True)
    shutil.copy(next((root / "consumequeue" / "PayTopic" / "0").iterdir()),
                root / "consumequeue" / "GhostTopic" / "0" / "00000000000000000000")
    offsets = root / "config" / "consumerOffset.json"
    text = offsets.read_text().replace('"offsetTable":{', '"offsetTable":{\n\t\t"GhostTopic@cg-ghost":{0:7\n\t\t},', 1)
    offsets.write_text(text)
    r = run_cli("rebuild", "consumequeue", root, "--dry-run", "-f", "json")
    assert r.code == 0, r.err
    ghost = [x for x in json.loads(r.out)[0]["consumers"] if x["group"] == "cg-ghost"]
    assert [(x["status"], x["rebuilt_status"], x["rebuilt_next_offset"], x["rebuilt_max_offset"]) for x in ghost] == \
        [("FOUND", "NO_MESSAGE_IN_QUEUE", 0, 0)]
    assert ghost[0]["effect"].startswith("moved back to 0 (7 offsets back)")


def test_every_probe_of_getmessage_equals_upstreams(tmp_path):
    """Not only the committed offset: every probe offset upstream asked (-1, 0, min-1, ..., max+500)."""
    from rmqtool.io.store import Store
    from rmqtool.ops.consumers import ServedQueue, restart_of
    root = tmp_path / "crashed"
    crash_copy(reference_store(STORE), root)
    for path, view in ((reference_store(STORE), "afterCleanShutdown"), (root, "afterCrash")):
        store = Store(path)
        restart = restart_of(store)
        present = {(q.topic, q.queue_id) for q in store.queues()}
        for g in ANSWERS[view]["groups"]:
            sq = ServedQueue(store, g["topic"], g["queueId"], restart, (g["topic"], g["queueId"]) in present)
            for p in g["probes"]:
                got = sq.get_message(p["offset"])
                assert (got["status"], got["next_begin_offset"], got["min_offset"], got["max_offset"],
                        got["message_count"]) == (p["status"], p["nextBeginOffset"], p["minOffset"],
                                                  p["maxOffset"], p["messageCount"]), (view, g["group"], p)
            sq.close()


@pytest.mark.parametrize("name", ["consumers", "basic", "crashed", "mixed"])
def test_restart_of_is_the_recovery_walks_mode_and_valid_end(tmp_path, name):
    """``restart_of`` (one ``start_and_end``) gives the mode and valid end ``recovery_walk`` gives, in
    both modes (the store as it is, and with its abort file added or removed)."""
    import shutil
    from rmqtool.broker.recovery import max_cq_phy_offset
    from rmqtool.io.store import Store
    from rmqtool.ops.consumers import restart_of
    from rmqtool.ops.verify.forecast import recovery_walk
    root = tmp_path / name
    shutil.copytree(reference_store(name), root)
    modes = set()
    for _ in range(2):
        store = Store(root)
        walk = recovery_walk(store, max_cq_phy_offset(store))
        got = restart_of(store)
        assert (got.mode, got.valid_end) == (walk["mode"], int(walk["valid_end"]))
        assert (got.commitlog_min, got.commitlog_file_size) == (store.commitlog.min_offset, store.commitlog.file_size)
        modes.add(got.mode)
        abort = root / "abort"
        if abort.exists():
            abort.unlink()
        else:
            abort.write_bytes(b"")
    assert modes == {"normal", "abnormal"}


@pytest.mark.parametrize("name", ["consumers", "crashed", "mixed"])
def test_served_units_are_the_queue_readers_units(name):
    """``ServedQueue.units_array`` (from ``QueueView``'s files) holds the units and queue offsets
    ``io.consumequeue.read_units`` reads up to each queue's logical end."""
    import numpy as np
    from rmqtool.io.consumequeue import read_units
    from rmqtool.io.store import Store
    from rmqtool.ops.consumers import ServedQueue
    store = Store(reference_store(name))
    for ref in store.queues():
        sq = ServedQueue(store, ref.topic, ref.queue_id, None)
        try:
            qoff, units = sq.units_array()
            want = read_units(ref.topic, ref.queue_id, store.queue(ref.topic, ref.queue_id))
            assert np.array_equal(qoff, want.queue_offset) and np.array_equal(units, want.units), ref
            assert sq.units_array()[0] is qoff                   # built once
        finally:
            sq.close()


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "tsv"])
def test_every_format_and_filters(fmt):
    r = run_cli("consumers", reference_store(STORE), "-f", fmt, "--group", "cg-pay-ahead", "--topic", "PayTopic")
    assert r.code == 0, r.err
    assert "cg-pay-ahead" in r.out and "cg-order-mid" not in r.out
    assert "group cg-pay-ahead" in r.err


@pytest.fixture
def zone(monkeypatch):
    """Set this process's local time zone (the broker's deleteWhen hours are its JVM's local time)."""
    import time

    def set_zone(name: str):
        monkeypatch.setenv("TZ", name)
        time.tzset()
    yield set_zone
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("name, hours", [("UTC", 0), ("Asia/Shanghai", 8), ("America/Sao_Paulo", -3)])
def test_deletion_hours_are_local_time(zone, name, hours):
    # 04 local on the day the file expires, or the next day's 04 when it expires later than 04:59
    zone(name)
    day = 1_700_006_400_000 - hours * 3_600_000          # 2023-11-15T00:00 local
    assert deletion_time(day + 3 * 3_600_000) == day + 4 * 3_600_000
    assert deletion_time(day + 4 * 3_600_000 + 5) == day + 4 * 3_600_000 + 5
    assert deletion_time(day + 5 * 3_600_000) == day + 28 * 3_600_000
    assert deletion_time(day + 5 * 3_600_000, "04;10") == day + 10 * 3_600_000
    assert deletion_time(day + 23 * 3_600_000, "02") == day + 26 * 3_600_000


def test_deletion_hours_across_a_daylight_saving_change(zone):
    zone("Europe/Berlin")                                  # 2024-03-31: 02:00 CET -> 03:00 CEST
    before = 1_711_839_600_000                             # 2024-03-31T00:00+01:00
    # 06:00 CEST is past 04:59: the next day's 04:00 CEST, 27 hours after midnight CET
    assert deletion_time(before + 5 * 3_600_000) == before + 27 * 3_600_000 == 1_711_936_800_000
    assert deletion_time(before, "04") == before + 3 * 3_600_000    # 04 CEST is 3 hours after midnight CET


def test_retention_forecast():
    r = run_cli("consumers", reference_store(STORE), "-f", "jsonl", "--group", "cg-order-fresh")
    for row in r.jsonl():
        files = sorted(p.name for p in (reference_store(STORE) / "commitlog").iterdir())
        assert row["retention_file"] == files[0]         # queue offset 0 is in the first file
        mtime = int(os.stat(reference_store(STORE) / "commitlog" / files[0]).st_mtime * 1000)
        assert row["retention_deleted_at"] == deletion_time(mtime + 72 * 3_600_000)
        assert 0 < row["retention_loses"] <= row["lag"]


def test_cli_cleanup_defaults_are_the_brokers():
    """``consumers``' --file-reserved-hours and --delete-when default to the CleanCommitLogService
    defaults ``ops.consumers`` holds (the CLI keeps its own copy so its module loads no numpy)."""
    import inspect
    from rmqtool.cli.cmd_consumers import consumers_command
    from rmqtool.ops.consumers import DELETE_WHEN, FILE_RESERVED_HOURS
    params = inspect.signature(consumers_command).parameters
    assert params["file_reserved_hours"].default.default == FILE_RESERVED_HOURS
    assert params["delete_when"].default.default == DELETE_WHEN


# --- reset-offsets --------------------------------------------------------------------------------

def test_reset_to_time_equals_query_queue_time_per_queue_and_execute_writes_it(store_copy):
    root = store_copy(STORE)
    before = {p.name: p.read_bytes() for p in (root / "config").iterdir()}
    t = ANSWERS["afterCleanShutdown"]["groups"][8]["storeTimeAtCommitted"] + 400
    dry = run_cli("reset-offsets", root, "--group", "cg-order-mid", "--to-time", t, "-f", "jsonl")
    assert dry.code == 0, dry.err
    assert {p.name: p.read_bytes() for p in (root / "config").iterdir()} == before    # a dry run writes nothing
    rows = dry.jsonl()
    assert len(rows) == 4
    for row in rows:
        q = run_cli("query-queue", root, "--topic", row["topic"], "--queue", row["queue_id"], "--time", t,
                    "-f", "jsonl")
        assert q.jsonl()[0]["queue_offset"] == row["new_offset"]
    done = run_cli("reset-offsets", root, "--group", "cg-order-mid", "--to-time", t, "--execute")
    assert done.code == 0, done.err
    cfg = root / "config"
    assert (cfg / "consumerOffset.json.bak").read_bytes() == before["consumerOffset.json"]
    kept = sorted(p.name for p in cfg.iterdir() if ".backup-" in p.name)
    assert len(kept) == 2                      # the old main and the old .bak, dated
    after = run_cli("consumers", root, "-f", "jsonl", "--group", "cg-order-mid").jsonl()
    assert {(r["queue_id"], r["committed_offset"]) for r in after} == {(r["queue_id"], r["new_offset"]) for r in rows}
    others = run_cli("consumers", root, "-f", "jsonl").jsonl()
    untouched = [r for r in others if r["group"] != "cg-order-mid"]
    assert len(untouched) == 23
    # the bytes are fastjson's layout: tab indentation, unquoted integer keys, nothing else changed
    text = (cfg / "consumerOffset.json").read_text()
    assert dumps(parse(text)) == text and "\t\t\"OrderTopic@cg-order-mid\":{0:" in text


@pytest.mark.parametrize("how,want", [(["--to-earliest"], lambda r: r["min_offset"]),
                                      (["--to-latest"], lambda r: r["max_offset"]),
                                      (["--to-offset", 5], lambda r: min(max(5, r["min_offset"]), r["max_offset"])),
                                      (["--shift-by", -3], lambda r: max(r["old_offset"] - 3, r["min_offset"]))])
def test_reset_modes(how, want):
    r = run_cli("reset-offsets", reference_store(STORE), "--group", "cg-pay-done", *how, "-f", "jsonl")
    assert r.code == 0, r.err
    for row in r.jsonl():
        assert row["new_offset"] == want(row)


def test_execute_starts_from_the_file_the_broker_loads(store_copy):
    """A main file that parses but is no offset table: the broker (and the plan) load the .bak, so
    the written file is the .bak's table with the plan's offsets; the old main becomes the .bak."""
    root = store_copy(STORE)
    cfg = root / "config"
    (cfg / "consumerOffset.json").write_text('{"offsetTable":[1,2]}')
    bak = parse((cfg / "consumerOffset.json.bak").read_text())
    done = run_cli("reset-offsets", root, "--group", "cg-order-mid", "--to-earliest", "--execute", "-f", "jsonl")
    assert done.code == 0, done.err
    rows = done.jsonl()
    want = bak["offsetTable"]
    for r in rows:
        want.setdefault(f"{r['topic']}@{r['group']}", {})[r["queue_id"]] = r["new_offset"]
    assert parse((cfg / "consumerOffset.json").read_text())["offsetTable"] == want
    assert (cfg / "consumerOffset.json.bak").read_text() == '{"offsetTable":[1,2]}'


def test_reset_needs_one_mode():
    r = run_cli("reset-offsets", reference_store(STORE), "--group", "cg-pay-done")
    assert r.code == 2
    r = run_cli("reset-offsets", reference_store(STORE), "--group", "cg-pay-done", "--to-latest", "--to-earliest")
    assert r.code == 2


LOCKER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
    print("locked", flush=True)
    time.sleep(60)
""")


def test_execute_is_refused_while_a_broker_holds_the_lock(store_copy):
    root = store_copy(STORE)
    before = {p.name: p.read_bytes() for p in (root / "config").iterdir()}
    holder = subprocess.Popen([sys.executable, "-c", LOCKER, str(root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = run_cli("reset-offsets", root, "--group", "cg-pay-done", "--to-earliest", "--execute")
        assert r.code == 3 and "lock" in r.err
    finally:
        holder.kill()
        holder.wait()
    assert {p.name: p.read_bytes() for p in (root / "config").iterdir()} == before


def test_kill_9_at_any_instant_leaves_the_old_or_the_new_file(tmp_path):
    pristine = reference_store(STORE)
    args = lambda root: ["reset-offsets", root, "--group", "cg-pay-done", "--to-earliest", "--execute"]
    probe = tmp_path / "probe"
    subprocess.run(["cp", "-a", str(pristine), str(probe)], check=True)
    old = (pristine / "config" / "consumerOffset.json").read_bytes()
    state = tmp_path / "pause-state"
    calls = pause_at.io_calls(args(probe), state)
    new = (probe / "config" / "consumerOffset.json").read_bytes()
    assert new != old
    for at in range(1, calls + 1):
        root = tmp_path / f"r{at}"
        subprocess.run(["cp", "-a", str(pristine), str(root)], check=True)
        proc, where = pause_at.start_paused(args(root), at, state, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        now = (root / "config" / "consumerOffset.json").read_bytes()
        assert now in (old, new), f"I/O call {at} of {calls} ({where}): a torn consumerOffset.json"
        bak = (root / "config" / "consumerOffset.json.bak").read_bytes()
        assert bak in (old, (pristine / "config" / "consumerOffset.json.bak").read_bytes())
        # a re-run finishes the job, whatever the kill left
        r = subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args(root))], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert (root / "config" / "consumerOffset.json").read_bytes() == new


def test_a_store_without_committed_offsets_says_so():
    """No consumerOffset.json (nor the LMQ file): no rows, exit 0, and one note naming the files."""
    r = run_cli("consumers", reference_store("basic"), "-f", "json")
    assert r.code == 0 and json.loads(r.out) == []
    assert "no committed offsets: the store has neither config/consumerOffset.json" in r.err
    assert "no committed offsets" not in run_cli("consumers", reference_store("consumers"), "-f", "json").err


@pytest.mark.parametrize("commitlog_min, want", [(0, 0), (1, 3), (100, 3)])
def test_a_rebuilt_queues_min_is_the_brokers_first_served_unit(commitlog_min, want):
    """Leading filler units point at CommitLog offset 0: served while the CommitLog starts at 0
    (``correctMinOffset``), not once its first files are gone."""
    import numpy as np
    from rmqtool.broker.dispatch import QueueLayout
    layout = QueueLayout("T", 0, 800)
    layout.add(np.array([3, 4]), np.array([100, 200]), np.array([10, 10]), np.array([0, 0]))
    assert (layout.served_min(commitlog_min), layout.max_offset) == (want, 5)
