"""`stats` counts what upstream's answers say every reference store holds."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from conftest import STORE_NAMES, load_answers, reference_store, run_cli


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
    assert t.code == 0 and "per minute:" in t.out and "total: 3000 messages" in t.out
    assert run_cli("stats", reference_store("basic"), "--by", "week").code == 2
