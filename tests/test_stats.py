"""`stats` counts what upstream's answers say every reference store holds."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from conftest import STORE_NAMES, load_answers, reference_store, run_cli
from corruptions import CASES, corrupt


@pytest.mark.parametrize("name", STORE_NAMES)
def test_per_queue_counts_bytes_and_times_match_upstream(name):
    rows = [json.loads(line) for line in run_cli("stats", reference_store(name), "--by", "minute",
                                                 "-f", "jsonl").out.split("\n") if line]
    want = defaultdict(lambda: [0, 0, None, None])
    for m in load_answers(name)["messages"]:
        w = want[(m["topic"], m["queueId"])]
        w[0] += 1
        w[1] += m["size"]
        w[2] = m["storeTimestamp"] if w[2] is None else min(w[2], m["storeTimestamp"])
        w[3] = m["storeTimestamp"] if w[3] is None else max(w[3], m["storeTimestamp"])
    got = {(r["topic"], r["queue_id"]): [r["messages"], r["bytes"], r["first_store_time"], r["last_store_time"]]
           for r in rows if r["kind"] == "queue"}
    assert got == {k: v for k, v in want.items()}
    total = next(r for r in rows if r["kind"] == "total")
    assert total["messages"] == len(load_answers(name)["messages"]) == sum(r["messages"] for r in rows
                                                                         if r["kind"] == "bucket")
    files = {r["file"].rsplit("/", 1)[-1]: r for r in rows if r["kind"] == "file"}
    for f in load_answers(name)["commitlog"]["files"]:       # (a file recovery deletes is not in the answers)
        assert (files[f["name"]]["messages"], files[f["name"]]["data_end"]) == (f["messages"], f["dataEnd"])


def test_a_fleet_names_each_store_and_the_table_draws_the_rate():
    r = run_cli("stats", reference_store("basic"), reference_store("mixed"), "-f", "jsonl")
    stores = {json.loads(line)["store"] for line in r.out.split("\n") if line}
    assert stores == {"basic", "mixed"}
    t = run_cli("stats", reference_store("basic"), "--by", "minute")
    assert t.code == 0 and "per minute:" in t.err            # stdout piped: only rows there
    total = t.out.split("topics\tqueues\tmessages")[1].splitlines()[1].split("\t")
    assert total[:3] == ["3", "12", "3000"]
    assert run_cli("stats", reference_store("basic"), "--by", "week").code == 2


def _rows(*args) -> list[dict]:
    r = run_cli("stats", *map(str, args), "-f", "jsonl")
    assert r.code == 0, r.err
    return [json.loads(line) for line in r.out.split("\n") if line]


def test_engine_tasks_count_what_the_sequential_walk_counts(tmp_path):
    """Every store's walk split into tasks of one run (a process pool here): the same rows."""
    from conftest import dledger_copy, timer_copy
    stores = [reference_store(n) for n in STORE_NAMES] + [reference_store("propcrc-lmq-batchcq"),
                                                          dledger_copy(tmp_path / "dledger")]
    want = _rows(*stores, "--by", "minute")
    got = _rows(*stores, "--by", "minute", "--jobs", "2", "--split-size", "7000")
    assert got == want
    assert {r["store"] for r in got} == {"basic", "mixed", "crashed", "propcrc-lmq-batchcq", "dledger"}


@pytest.mark.parametrize("case", CASES)
def test_engine_stats_on_damaged_stores(case, store_copy):
    root = store_copy("basic")
    corrupt(root, case)
    assert _rows(root, "--jobs", "2", "--split-size", "20000") == _rows(root)


def test_engine_option_errors():
    for args in (["--jobs", "-1"], ["--split-size", "0"], ["--engine", "flink"]):
        r = run_cli("stats", reference_store("basic"), *args)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, args


@pytest.mark.parametrize("name", STORE_NAMES)
def test_per_topic_rows_add_up_the_queues_largest_first(name):
    """Which topic fills the disk: one row per topic (messages, bytes, share, first/last store time,
    rate), the largest first, and exactly upstream's counts."""
    rows = _rows(reference_store(name))
    want = defaultdict(lambda: [0, 0, None, None])
    for m in load_answers(name)["messages"]:
        w = want[m["topic"]]
        w[0] += 1
        w[1] += m["size"]
        w[2] = m["storeTimestamp"] if w[2] is None else min(w[2], m["storeTimestamp"])
        w[3] = m["storeTimestamp"] if w[3] is None else max(w[3], m["storeTimestamp"])
    topics = [r for r in rows if r["kind"] == "topic"]
    assert {r["topic"]: [r["messages"], r["bytes"], r["first_store_time"], r["last_store_time"]]
            for r in topics} == dict(want)
    assert [r["bytes"] for r in topics] == sorted((r["bytes"] for r in topics), reverse=True)
    queues = [r for r in rows if r["kind"] == "queue"]
    assert all(r["queues"] == sum(1 for q in queues if q["topic"] == r["topic"]) for r in topics)
    total = next(r for r in rows if r["kind"] == "total")
    assert total["topics"] == len(topics) and abs(sum(r["share"] for r in topics) - 1) < 0.01
    assert [r["kind"] for r in rows] == sorted((r["kind"] for r in rows),
                                               key=["topic", "queue", "file", "bucket", "total"].index)


def test_kind_prints_one_kind_and_csv_one_section_per_kind():
    import csv
    import io
    only = _rows(reference_store("basic"), "--kind", "file")
    assert only and {r["kind"] for r in only} == {"file"}
    want = _rows(reference_store("basic"), "--by", "minute")
    r = run_cli("stats", reference_store("basic"), "--by", "minute", "-f", "csv")
    sections, header = [], None
    for row in csv.reader(io.StringIO(r.out)):
        if not row:                      # an empty line parts the sections
            continue
        if row[0] == "kind":
            header = row
            sections.append([])
        else:
            sections[-1].append(dict(zip(header, row)))
    assert [s[0]["kind"] for s in sections] == ["topic", "queue", "file", "bucket", "total"]
    got = [row for s in sections for row in s]
    assert len(got) == len(want)
    for g, w in zip(got, want):          # every field of its kind, none dropped or shifted
        assert set(g) == set(w) and all(g[k] == ("" if v is None else str(v)) for k, v in w.items()), (g, w)
    assert run_cli("stats", reference_store("basic"), "--kind", "partition").code == 2
    assert run_cli("stats", reference_store("basic"), "--kind", "bucket").code == 2       # needs --by
