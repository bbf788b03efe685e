"""`consumers` on every store kind the reference set has, against upstream's answers for each store:
a RocksDB ConsumeQueue (`rocksdb-cq`), a DLedger CommitLog (`dledger.tar.gz`), light queues and a
BatchConsumeQueue topic (`propcrc-lmq-batchcq`, with `config/lmqConsumerOffset.json` as upstream's
LmqConsumerOffsetManager persists it) and a timer store (`timer.tar.gz`); and a fleet glob.

None of these stores has broker bookkeeping, so each test writes the offsets files into a copy
with rmqtool's fastjson writer (``formats.fastjson.dumps``, the broker's layout), committing for
every queue upstream's answers list (``consumeQueues[]``: getMinOffsetInQueue, getMaxOffsetInQueue,
cqType, entries) the offsets below min (min > 0), min, the middle, max - 1, max and past max, one
group per choice. `rmqtool consumers -f jsonl` (a subprocess, as users run it) is compared field by
field with what upstream 5.3.3's ``DefaultMessageStore.getMessage`` answers from those bounds and
entries (``upstream_pull`` below follows it: store/.../DefaultMessageStore.java getMessage and
isTheBatchFull; ConsumeQueue/BatchConsumeQueue/RocksDBConsumeQueue ``iterateFrom``), a CommitLog
read being possible exactly where the answers list a message at that offset and size.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import ROOT, dledger_copy, load_answers, reference_store, timer_copy
from formats.fastjson import dumps, parse

#: MessageStoreConfig / DefaultMQPushConsumer defaults getMessage's batch follows (5.3.3)
PULL_BATCH = 32                      # pullBatchSize: maxMsgNums of a push consumer's pull
MAX_FILTER_MESSAGE_SIZE = 16000      # maxFilterMessageSize
IN_MEMORY_BYTES = 256 * 1024         # maxTransferBytesOnMessageInMemory
IN_MEMORY_COUNT = 32                 # maxTransferCountOnMessageInMemory
UNIT = {"SimpleCQ": 20, "RocksDBCQ": 20, "BatchCQ": 46}
CHOICES = ("below", "min", "mid", "last", "max", "past")
#: MixAll.LMQ_PREFIX: a group with it is an LMQ group (LmqConsumerOffsetManager keeps its offsets apart)
LMQ = "%LMQ%"


def copy_store(name: str, dest: Path) -> Path:
    if name == "dledger":
        return dledger_copy(dest)
    if name == "timer":
        return timer_copy(dest)
    shutil.copytree(reference_store(name), dest)
    return dest


def choices(lo: int, hi: int) -> dict[str, int]:
    out = {"min": lo, "mid": (lo + hi) // 2, "last": hi - 1, "max": hi, "past": hi + 7}
    if lo > 0:
        out["below"] = lo - 1
    return {k: v for k, v in out.items() if v >= 0}


def data_version(counter: int = 1) -> dict:
    return {"counter": counter, "stateVersion": 0, "timestamp": 1795482400000}


def commit_everything(answers: dict, config: Path, lmq_file: bool = False) -> dict:
    """Write the offsets files; {(group, topic, queue): offset} that the broker loads from them.
    Without ``lmq_file``: consumerOffset.json (ConsumerOffsetManager). With it: only
    lmqConsumerOffset.json, as an ``enableLmq`` broker's LmqConsumerOffsetManager persists it (its
    ``configFilePath`` is that file; upstream broker/.../offset/LmqConsumerOffsetManager.java):
    ``offsetTable`` for ordinary groups and ``lmqOffsetTable`` ("topic@group" -> offset, queue 0)
    for groups named ``%LMQ%...``, which commit to light queues."""
    config.mkdir(exist_ok=True)
    table: dict = {}
    lmq_table: dict = {}
    want = {}
    for q in answers["consumeQueues"]:
        topic, qid = q["topic"], q["queueId"]
        for name, off in choices(q["getMinOffsetInQueue"], q["getMaxOffsetInQueue"]).items():
            group = f"cg-{name}"
            table.setdefault(f"{topic}@{group}", {})[qid] = off
            want[(group, topic, qid)] = off
            if lmq_file and topic.startswith(LMQ) and qid == 0:
                lgroup = f"{LMQ}cg-{name}"
                lmq_table[f"{topic}@{lgroup}"] = off
                want[(lgroup, topic, 0)] = off
    if lmq_file:
        doc = {"dataVersion": data_version(), "lmqOffsetTable": lmq_table, "offsetTable": table}
        (config / "lmqConsumerOffset.json").write_text(dumps(doc), encoding="utf-8")
    else:
        doc = {"dataVersion": data_version(), "offsetTable": table}
        (config / "consumerOffset.json").write_text(dumps(doc), encoding="utf-8")
    return want


def run_consumers(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rmqtool", "consumers", *map(str, args), "-f", "jsonl"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def jsonl(out: str) -> list[dict]:
    import json
    return [json.loads(x) for x in out.splitlines() if x.strip()]


# --- upstream's getMessage, from the answers -------------------------------------------------------

class AnsweredQueue:
    """One queue of an answers file: its bounds and units, and the messages the CommitLog holds."""

    def __init__(self, answers: dict, q: dict, readable: dict):
        self.kind = q["cqType"]
        self.lo, self.hi = q["getMinOffsetInQueue"], q["getMaxOffsetInQueue"]
        # (queue offset, commitlog offset, size, batch num): a BCQ unit's queue offset is its base message offset
        self.units = [(e[0], e[1], e[2], e[4] if self.kind == "BatchCQ" else 1) for e in q["entries"]]
        cfg = answers["configOverrides"]
        size = (cfg.get("mapperFileSizeBatchConsumeQueue", 300_000 * 46) if self.kind == "BatchCQ"
                else cfg.get("mappedFileSizeConsumeQueue", 300_000 * 20))
        self.per_file = size // UNIT[self.kind]
        self.readable = readable           # (commitlog offset, size) -> store timestamp

    def unit_index(self, offset: int) -> int | None:
        """Index of the unit holding message ``offset`` (BCQ: the last base at or below it)."""
        idx = None
        for i, u in enumerate(self.units):
            if u[0] <= offset:
                idx = i
        return idx

    def iterate_from(self, offset: int) -> list[tuple]:
        """What ``iterateFrom(offset, maxMsgNums)`` gives: a ConsumeQueue or BatchConsumeQueue the rest
        of the one mapped file holding the unit; a RocksDB queue min(max - offset, maxMsgNums) units."""
        i = self.unit_index(offset)
        if self.kind == "RocksDBCQ":
            return [u for u in self.units if offset <= u[0] < offset + min(self.hi - offset, PULL_BATCH)]
        if self.kind == "BatchCQ":             # units from file 0 on, one after the other
            return self.units[i:(i // self.per_file + 1) * self.per_file]
        end = (offset // self.per_file + 1) * self.per_file
        return [u for u in self.units[i:] if u[0] < end]

    def get_message(self, offset: int) -> tuple[str, int]:
        """(GetMessageStatus, nextBeginOffset) of getMessage on a master, no filter, every unit in memory."""
        lo, hi = self.lo, self.hi
        if hi == 0:
            return "NO_MESSAGE_IN_QUEUE", 0
        if offset < lo:
            return "OFFSET_TOO_SMALL", lo
        if offset == hi:
            return "OFFSET_OVERFLOW_ONE", offset
        if offset > hi:
            return "OFFSET_OVERFLOW_BADLY", hi
        status, nxt, total, count, next_file = "NO_MATCHED_MESSAGE", offset, 0, 0, None
        max_filter = max(MAX_FILTER_MESSAGE_SIZE, PULL_BATCH * UNIT[self.kind])
        for qoff, phy, size, batch in self.iterate_from(offset):
            if nxt >= hi:
                break
            if (qoff - offset) * UNIT[self.kind] >= max_filter:
                break
            if total and count and (count + batch > PULL_BATCH or total + size > IN_MEMORY_BYTES
                                    or count > IN_MEMORY_COUNT - 1):
                break
            nxt = qoff + batch
            if next_file is not None and phy < next_file:
                continue
            if (phy, size) not in self.readable:               # CommitLog.getMessage: null
                if total == 0:
                    status = "MESSAGE_WAS_REMOVING"
                next_file = (phy // COMMITLOG_FILE + 1) * COMMITLOG_FILE
                continue
            total, count, status, next_file = total + size, count + batch, "FOUND", None
        return status, nxt

    def store_time(self, offset: int) -> int | None:
        """storeTimestamp of the message at queue offset ``offset`` (the unit holding it)."""
        i = self.unit_index(offset)
        if i is None or not (self.lo <= offset < self.hi):
            return None
        _, phy, size, _ = self.units[i]
        return self.readable.get((phy, size))


COMMITLOG_FILE = 98304          # every reference store's mappedFileSizeCommitLog (configOverrides)


def answered_queues(answers: dict) -> dict[tuple[str, int], AnsweredQueue]:
    assert answers["configOverrides"]["mappedFileSizeCommitLog"] == COMMITLOG_FILE
    readable = {(m["phyOffset"], m["size"]): m["storeTimestamp"] for m in answers["messages"]}
    return {(q["topic"], q["queueId"]): AnsweredQueue(answers, q, readable) for q in answers["consumeQueues"]}


def check_rows(rows: list[dict], want: dict, answers: dict) -> set[str]:
    """Every row equals upstream's answer; every committed offset has its row. The cqTypes seen."""
    queues = answered_queues(answers)
    got = {(r["group"], r["topic"], r["queue_id"]): r for r in rows}
    assert len(got) == len(rows)
    assert {k: r["committed_offset"] for k, r in got.items()} == want
    kinds = set()
    for (group, topic, qid), r in got.items():
        q = queues[(topic, qid)]
        kinds.add(q.kind)
        off = r["committed_offset"]
        status, nxt = q.get_message(off)
        nxt_msg = max(off, q.lo)
        expect = {"min_offset": q.lo, "max_offset": q.hi, "lag": max(q.hi - nxt_msg, 0),
                  "restart_status": status, "restart_next_offset": nxt,
                  "next_store_time": q.store_time(nxt_msg)}
        assert {k: r[k] for k in expect} == expect, (group, topic, qid, off, q.kind)
    return kinds


KINDS = {
    "rocksdb-cq": {"RocksDBCQ"},
    "dledger": {"SimpleCQ"},
    "timer": {"SimpleCQ"},
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_offset_of_every_queue_equals_upstreams_getmessage(tmp_path, name):
    if name == "rocksdb-cq":
        pytest.importorskip("rocksdict", reason="a RocksDB ConsumeQueue needs the rocksdb extra")
    answers = load_answers(name)
    root = copy_store(name, tmp_path / name)
    want = commit_everything(answers, root / "config")
    r = run_consumers(root)
    assert r.returncode == 0, r.stderr
    assert check_rows(jsonl(r.stdout), want, answers) == KINDS[name]
    statuses = {row["restart_status"] for row in jsonl(r.stdout)}
    assert {"FOUND", "OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY"} <= statuses


def test_light_queues_and_a_batch_consume_queue_from_lmq_consumer_offset_json(tmp_path):
    """An enableLmq broker keeps every offset in lmqConsumerOffset.json: ordinary groups in its
    offsetTable (BatchCqTopic's offsets are message offsets: a unit covers batchNum messages), %LMQ%
    groups in its lmqOffsetTable (queue 0). The pre-blank unit heading %LMQ%room-2 is no message
    (no store time); the pull from it rolls to the next CommitLog file."""
    name = "propcrc-lmq-batchcq"
    answers = load_answers(name)
    root = copy_store(name, tmp_path / "lmq")
    want = commit_everything(answers, root / "config", lmq_file=True)
    r = run_consumers(root)
    assert r.returncode == 0, r.stderr
    rows = jsonl(r.stdout)
    assert check_rows(rows, want, answers) == {"SimpleCQ", "BatchCQ"}
    assert {row["source"] for row in rows} == {"lmqConsumerOffset.json"}
    lmq_groups = {row["group"] for row in rows if row["group"].startswith(LMQ)}
    assert lmq_groups == {f"{LMQ}cg-{c}" for c in ("min", "mid", "last", "max", "past")}
    bcq = [row for row in rows if row["topic"] == "BatchCqTopic" and row["group"] == "cg-mid"]
    assert bcq and all(row["restart_status"] == "FOUND" for row in bcq)
    # the file is read back as the broker's parser reads it (fastjson's layout, unquoted queue ids)
    doc = parse((root / "config" / "lmqConsumerOffset.json").read_text())
    assert set(doc) == {"dataVersion", "lmqOffsetTable", "offsetTable"}


def test_with_both_files_the_lmq_broker_loads_lmq_consumer_offset_json_only(tmp_path):
    """LmqConsumerOffsetManager.configFilePath is lmqConsumerOffset.json: a consumerOffset.json left
    beside it (an earlier run without enableLmq) is not what the broker loads, and rmqtool says so."""
    name = "propcrc-lmq-batchcq"
    answers = load_answers(name)
    root = copy_store(name, tmp_path / "lmq")
    want = commit_everything(answers, root / "config", lmq_file=True)
    (root / "config" / "consumerOffset.json").write_text(
        dumps({"dataVersion": data_version(9), "offsetTable": {"CrcTopic@cg-stale": {0: 1}}}), encoding="utf-8")
    r = run_consumers(root)
    assert r.returncode == 0, r.stderr
    rows = jsonl(r.stdout)
    assert {(x["group"], x["topic"], x["queue_id"]): x["committed_offset"] for x in rows} == want
    assert "consumerOffset.json" in r.stderr and "lmqConsumerOffset.json" in r.stderr


def test_a_fleet_glob_of_two_store_copies(tmp_path):
    """`consumers 'DIR/*'` (quoted: rmqtool expands it) gives each store's rows with its name."""
    answers = load_answers("propcrc-lmq-batchcq")
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    wants = {}
    for n in ("broker-a", "broker-b"):
        root = copy_store("propcrc-lmq-batchcq", fleet / n)
        wants[n] = commit_everything(answers, root / "config")
    r = run_consumers(f"{fleet}/*")
    assert r.returncode == 0, r.stderr
    rows = jsonl(r.stdout)
    stores = sorted({row["store"] for row in rows})
    assert len(stores) == 2 and [Path(s).name for s in stores] == ["broker-a", "broker-b"]
    for s in stores:
        mine = [{k: v for k, v in row.items() if k != "store"} for row in rows if row["store"] == s]
        check_rows(mine, wants[Path(s).name], answers)


def test_a_torn_lmq_file_falls_back_to_its_bak_and_reset_offsets_refuses_the_store(tmp_path):
    """ConfigManager.load on lmqConsumerOffset.json: a torn main file gives the .bak, said in a note;
    reset-offsets, which writes consumerOffset.json, refuses a store whose broker does not read it."""
    name = "propcrc-lmq-batchcq"
    answers = load_answers(name)
    root = copy_store(name, tmp_path / "lmq")
    config = root / "config"
    want = commit_everything(answers, config, lmq_file=True)
    main = config / "lmqConsumerOffset.json"
    main.rename(config / "lmqConsumerOffset.json.bak")
    main.write_text('{\n\t"lmqOffsetTable":{\n\t\t"%LMQ%room-1@%LMQ%g":', encoding="utf-8")
    r = run_consumers(root)
    assert r.returncode == 0, r.stderr
    rows = jsonl(r.stdout)
    assert {(x["group"], x["topic"], x["queue_id"]): x["committed_offset"] for x in rows} == want
    assert {x["source"] for x in rows} == {"lmqConsumerOffset.json.bak"}
    assert "the broker loads lmqConsumerOffset.json.bak" in r.stderr
    before = sorted(p.name for p in config.iterdir())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "rmqtool", "reset-offsets", str(root), "--group", "cg-min",
                        "--to-latest", "--execute"], capture_output=True, text=True, env=env, cwd=ROOT)
    from rmqtool.errors import EXIT_REFUSED
    assert r.returncode == EXIT_REFUSED and "lmqConsumerOffset.json" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and sorted(p.name for p in config.iterdir()) == before


_names = st.text(alphabet=st.sampled_from(list("ab%LMQ-_.9")), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.tuples(_names, _names), st.dictionaries(st.integers(0, 64), st.integers(-1, 2**63 - 1),
                                                                   min_size=1, max_size=4), max_size=5),
       st.dictionaries(st.tuples(_names, _names), st.integers(-1, 2**63 - 1), max_size=5))
def test_lmq_file_tables_read_back_as_written(table, lmq_table):
    """Whatever both tables hold, written in fastjson's layout, is every (group, topic, queue, offset)
    committed_offsets lists: offsetTable per queue, lmqOffsetTable as queue 0."""
    import tempfile
    from rmqtool.io.brokerconfig import committed_offsets
    doc = {"dataVersion": data_version(), "lmqOffsetTable": {f"{t}@{g}": o for (t, g), o in lmq_table.items()},
           "offsetTable": {f"{t}@{g}": qs for (t, g), qs in table.items()}}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "lmqConsumerOffset.json").write_text(dumps(doc), encoding="utf-8")
        rows, loads = committed_offsets(Path(d))
    assert [x.source for x in loads] == [None, "lmqConsumerOffset.json"] and all(x.ok for x in loads)
    want = sorted([(g, t, q, o) for (t, g), qs in table.items() for q, o in qs.items()]
                  + [(g, t, 0, o) for (t, g), o in lmq_table.items()])
    assert sorted((x.group, x.topic, x.queue_id, x.offset) for x in rows) == want


def test_after_a_crash_light_and_batch_queues_are_cut_at_the_valid_end(tmp_path):
    """The README's crash (tests/consumers_crash.py: the last eighth of the messages zeroed, an abort
    file) on the light-queue store: recovery ends the CommitLog at the cut and truncates every queue's
    units whose record starts at or past it (truncateDirtyLogicFiles; a BatchConsumeQueue's too, its max
    then the first cut unit's base message offset). Each row is upstream's getMessage on what is left."""
    from consumers_crash import crash_copy
    name = "propcrc-lmq-batchcq"
    answers = load_answers(name)
    root = tmp_path / "lmq"
    cut = crash_copy(reference_store(name), root)["cutAtPhyOffset"]
    want = commit_everything(answers, root / "config", lmq_file=True)
    r = run_consumers(root)
    assert r.returncode == 0, r.stderr
    queues = answered_queues(answers)
    shortened = []
    for q in queues.values():
        kept = [u for u in q.units if u[1] < cut or u[2] == 2**31 - 1]     # the pre-blank filler stays
        if len(kept) < len(q.units):
            shortened.append(q.kind)
            q.hi = q.units[len(kept)][0]
        q.units = kept
        q.readable = {k: v for k, v in q.readable.items() if k[0] < cut}
    assert len(shortened) >= 5 and "BatchCQ" in shortened
    got = {(x["group"], x["topic"], x["queue_id"]): x for x in jsonl(r.stdout)}
    assert {k: x["committed_offset"] for k, x in got.items()} == want
    kinds = set()
    for (group, topic, qid), x in got.items():
        q = queues[(topic, qid)]
        off = x["committed_offset"]
        status, nxt = q.get_message(off)
        expect = {"min_offset": q.lo, "max_offset": q.hi, "lag": max(q.hi - max(off, q.lo), 0),
                  "restart_status": status, "restart_next_offset": nxt,
                  "next_store_time": q.store_time(max(off, q.lo))}
        assert {k: x[k] for k in expect} == expect, (group, topic, qid, off, q.kind)
        kinds.add(q.kind)
    assert kinds == {"SimpleCQ", "BatchCQ"}


@pytest.mark.parametrize("name", ["propcrc-lmq-batchcq", "dledger", "timer", "rocksdb-cq"])
def test_a_rebuild_of_an_undamaged_store_changes_no_groups_answer(tmp_path, name):
    """The rebuilt queues are the broker's own: no committed offset meets another answer (a light
    queue headed by a filler unit keeps min 0, as upstream serves it; BatchConsumeQueue topics are
    not rebuilt into consumequeue/ and are left out)."""
    import json
    if name == "rocksdb-cq":
        pytest.importorskip("rocksdict", reason="a RocksDB ConsumeQueue needs the rocksdb extra")
    answers = load_answers(name)
    root = copy_store(name, tmp_path / name)
    commit_everything(answers, root / "config", lmq_file=name == "propcrc-lmq-batchcq")
    where = ["--output", str(tmp_path / "out")] if name == "rocksdb-cq" else ["--dry-run"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "rmqtool", "rebuild", "consumequeue", str(root), *where, "-f", "json"],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["consumers"] == []
