"""The broker's own topics decoded as named fields (issue 18 point 7), checked against upstream's
answers for the mixed reference store, the same in dump rows and in export's Arrow form."""
from __future__ import annotations

import json

import pytest

from conftest import load_answers, reference_store, run_cli


def _dump(name):
    return [json.loads(line) for line in run_cli("dump", "commitlog", reference_store(name), "-f", "jsonl",
                                                 "--body", "text").out.split("\n") if line]


def test_fields_as_the_properties_say():
    rows = {r["phy_offset"]: r for r in _dump("mixed") if r["kind"] == "MESSAGE"}
    kinds = {}
    for m in load_answers("mixed")["messages"]:
        r, p, t = rows[m["phyOffset"]], m["properties"], m["topic"]
        kinds[r["system_kind"]] = kinds.get(r["system_kind"], 0) + 1
        if t == "RMQ_SYS_TRANS_HALF_TOPIC":
            assert (r["system_kind"], r["real_topic"], r["real_queue_id"], r["producer_group"]) == \
                ("transaction-half", p["REAL_TOPIC"], int(p["REAL_QID"]), p["PGROUP"])
        elif t == "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            assert r["system_kind"] == "transaction-op" and r["op_offsets"] == r["body"]
        elif t == "SCHEDULE_TOPIC_XXXX":
            assert (r["system_kind"], r["real_topic"], r["real_queue_id"], r["delay_level"]) == \
                ("schedule", p["REAL_TOPIC"], int(p["REAL_QID"]), int(p["DELAY"]))
        elif t.startswith("%RETRY%") or t.startswith("%DLQ%"):
            assert r["system_kind"] == ("retry" if t.startswith("%RETRY%") else "dlq")
            assert r["consumer_group"] == t.split("%", 2)[2]
            assert (r["real_topic"], r["origin_msg_id"]) == (p.get("RETRY_TOPIC"), p.get("ORIGIN_MESSAGE_ID"))
        else:
            assert r["system_kind"] is None and r["real_topic"] is None
    assert kinds == {None: 625, "transaction-half": 5, "transaction-op": 3, "schedule": 21, "retry": 6, "dlq": 2}


def test_export_carries_the_same_fields(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.dataset as ds
    assert run_cli("export", reference_store("mixed"), "--to", tmp_path / "x").code == 0
    cols = ["phy_offset", "system_kind", "real_topic", "real_queue_id", "consumer_group", "producer_group",
            "origin_msg_id", "delay_level", "op_offsets"]
    got = {r["phy_offset"]: r for r in ds.dataset(tmp_path / "x", format="parquet", partitioning="hive")
           .to_table(columns=cols).to_pylist()}
    for r in _dump("mixed"):
        if r["kind"] == "MESSAGE":
            assert got[r["phy_offset"]] == {c: r[c] for c in cols}
