"""Each broker rule in one place (issues 13 and 34). verify, dump/export rows and the Arrow form
take tagsCode and index keys from the functions dispatch uses, and agree with upstream's answers
for every record of every reference store; the row forms take the store's delay table."""
from __future__ import annotations

import json

import numpy as np
import pytest

from formats import commitlog as cl
from conftest import STORE_NAMES, load_answers, reference_store, run_cli
from rmqtool.broker import dispatch
from rmqtool.broker.delay import DEFAULT_LEVELS_MS, parse_delay_levels, store_delay_levels, tags_code_of
from rmqtool.broker.dispatch import (DispatchConfig, dispatch_batch, goes_to_consumequeue, record_index_keys,
                                     record_tags_codes, schedule_delays)
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.io.store import Store
from rmqtool.ops.verify import records as verify_records


def _batches(name):
    return [b for b in walk_store(Store(reference_store(name))) if isinstance(b, RecordBatch) and len(b)]


def test_verify_uses_the_dispatchers_functions():
    assert verify_records.record_tags_codes is dispatch.record_tags_codes
    assert verify_records.record_index_keys is dispatch.record_index_keys
    for copy in ("span_hash", "split_spans", "tags_codes", "key_hashes"):
        assert not hasattr(verify_records, copy), f"verify keeps its own {copy}"


@pytest.mark.parametrize("name", STORE_NAMES)
def test_tags_code_and_keys_agree_everywhere(name):
    want = {m["phyOffset"]: m for m in load_answers(name)["messages"]}
    topics = verify_records.TopicTable()
    for b in _batches(name):
        d = dispatch_batch(b)
        cols = verify_records.batch_columns(b, topics, deep=True)
        tags = record_tags_codes(b)
        in_cq = np.flatnonzero(goes_to_consumequeue(b.sys_flag & cl.TRANSACTION_MASK)[:d.records])
        assert tags[in_cq].tolist() == d.cq_tags_code.tolist() == cols["tags_code"][in_cq].tolist()
        rec, keys = record_index_keys(b)
        assert (rec.tolist(), keys.tolist()) == (d.key_record.tolist(), d.key_hash.tolist())
        assert sorted(zip(cols["key_rec"].tolist(), cols["key_hash"].tolist())) == sorted(zip(rec.tolist(),
                                                                                              keys.tolist()))
        for i in in_cq.tolist():            # the row form (dump, export) and upstream's answer
            phy = int(b.phy_offset[i])
            row = tags_code_of(b.topic(i), b.properties(i), int(b.store_timestamp[i]))
            assert row == int(tags[i])
            if phy in want and want[phy].get("tagsCode") is not None:
                assert int(tags[i]) == want[phy]["tagsCode"]


#: a delay table other than the default: every level's delay differs
OTHER_LEVELS_MS = parse_delay_levels("2s 7s 20s 40s 90s 3m 4m 5m 6m 7m 8m 9m 10m 11m 21m 31m 61m 121m")


@pytest.mark.parametrize("name", STORE_NAMES)
def test_the_row_tags_code_is_the_batch_rule_with_any_delay_table(name):
    """``tags_code_of`` (dump/export rows, the light-queue and BatchCQ unit checks) equals
    ``record_tags_codes`` on every record the dispatcher reaches, with the default delay table
    and with another one (so a row form that ignores the table cannot pass)."""
    differs = 0
    for b in _batches(name):
        stop = schedule_delays(b).failed_row
        rows = range(len(b) if stop is None else stop)
        by_table = {}
        for levels in (DEFAULT_LEVELS_MS, OTHER_LEVELS_MS):
            batch = record_tags_codes(b, DispatchConfig(delay_levels_ms=levels)).tolist()
            row = [tags_code_of(b.topic(i), b.properties(i), int(b.store_timestamp[i]), levels) for i in rows]
            assert row == batch[:len(row)], (name, b.path)
            by_table[len(by_table)] = row
        differs += sum(x != y for x, y in zip(by_table[0], by_table[1]))
    if name == "mixed":
        assert differs > 0, "the store has delayed records: the two tables must give different tagsCodes"


def test_the_stores_delay_table_is_read_from_its_broker_properties(tmp_path):
    class _Store:
        config_dir = tmp_path
    assert store_delay_levels(_Store()) == DEFAULT_LEVELS_MS          # no broker.properties
    (tmp_path / "broker.properties").write_text("# a comment\nbrokerName = b\nmessageDelayLevel = 1s 5s 20s\n")
    assert store_delay_levels(_Store()) == [1000, 5000, 20000]
    (tmp_path / "broker.properties").write_text("messageDelayLevel=1x 5s\n")     # the broker would not start
    assert store_delay_levels(_Store()) == DEFAULT_LEVELS_MS


def test_deep_verify_of_batch_units_uses_the_stores_delay_table(tmp_path):
    """A BatchConsumeQueue of delayed records written with the default table, in a store whose
    broker.properties sets another: the units' tagsCodes are not what that broker dispatches.
    (Before, the unit check took the row copy of the rule, which knew only the default table.)"""
    rows = [{"topic": cl.SCHEDULE_TOPIC, "queue_id": 2, "body": "hi",
             "properties": {cl.PROPERTY_DELAY_TIME_LEVEL: "3", cl.PROPERTY_TAGS: "t"}} for _ in range(3)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "s"
    assert run_cli("write", root, "--from", src, "--batch-cq-topic", cl.SCHEDULE_TOPIC).code == 0

    def findings():
        r = run_cli("verify", root, "--level", "deep", "-f", "json")
        return [(f["check"], f["offset"]) for f in json.loads(r.out)["findings"]]
    assert findings() == []
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "broker.properties").write_text("messageDelayLevel=1s 5s 20s\n")
    assert findings() == [("bcq.unit-record", 0), ("bcq.unit-record", 46), ("bcq.unit-record", 92)]


def test_consumequeue_checks_and_rebuild_use_the_stores_delay_table(tmp_path):
    """The plain ConsumeQueue of delayed records: deep verify (in-process and on the pool) and
    rebuild take the store's delay table, as its broker dispatches (before, both used the
    default table whatever broker.properties said)."""
    rows = [{"topic": cl.SCHEDULE_TOPIC, "queue_id": 2, "body": "hi",
             "properties": {cl.PROPERTY_DELAY_TIME_LEVEL: "3", cl.PROPERTY_TAGS: "t"}} for _ in range(3)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "s"
    assert run_cli("write", root, "--from", src).code == 0

    def findings(*extra):
        r = run_cli("verify", root, "--level", "deep", "-f", "json", *extra)
        return sorted({f["check"] for f in json.loads(r.out)["findings"]})

    def tags_codes(tree):
        r = run_cli("dump", "consumequeue", tree, "-f", "jsonl")
        return [json.loads(line)["tags_code"] for line in r.out.splitlines()
                if json.loads(line).get("kind") == "UNIT"]
    assert findings() == [] and findings("--jobs", "2") == []
    default = tags_codes(root)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "broker.properties").write_text("messageDelayLevel=1s 5s 20s\n")
    assert findings() == ["cq.tags-code"] == findings("--jobs", "2")
    assert run_cli("rebuild", "consumequeue", root, "--yes").code == 0
    rebuilt = tags_codes(root)
    assert [c - d for c, d in zip(rebuilt, default)] == [20000 - 10000] * 3   # level 3: 20 s, not 10 s
    assert findings() == []


def test_the_end_of_a_file_is_one_property():
    """"A file not ending in a BLANK ends the log at base + file size" is ``FileEnd.log_end`` /
    ``FileEnd.ends_log``; past a BLANK the log goes on at the next file's start."""
    from rmqtool.broker.dispatch import END_DISPATCH_STOP
    from rmqtool.records.scan import END_BLANK, END_CORRUPT, END_EOF, END_TORN, END_ZERO, FileEnd
    blank = FileEnd("f", 1 << 20, 1 << 20, 900, END_BLANK)
    assert (blank.ends_log, blank.log_end) == (False, 2 << 20)
    for kind in (END_ZERO, END_EOF, END_CORRUPT, END_TORN, END_DISPATCH_STOP):
        end = FileEnd("f", 1 << 20, 1 << 20, 900, kind)
        assert (end.ends_log, end.log_end) == (True, (1 << 20) + 900), kind


def _source_nodes(skip: str):
    """(path relative to ``rmqtool/``, node) of every AST node of its modules but ``skip``."""
    import ast
    from pathlib import Path
    import rmqtool
    root = Path(rmqtool.__file__).parent
    for path in sorted(root.rglob("*.py")):
        if path != root / skip:
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                yield path.relative_to(root), node


def test_no_module_restates_the_end_of_a_file():
    """No ``<end>.file_base + <x>.file_size`` outside ``records/scan.py`` (the property's home):
    recovery, verify, write and the truncation count take ``FileEnd.log_end``."""
    import ast
    found = []
    for path, node in _source_nodes("records/scan.py"):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                and isinstance(node.left, ast.Attribute) and node.left.attr == "file_base"
                and isinstance(node.right, ast.Attribute) and node.right.attr == "file_size"):
            found.append(f"{path}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize("name", STORE_NAMES)
def test_index_keys_are_the_scalar_rule_on_every_record(name):
    """``dispatch.record_index_keys`` (the C loop and the numpy formulation) puts exactly the keys
    of ``broker.indexkeys.index_keys``, in its order, for every record of every reference store;
    the key search (``match_kind``) finds each record by each of them."""
    from formats.indexfile import KEY_JOINER
    from rmqtool.broker.indexkeys import MATCH_KEYS, MATCH_UNIQ, index_keys, match_kind
    from rmqtool.broker.transactions import goes_to_index
    from rmqtool.kernels.javastring import index_key_hash
    for b in _batches(name):
        want_rec, want_hash = [], []
        for i in range(len(b)):
            if not goes_to_index(cl.transaction_type(int(b.sys_flag[i]))):
                continue
            for kind, key in index_keys(b.text("uniq", i), b.text("keys", i)):
                want_rec.append(i)
                want_hash.append(index_key_hash(b.topic(i) + KEY_JOINER + key))
                if key:
                    assert match_kind(b, i, key, b.topic(i)) in (kind, MATCH_UNIQ), (b.path, i, key)
                    assert kind != MATCH_KEYS or match_kind(b, i, key, None, uniq_only=True) != MATCH_KEYS
        for core in (dispatch.native.core, None):
            rec, keys = record_index_keys(b, core=core)
            assert (rec.tolist(), keys.tolist()) == (want_rec, want_hash), (name, b.path, core)


def test_every_write_goes_through_pwrite_all():
    """``io/install.pwrite_all`` is the one positioned write (it loops over short writes); no
    other module calls ``os.pwrite``/``os.pwritev`` itself."""
    import ast
    found = []
    for path, node in _source_nodes("io/install.py"):
        if (isinstance(node, ast.Attribute) and node.attr in ("pwrite", "pwritev")
                and isinstance(node.value, ast.Name) and node.value.id == "os"):
            found.append(f"{path}:{node.lineno}")
    assert found == []
