"""verify on the upstream reference stores: clean stores are clean, the crashed store's forecast
matches upstream's own recovery, nothing is ever written, the CLI's exit codes and formats."""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, load_answers, reference_store
from formats import commitlog as cl
from rmqtool.cli import app
from rmqtool.errors import RmqError
from rmqtool.io.store import Store
from rmqtool.ops.verify import CHECKS, VerifyOptions, verify

runner = CliRunner()


class Result:
    def __init__(self, res):
        self.stdout = res.stdout
        self.output = res.output           # stdout and stderr, as a terminal shows them
        # RmqError reaches the one error boundary (run_app) in real use: take its exit code
        self.exit_code = res.exception.exit_code if isinstance(res.exception, RmqError) else res.exit_code
        if res.exception is not None and not isinstance(res.exception, (RmqError, SystemExit)):
            raise res.exception


def run_cli(*args):
    return Result(runner.invoke(app, ["verify", *map(str, args)]))


@pytest.mark.parametrize("name", ["basic", "mixed"])
@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_upstream_clean_stores_verify_clean(name, level):
    rep = verify(Store(reference_store(name)), VerifyOptions(level=level))
    bad = [(f.check, f.file, f.offset, f.message) for f in rep.findings if f.severity != "info"]
    assert bad == []
    assert rep.exit_code() == 0 and rep.exit_code("warning") == 0
    answers = load_answers(name)
    assert rep.summary["commitlog"]["records"] == answers["commitlog"]["messageCount"]
    assert rep.forecast["valid_end"] == answers["commitlog"]["maxPhyOffset"]
    assert rep.forecast["not_dispatched_count"] == 0 and rep.forecast["commitlog_files_deleted"] == [
        f["name"] for f in answers["files"] if False]
    assert rep.summary["consumequeue"]["units"] == sum(len(q["entries"]) for q in answers["consumeQueues"])


def test_crashed_forecast_matches_upstream_recovery():
    answers = load_answers("crashed")
    rec = answers["recovery"]
    rep = verify(Store(reference_store("crashed")), VerifyOptions(level="deep"))
    fc = rep.forecast
    assert rep.exit_code() == 0
    assert fc["mode"] == "abnormal" and fc["abort_present"] is rec["abortFilePresent"]
    assert fc["valid_end"] == rec["afterRecovery"]["maxPhyOffset"] == 2349532
    assert fc["index_files_deleted"] == rec["indexFilesDeletedByRecovery"]
    assert fc["commitlog_files_deleted"] == rec["commitlogFilesDeletedByRecovery"]
    assert fc["dispatch_from"] == rec["maxPhyOffsetInConsumeQueueBefore"]
    # upstream logged which file its recovery started from
    logged = [re.search(r"recover from this mapped file .*/(\d{20})", line) for line in rec["upstreamLog"]]
    assert fc["start_file"] == next(m.group(1) for m in logged if m)
    assert fc["consume_queues_truncated"] == []
    # the messages that were in the CommitLog but not dispatched: past the CQs' max offset
    lag = [m for m in answers["messages"] if m["phyOffset"] >= rec["maxPhyOffsetInConsumeQueueBefore"]
           and m["transactionType"] in (cl.TRANSACTION_NOT_TYPE, cl.TRANSACTION_COMMIT_TYPE)]
    assert len(lag) > 0
    assert [(r["phy_offset"], r["topic"], r["queue_id"], r["queue_offset"]) for r in fc["not_dispatched"]] == [
        (m["phyOffset"], m["topic"], m["queueId"], m["queueOffset"]) for m in lag]
    before = {(q["topic"], q["queueId"]): q["maxOffsetInQueue"] for q in rec["consumeQueuesBefore"]}
    for r in fc["not_dispatched"]:
        assert r["queue_offset"] >= before[(r["topic"], r["queue_id"])]
    # not indexed: every lagging record with keys, plus the frontier record whose keys were cut off
    assert {r["phy_offset"] for r in fc["not_indexed"]} >= {m["phyOffset"] for m in lag if m["keys"] or m["uniqKey"]}
    assert fc["not_indexed_count"] == len(fc["not_indexed"])


def _checksums(root: Path) -> dict:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            st = p.stat()
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("name", ["crashed", "mixed"])
def test_verify_never_writes(name, store_copy):
    root = store_copy(name)
    before = _checksums(root)
    listing = sorted(os.listdir(root))
    for level in ("shallow", "deep"):
        for fmt in ("table", "json", "jsonl"):
            run_cli(root, "--level", level, "--format", fmt)
    assert _checksums(root) == before
    assert sorted(os.listdir(root)) == listing


def test_cli_json_report_and_exit_codes(store_copy):
    res = run_cli(reference_store("basic"), "--level", "deep", "--format", "json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 0 and doc["level"] == "deep"
    assert set(doc["summary"]) >= {"commitlog", "consumequeue", "index", "checkpoint", "findings"}
    assert doc["forecast"]["valid_end"] == 3728338
    # a corrupt store: exit 1, findings in jsonl with every field
    root = store_copy("basic")
    m = load_answers("basic")["messages"][100]
    base = m["phyOffset"] // 98304 * 98304
    with open(root / "commitlog" / f"{base:020d}", "r+b") as fh:
        fh.seek(m["phyOffset"] - base + cl.MESSAGE_HEAD_OFFSETS["magic"])
        fh.write(struct.pack(">I", 0xDEADBEEF))
    res = run_cli(root, "--format", "jsonl")
    assert res.exit_code == 1
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    findings = [x for x in lines if x["type"] == "finding"]
    assert {"severity", "check", "file", "offset", "message", "excerpt"} <= set(findings[0])
    magic = [f for f in findings if f["check"] == "commitlog.magic"]
    assert magic and magic[0]["offset"] == m["phyOffset"] - base and "deadbeef" in magic[0]["excerpt"]
    assert lines[-2]["type"] == "summary" and lines[-1]["type"] == "forecast"
    # --only checkpoint does not report the commitlog finding
    assert run_cli(root, "--only", "checkpoint").exit_code == 0
    assert run_cli(root, "--only", "index,commitlog").exit_code == 1


def test_cli_usage_errors_exit_2(tmp_path):
    assert run_cli(reference_store("basic"), "--level", "deeper").exit_code == 2
    assert run_cli(reference_store("basic"), "--only", "nothing").exit_code == 2
    assert run_cli(reference_store("basic"), "--queue", "1").exit_code == 2
    assert run_cli(tmp_path / "missing").exit_code == 2
    assert run_cli(reference_store("basic"), "--fail-on", "info").exit_code == 2


def test_topic_and_queue_filter():
    rep = verify(Store(reference_store("crashed")), VerifyOptions(level="deep", topic="OrderTopic", queue_id=1))
    assert rep.summary["consumequeue"]["queues"] == 1
    nd = rep.forecast["not_dispatched"]
    assert nd and all(r["topic"] == "OrderTopic" and r["queue_id"] == 1 for r in nd)


def test_table_output_names_the_forecast():
    res = run_cli(reference_store("crashed"), "--level", "deep")
    assert res.exit_code == 0
    assert "valid end of the CommitLog: 2349532" in res.output       # stdout not a terminal: the text on stderr
    assert "20261121131340681" in res.output and "not dispatched" in res.output
    assert "recovery forecast" not in res.stdout


def test_every_check_is_documented():
    catalogue = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")
    missing = [name for name in CHECKS if f"`{name}`" not in catalogue]
    assert missing == []


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_replayed_valid_end_equals_the_broker_walk(name):
    """Deep verify derives the valid end from its own walk; it must equal recovery.valid_end."""
    from rmqtool.broker.recovery import recovery_start, valid_end
    store = Store(reference_store(name))
    rep = verify(store, VerifyOptions(level="deep"))
    start = recovery_start(store)
    end, stop, messages = valid_end(store, start)
    assert (rep.forecast["valid_end"], rep.forecast["end_kind"], rep.forecast["messages_walked_from_start"]) == (
        end, stop.kind, messages)
    assert rep.forecast["valid_end"] == verify(store, VerifyOptions(level="shallow")).forecast["valid_end"]


def test_bad_crc_after_the_start_file_moves_the_valid_end(store_copy):
    root = store_copy("crashed")
    m = next(m for m in load_answers("crashed")["messages"] if m["phyOffset"] > 1_500_000 and m["bodyLength"] > 10)
    base = m["phyOffset"] // 98304 * 98304
    path = root / "commitlog" / f"{base:020d}"
    at = m["phyOffset"] - base + cl.body_position(m["sysFlag"]) + 3
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 1]))
    deep = verify(Store(root), VerifyOptions(level="deep")).forecast
    shallow = verify(Store(root), VerifyOptions(level="shallow")).forecast
    assert deep["valid_end"] == shallow["valid_end"] == m["phyOffset"]
    assert deep["end_kind"] == shallow["end_kind"] == "corrupt"
    # everything after it would be deleted or truncated
    assert deep["commitlog_files_deleted"][0] == f"{base + 98304:020d}"
    assert deep["consume_queues_truncated"]


def test_live_store_tail_is_not_an_error(store_copy):
    """A broker holding the lock (another process) and a half-written last record: info, exit 0."""
    import subprocess
    import sys
    import time
    root = store_copy("crashed")
    last = load_answers("crashed")["messages"][-1]
    base = last["phyOffset"] // 98304 * 98304
    with open(root / "commitlog" / f"{base:020d}", "r+b") as fh:
        fh.seek(last["phyOffset"] - base + 60)
        fh.write(bytes(last["size"] - 60))
    holder = subprocess.Popen([sys.executable, "-c",
                               "import fcntl,sys,time; f=open(sys.argv[1],'r+b'); fcntl.lockf(f, fcntl.LOCK_EX, 1, 0); "
                               "print('locked', flush=True); time.sleep(60)", str(root / "lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        rep = verify(Store(root), VerifyOptions(level="deep"))
    finally:
        holder.kill()
        holder.wait()
    assert rep.summary["live"] is True
    tail = [f for f in rep.findings if f.check == "commitlog.live-tail"]
    assert tail, [(f.check, f.severity, f.offset) for f in rep.findings]
    assert tail[0].severity == "info" and tail[0].offset == last["phyOffset"] - base
    assert rep.exit_code() == 0, [(f.check, f.severity, f.message) for f in rep.findings if f.severity == "error"]


def test_the_records_a_restart_loses_are_listed_with_what_names_them(store_copy):
    """issue 18: every record past the forecast valid end, with topic, queue, queue offset, keys,
    UNIQ_KEY, offsetMsgId and store time (jsonl: one line each)."""
    import json as _json
    import subprocess
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from corruptions import FILE_SIZE, clfile, messages_in_file, patch
    root = store_copy("basic")
    last = len(load_answers("basic")["commitlog"]["files"]) - 1
    msgs = messages_in_file("basic", last)
    bad = msgs[len(msgs) // 2]                     # in the newest file: the normal recovery walks it
    patch(clfile(root, last * FILE_SIZE), bad["phyOffset"] - last * FILE_SIZE + 4, b"\x12\x34\x56\x78")
    after = [m for m in load_answers("basic")["messages"] if m["phyOffset"] > bad["phyOffset"]]
    p = subprocess.run([sys.executable, "-m", "rmqtool", "verify", str(root), "--level", "deep", "-f", "jsonl"],
                       capture_output=True, text=True)
    lines = [_json.loads(line) for line in p.stdout.split("\n") if line]
    fc = next(x for x in lines if x["type"] == "forecast")
    lost = [x for x in lines if x["type"] == "lost"]
    assert fc["valid_end"] == bad["phyOffset"] and fc["lost_count"] == len(after) == len(lost)
    by_offset = {m["phyOffset"]: m for m in after}
    for x in lost:
        m = by_offset[x["phy_offset"]]
        assert (x["topic"], x["queue_id"], x["queue_offset"], x["uniq_key"], x["store_timestamp"]) == \
            (m["topic"], m["queueId"], m["queueOffset"], m["uniqKey"], m["storeTimestamp"])
        assert x["keys"] == m["keys"] and x["offset_msg_id"] == m["offsetMsgId"]


def test_info_counts_the_records_verify_lists_as_lost(store_copy):
    import json as _json
    from corruptions import FILE_SIZE, clfile, messages_in_file, patch
    root = store_copy("basic")
    assert _json.loads(run_info(reference_store("basic")))[0]["commitlog"]["records_past_valid_end"] == 0
    last = len(load_answers("basic")["commitlog"]["files"]) - 1
    msgs = messages_in_file("basic", last)
    bad = msgs[len(msgs) // 2]
    patch(clfile(root, last * FILE_SIZE), bad["phyOffset"] - last * FILE_SIZE + 4, b"\x12\x34\x56\x78")
    info = _json.loads(run_info(root))[0]["commitlog"]
    fc = verify(Store(root), VerifyOptions(level="deep")).forecast
    assert info["records_past_valid_end"] == fc["lost_count"] == len(msgs) - len(msgs) // 2 - 1


def run_info(root) -> str:
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "rmqtool", "info", str(root), "-f", "json"], capture_output=True,
                          text=True).stdout
