"""`query-delayed` and `query-transactions`: the work the broker keeps in its own queues.

query-delayed against upstream's answers for the `consumers` reference store (its ScheduleMessageService
loaded and clamped delayOffset.json: `delayOffsets.scheduleMessageServiceLoad`, `levels[]`), after a
clean reopen and after the README's crash (tests/consumers_crash.py). query-transactions against the
`mixed` reference store (5.x half and op messages written by upstream; the halves and the op bodies
taken from upstream's answers and put log, not from rmqtool's decoder) and against stores written with
`rmqtool write` for the cases the reference lacks (a committed check offset, batched op bodies, check
times, a re-put half, an op without the `d` tag)."""
from __future__ import annotations

import hashlib
import json
import time

import pytest

from conftest import load_answers, reference_store, run_cli
from consumers_crash import crash_copy
from formats.fastjson import dumps
from rmqtool.broker.transactions import op_half_offsets

ANSWERS = load_answers("consumers")["consumers"]


# --- query-delayed ----------------------------------------------------------------------------------

def _check_delayed(root, view: dict) -> None:
    r = run_cli("query-delayed", root, "-f", "jsonl")
    assert r.code == 0, r.err
    rows = r.jsonl()
    load = view["delayOffsets"]["scheduleMessageServiceLoad"]
    assert load["result"] is True
    by_level: dict = {}
    for row in rows:
        by_level.setdefault(row["delay_level"], []).append(row)
    for lv in view["delayOffsets"]["levels"]:
        level = lv["level"]
        assert lv["queueId"] == level - 1
        assert lv["offsetAfterLoad"] == load["offsetTable"][str(level)]
        got = by_level.get(level, [])
        # the acceptance: per level, the schedule queue's max minus the offset the service loads
        assert len(got) == lv["getMaxOffsetInQueue"] - lv["offsetAfterLoad"], level
        assert [x["queue_offset"] for x in got] == list(range(lv["offsetAfterLoad"], lv["getMaxOffsetInQueue"]))
        # the first waiting unit's due time is what the service schedules next
        assert (got[0]["due_ms"] if got else None) == lv["nextDeliverTimestamp"], level
        for x in got:
            assert x["due_ms"] == x["store_timestamp"] + lv["delayMillis"]
            assert x["real_topic"] and x["real_queue_id"] is not None and x["note"] is None
    assert set(by_level) <= {lv["level"] for lv in view["delayOffsets"]["levels"]}


def test_delayed_after_a_clean_shutdown_equal_upstreams():
    _check_delayed(reference_store("consumers"), ANSWERS["afterCleanShutdown"])


def test_delayed_after_the_readme_crash_equal_upstreams(tmp_path):
    root = tmp_path / "crashed"
    crash_copy(reference_store("consumers"), root)
    _check_delayed(root, ANSWERS["afterCrash"])
    r = run_cli("query-delayed", root, "-f", "jsonl")
    # level 3: the file says 8, the queue now ends at 2: the broker clamps it (and says so here)
    assert "level 3: queue 2 [0, 2), resumes at 2 (delayOffset.json says 8" in r.err


def test_delayed_rows_name_the_messages_upstream_wrote():
    """Each row's record is the one upstream's answers list at that schedule queue offset."""
    msgs = {m["phyOffset"]: m for m in load_answers("consumers")["messages"]}
    rows = run_cli("query-delayed", reference_store("consumers"), "-f", "jsonl").jsonl()
    assert rows
    for row in rows:
        m = msgs[row["phy_offset"]]
        assert (m["topic"], m["queueId"], m["queueOffset"]) == ("SCHEDULE_TOPIC_XXXX", row["delay_level"] - 1,
                                                                row["queue_offset"])
        assert (row["real_topic"], str(row["real_queue_id"])) == (m["properties"]["REAL_TOPIC"],
                                                                  m["properties"]["REAL_QID"])
        assert (row["keys"], row["uniq_key"], row["store_timestamp"]) == (m["keys"], m["uniqKey"],
                                                                          m["storeTimestamp"])
        assert row["due_ms"] == m["tagsCode"]


def test_delayed_topic_filter_limit_and_every_format():
    root = reference_store("consumers")
    every = run_cli("query-delayed", root, "-f", "jsonl").jsonl()
    pay = run_cli("query-delayed", root, "-f", "jsonl", "--topic", "PayTopic").jsonl()
    assert pay == [r for r in every if r["real_topic"] == "PayTopic"] and 0 < len(pay) < len(every)
    assert run_cli("query-delayed", root, "-f", "jsonl", "-n", "3").jsonl() == every[:3]
    assert run_cli("query-delayed", root, "--limit", "0").code == 2
    for fmt in ("table", "json", "csv", "tsv"):
        r = run_cli("query-delayed", root, "-f", fmt, "--topic", "LogTopic")
        assert r.code == 0, r.err
        assert "LogTopic" in r.out and "PayTopic" not in r.out
    assert run_cli("query-delayed", root, "--topic", "NoSuchTopic").code == 1


def test_delayed_on_a_torn_delay_offset_file_takes_the_bak_and_says_so(store_copy):
    root = store_copy("consumers")
    main = root / "config" / "delayOffset.json"
    main.write_bytes(main.read_bytes()[:40])
    r = run_cli("query-delayed", root, "-f", "jsonl")
    assert r.code == 0, r.err
    assert "the broker loads delayOffset.json.bak" in r.err
    # the .bak holds the same table (answers: delayOffsets), so the rows are those of the clean view
    assert r.jsonl() == run_cli("query-delayed", reference_store("consumers"), "-f", "jsonl").jsonl()
    (root / "config" / "delayOffset.json.bak").write_bytes(b'{\n\t"offsetTable":{1:\n')
    r = run_cli("query-delayed", root)
    assert r.code == 2 and r.err.count("error:") == 1 and "Traceback" not in r.err


# --- query-transactions: the mixed reference store ----------------------------------------------------

def _mixed_pending() -> list[dict]:
    """Upstream's half messages of `mixed` whose queue offset no op message names; the op bodies are
    known by their SHA-1 in the answers (each names one offset: its decimal text)."""
    msgs = load_answers("mixed")["messages"]
    halves = [m for m in msgs if m["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"]
    ops = [m for m in msgs if m["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
    assert halves and ops
    by_sha = {hashlib.sha1(str(n).encode()).hexdigest(): n for n in range(1000)}
    named = set()
    for op in ops:
        assert op["tags"] == "d" and op["bodySha1"] in by_sha
        named.add(by_sha[op["bodySha1"]])
    return [m for m in halves if m["queueOffset"] not in named]


def test_transactions_on_mixed_are_the_halves_no_op_names():
    want = _mixed_pending()
    assert 0 < len(want) < 5
    before = time.time() * 1000
    r = run_cli("query-transactions", reference_store("mixed"), "-f", "jsonl")
    assert r.code == 0, r.err
    rows = r.jsonl()
    assert [(x["queue_id"], x["queue_offset"], x["phy_offset"]) for x in rows] == \
        [(m["queueId"], m["queueOffset"], m["phyOffset"]) for m in want]
    puts = {p["wroteOffset"]: p for p in load_answers("mixed.putlog")["puts"] if p["note"] == "tx half (5.x)"}
    for x, m in zip(rows, want):
        props = m["properties"]
        assert (x["real_topic"], str(x["real_queue_id"]), x["producer_group"], x["keys"]) == \
            (props["REAL_TOPIC"], props["REAL_QID"], props["PGROUP"], m["keys"])
        assert (x["uniq_key"], x["store_timestamp"]) == (puts[x["phy_offset"]]["uniqKey"],
                                                         puts[x["phy_offset"]]["storeTimestamp"])
        assert x["check_times"] == 0 and x["prepared_queue_offset"] is None
        assert before / 1000 - 5 <= x["age_seconds"] + x["store_timestamp"] / 1000 <= time.time() + 5
    assert "no committed offset of CID_RMQ_SYS_TRANS" in r.err
    at = run_cli("query-transactions", reference_store("mixed"), "-f", "jsonl", "--at", "2026-11-26T00:00:00Z")
    assert [x["age_seconds"] for x in at.jsonl()] == [(1_795_651_200_000 - x["store_timestamp"]) / 1000 for x in rows]


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "tsv"])
def test_transactions_every_format(fmt):
    r = run_cli("query-transactions", reference_store("mixed"), "-f", fmt)
    assert r.code == 0, r.err
    assert "txProducerGroup" in r.out


def test_no_half_queue_is_exit_1():
    r = run_cli("query-transactions", reference_store("basic"), "-f", "jsonl")
    assert r.code == 1 and r.out == ""


# --- query-transactions: stores written with `rmqtool write` -------------------------------------------

def _half(n: int, queue_id: int = 0, **props) -> dict:
    return {"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "queue_id": queue_id, "body": f"half {n}",
            "store_timestamp": 1_795_000_000_000 + n,
            "properties": {"REAL_TOPIC": "TxTopic" if n % 2 else "OtherTx", "REAL_QID": str(n % 4),
                           "PGROUP": "pg", "TRAN_MSG": "true", "KEYS": f"h-{queue_id}-{n}",
                           "UNIQ_KEY": f"AC11000100002A9F00000000000000{queue_id}{n}", **props}}


def _op(body: str, tag: str = "d", queue_id: int = 0) -> dict:
    return {"topic": "RMQ_SYS_TRANS_OP_HALF_TOPIC", "queue_id": queue_id, "body": body,
            "store_timestamp": 1_795_000_001_000, "properties": {"TAGS": tag, "WAIT": "true"}}


def _write(tmp_path, rows: list[dict], offsets: dict | None = None):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "store"
    r = run_cli("write", root, "--from", src)
    assert r.code == 0, r.err
    if offsets is not None:
        (root / "config").mkdir(exist_ok=True)
        (root / "config" / "consumerOffset.json").write_text(dumps({"offsetTable": offsets}))
    return root


def test_transactions_follow_the_check_offset_batched_ops_and_re_put_halves(tmp_path):
    rows = [_half(0), _half(1), _half(2, TRANSACTION_CHECK_TIMES="2"), _half(3),
            _half(4, TRAN_PREPARED_QUEUE_OFFSET="0"), _half(5), _half(0, queue_id=1),
            _op("1,3,"),                 # a batched op body (deletePrepareMessage's "offset," pieces)
            _op("0"),                    # names the half h4 was re-put for
            _op("5", tag="x")]           # not the "d" tag: the broker ignores it
    root = _write(tmp_path, rows, {"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS": {0: 1},
                                   "RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS": {0: 0}})
    r = run_cli("query-transactions", root, "-f", "jsonl")
    assert r.code == 0, r.err
    got = [(x["queue_id"], x["queue_offset"], x["check_times"], x["keys"]) for x in r.jsonl()]
    # h0: below the check group's committed offset; h1, h3: named by the batched op; h4: its
    # original offset 0 is named; h5: only an op without the "d" tag names it
    assert got == [(0, 2, 2, "h-0-2"), (0, 5, 0, "h-0-5"), (1, 0, 0, "h-1-0")]
    assert "the check resumes at 1 (committed offset 1)" in r.err
    only = run_cli("query-transactions", root, "-f", "jsonl", "--topic", "TxTopic").jsonl()
    assert [x["queue_offset"] for x in only] == [5]
    assert len(run_cli("query-transactions", root, "-f", "jsonl", "-n", "1").jsonl()) == 1


def test_a_committed_offset_past_the_queue_leaves_nothing_and_below_min_starts_at_min(tmp_path):
    root = _write(tmp_path, [_half(0), _half(1)], {"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS": {0: 50}})
    r = run_cli("query-transactions", root, "-f", "jsonl")
    assert r.code == 1 and "the check resumes at 2 (committed offset 50)" in r.err


def test_op_body_split_is_java_string_split_and_long_parse():
    assert op_half_offsets("1,2,3,") == [1, 2, 3]
    assert op_half_offsets("7") == [7]
    assert op_half_offsets("x,4") == [-1, 4]
    assert op_half_offsets(",5") == [-1, 5]
    assert op_half_offsets(None) == []


# --- info: the groups the restart moves (ops/consumers.restart_moves) ---------------------------------

@pytest.mark.parametrize("command", ["info", "verify"])
@pytest.mark.parametrize("view", ["afterCleanShutdown", "afterCrash"])
def test_info_and_verify_list_the_queues_whose_committed_offset_the_restart_moves(tmp_path, view, command):
    """info (its ``consumer_restart``) and verify (its forecast's) name the same moves: upstream's
    getMessage at the committed offset, after the restart each view describes."""
    root = reference_store("consumers")
    if view == "afterCrash":
        root = tmp_path / "crashed"
        crash_copy(reference_store("consumers"), root)
    want = []
    for g in ANSWERS[view]["groups"]:
        probe = next(p for p in g["probes"] if p["kind"] == "committed")
        if probe["status"] != "FOUND" and probe["nextBeginOffset"] != g["committedOffset"]:
            want.append((g["group"], g["topic"], g["queueId"], g["committedOffset"], probe["status"],
                         probe["nextBeginOffset"]))
    assert want
    r = run_cli(command, root, "-f", "json")
    assert r.code in ((0,) if command == "info" else (0, 1)), r.err
    doc = json.loads(r.out)
    moves = doc[0]["consumer_restart"] if command == "info" else doc["forecast"]["consumer_restart"]
    got = [(m["group"], m["topic"], m["queue_id"], m["committed_offset"], m["restart_status"],
            m["restart_next_offset"]) for m in moves]
    assert sorted(got) == sorted(want)
    text = run_cli(command, root)
    assert f"the next restart moves {len(want)} queue" in text.out + text.err


def test_info_and_verify_have_no_consumer_section_without_an_offsets_file():
    r = run_cli("info", reference_store("mixed"), "-f", "json")
    assert r.code == 0 and "consumer_restart" not in json.loads(r.out)[0]
    r = run_cli("verify", reference_store("mixed"), "-f", "json")
    assert "consumer_restart" not in json.loads(r.out)["forecast"]
