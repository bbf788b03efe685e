"""Engine core without Spark: Arrow batches vs the reference decoder, byte-range tasks and
their chain check, the local process pool, export layout and topic-name safety."""
from __future__ import annotations

import json
import shutil
import struct
import urllib.parse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from conftest import STORE_NAMES, reference_store
from formats import commitlog as cl
from rmqtool.engines import Task, check_chains, get_engine, plan_tasks, TaskStatus
from rmqtool.output.schema import record_to_dict
from rmqtool.output.arrow import ScanStage, arrow_schema, batch_to_arrow, rows_for_json
from rmqtool.errors import MissingDependencyError, RefusedError
from rmqtool.io.stores import open_stores
from rmqtool.ops.export import NULL_PARTITION, encode_topic, export
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.io.store import Store


scan_stage = ScanStage("raw")


def scan_all(stores, split_size, engine="local", jobs=1):
    tasks = plan_tasks(stores, split_size)
    with get_engine(engine, jobs=jobs) as eng:
        return eng.run(tasks, scan_stage, arrow_schema("raw"))


def reference_rows(store: Store, name: str, body: str = "raw") -> list[dict]:
    rows = []
    for item in walk_store(store):
        if isinstance(item, RecordBatch):
            for i in range(len(item)):
                r = record_to_dict(item, i, body=body)
                r["store"] = name
                rows.append(r)
    return rows


@pytest.mark.parametrize("body", ["none", "raw", "text"])
def test_arrow_batches_equal_reference_decoder(store_name, body):
    store = Store(reference_store(store_name))
    rows = []
    for item in walk_store(store):
        if isinstance(item, RecordBatch):
            rows.extend(rows_for_json(batch_to_arrow(item, store_name, body)))
    assert rows == reference_rows(store, store_name, body)
    assert len(rows) > 100


def test_reference_stores_exercise_the_odd_paths():
    """The equality above covers IPv6 hosts, V2 magic, compression, delay and duplicates."""
    rows = [r for n in STORE_NAMES for r in reference_rows(Store(reference_store(n)), n)]
    assert any(r["sys_flag"] & cl.BORNHOST_V6_FLAG for r in rows)
    assert any(r["version"] == 2 for r in rows)
    assert any(r["compression"] for r in rows)
    assert any(r["topic"] == cl.SCHEDULE_TOPIC for r in rows)
    assert any(r["uniq_key_info"] and ":" in r["uniq_key_info"]["ip"] for r in rows)


def test_arrow_schema_derives_from_record_schema():
    from rmqtool.output.schema import FIELD_NAMES
    assert arrow_schema().names == list(FIELD_NAMES)
    assert arrow_schema("raw").field("body").type == pa.binary()
    assert arrow_schema("text").field("properties").type == pa.map_(pa.string(), pa.string())


@pytest.mark.parametrize("split", [4096, 1500])
def test_split_ranges_equal_one_range(split):
    stores = [(n, Store(reference_store(n))) for n in STORE_NAMES]
    whole = scan_all(stores, 1 << 40)
    parts = scan_all(stores, split)
    assert len(plan_tasks(stores, split)) > 10 * len(plan_tasks(stores, 1 << 40))
    assert parts.equals(whole)
    assert whole.num_rows == sum(len(reference_rows(s, n)) for n, s in stores)


def test_process_pool_equals_in_process():
    stores = [(n, Store(reference_store(n))) for n in STORE_NAMES]
    assert scan_all(stores, 8192, jobs=2).equals(scan_all(stores, 8192, jobs=1))


def test_false_magic_inside_a_body_is_rerun_from_the_chain(store_copy):
    """A body that looks like a record start at a range boundary does not fool the split."""
    root = store_copy("basic")
    seg = Store(root).commitlog.files[0]
    batch = next(b for b in walk_store(Store(root), files=[seg]) if isinstance(b, RecordBatch))
    i = int(np.argmax((batch.body_len >= 40) & (batch.position > 40000)))
    q = int(batch.body_start[i]) + int(batch.buf_base) + 4
    raw = bytearray(seg.path.read_bytes())
    raw[q + cl.MESSAGE_HEAD_OFFSETS["magic"]:q + cl.MESSAGE_HEAD_OFFSETS["magic"] + 4] = \
        struct.pack(">I", cl.MESSAGE_MAGIC_V1)
    at = cl.MESSAGE_HEAD_OFFSETS["physical_offset"]
    raw[q + at:q + at + 8] = struct.pack(">q", seg.start + q)
    seg.path.write_bytes(bytes(raw))
    store = Store(root)
    stores = [("basic", store)]
    whole = scan_all(stores, 1 << 40)
    tasks = plan_tasks(stores, q - 1)
    assert any(t.lo == q - 1 for t in tasks)
    parts = scan_all(stores, q - 1)
    assert parts.equals(whole)


def test_nothing_after_a_corrupt_record_is_reachable(store_copy):
    root = store_copy("basic")
    seg = Store(root).commitlog.files[0]
    batch = next(b for b in walk_store(Store(root), files=[seg]) if isinstance(b, RecordBatch))
    bad = int(batch.position[len(batch) // 3])
    raw = bytearray(seg.path.read_bytes())
    raw[bad + 4:bad + 8] = b"\x12\x34\x56\x78"
    seg.path.write_bytes(bytes(raw))
    stores = [("basic", Store(root))]
    whole = scan_all(stores, 1 << 40)
    parts = scan_all(stores, 2048)
    assert parts.equals(whole)
    first = whole.filter(pa.compute.equal(whole.column("file"), str(seg.path)))
    assert first.num_rows == len(batch) // 3


def test_check_chains_rules():
    t = [Task(0, "s", "f", 0, 0, 100, exact=True), Task(1, "s", "f", 0, 100, 200),
         Task(2, "s", "f", 0, 200, 300)]
    ok = {0: TaskStatus(0, 0, "range", 130), 1: TaskStatus(1, 130, "range", 250),
          2: TaskStatus(2, 250, "blank", 280)}
    assert check_chains(t, ok) == ([], [])
    wrong = dict(ok)
    wrong[1] = TaskStatus(1, 120, "range", 250)
    rerun, discard = check_chains(t, wrong)
    assert discard == [1] and rerun[0].lo == 130 and rerun[0].exact
    ended = dict(ok)
    ended[0] = TaskStatus(0, 0, "corrupt", 60)
    rerun, discard = check_chains(t, ended)
    assert discard == [1, 2] and all(r.skip for r in rerun)
    spanning = dict(ok)
    spanning[0] = TaskStatus(0, 0, "range", 210)        # one record covers all of task 1
    spanning[1] = TaskStatus(1, None, "range", 200)
    spanning[2] = TaskStatus(2, 210, "eof", 300)
    assert check_chains(t, spanning) == ([], [])


NASTY = ["../x", "/abs", "a\x00b", "a/b/../../c", "", ".", "..", NULL_PARTITION, "x" * 5000,
         "%" * 127, "тема/主题", "a\\b", "a=b", "\n", "~", "a b", "\udcff"[:0] + "é" * 300]


def test_topic_encoding_is_a_single_safe_segment():
    seen = {}
    for name in NASTY:
        d = encode_topic(name)
        assert d.startswith("topic=") and "/" not in d and "\\" not in d and "\x00" not in d
        assert len(d.encode()) <= 255 and d.isprintable()
        assert seen.setdefault(d, name) == name, "two topics share a directory"
        if "~" not in d and name:
            assert urllib.parse.unquote(d[len("topic="):]) == name


def test_export_jsonl_rows_are_the_reference_records(tmp_path):
    stores = open_stores([str(reference_store(n)) for n in STORE_NAMES], Store)
    with get_engine("local", jobs=2) as eng:
        summary = export(stores, tmp_path / "out", eng, fmt="jsonl", body="raw", split_size=20000)
    got = []
    for f in sorted((tmp_path / "out").glob("topic=*/part-*.jsonl")):
        got.extend(json.loads(line) for line in f.read_text().splitlines())
    want = [r for n, s in stores for r in reference_rows(s, n)]
    key = lambda r: (r["store"], r["phy_offset"])
    assert sorted(got, key=key) == sorted(want, key=key)
    assert summary["rows"] == len(want)
    topics = json.loads((tmp_path / "out" / "_topics.json").read_text())
    assert set(topics.values()) == {r["topic"] for r in want}
    assert not list((tmp_path / "out").rglob(".*.tmp"))


def test_export_parquet_readable_by_pandas(tmp_path):
    import pandas as pd
    stores = open_stores([str(reference_store("mixed"))], Store)
    with get_engine("local") as eng:
        export(stores, tmp_path / "pq", eng, body="text")
    df = pd.read_parquet(tmp_path / "pq")
    want = reference_rows(stores[0][1], "mixed", "text")
    assert len(df) == len(want)
    assert sorted(df["topic"].astype(str)) == sorted(r["topic"] for r in want)
    by_off = {r["phy_offset"]: r for r in want}
    for row in df.itertuples():
        assert row.body == by_off[row.phy_offset]["body"]


def test_export_filters_like_dump(tmp_path):
    stores = open_stores([str(reference_store("basic"))], Store)
    want = [r for r in reference_rows(stores[0][1], "basic")
            if r["topic"] == "OrderTopic" and r["queue_id"] == 1]
    from rmqtool.ops.dump import RecordFilter
    with get_engine("local") as eng:
        s = export(stores, tmp_path / "f", eng, fmt="jsonl", flt=RecordFilter("OrderTopic", 1))
    assert s["rows"] == len(want) > 0


def test_export_refuses_unsafe_destinations(tmp_path, store_copy):
    root = store_copy("mixed")
    stores = open_stores([str(root)], Store)
    with get_engine("local") as eng:
        with pytest.raises(RefusedError):
            export(stores, root / "commitlog" / "out", eng)
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "precious.txt").write_text("x")
        with pytest.raises(RefusedError):
            export(stores, tmp_path / "busy", eng)
        with pytest.raises(RefusedError):
            export(stores, tmp_path / "busy", eng, force=True)
        export(stores, tmp_path / "again", eng)
        export(stores, tmp_path / "again", eng, force=True)


def test_export_cli(tmp_path):
    from typer.testing import CliRunner
    from rmqtool.cli import app
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["export", str(reference_store("crashed")), "--to", str(out),
                                   "--format", "jsonl", "--jobs", "2"])
    assert res.exit_code == 0, res.output
    assert (out / "_SUCCESS").exists()
    res = CliRunner().invoke(app, ["export", str(reference_store("crashed")), "--to", str(out)])
    assert isinstance(res.exception, RefusedError) or res.exit_code == 3


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    from rmqtool.engines import spark
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingDependencyError, match=r"rmqtool\[spark\]"):
        spark.check_dependencies()


def test_spark_conf_parsing():
    from rmqtool.engines.spark import parse_conf
    from rmqtool.errors import UsageError
    assert parse_conf(["a.b=1", "c=x=y"]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(UsageError):
        parse_conf(["novalue"])


# --- rebuild through an engine ------------------------------------------------------------------
def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _index_files(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()]


def task_engine(jobs: int = 2):
    """The local engine seen as any other engine: a rebuild on it walks through engine tasks
    (``ops.rebuild.engine_walker``, the Spark path) instead of the ordered local pool."""
    from rmqtool.engines.local import LocalEngine

    class TaskEngine(LocalEngine):
        name = "local-tasks"
    return TaskEngine(jobs=jobs)


def rebuild_both(root: Path, out: Path, engine, split_size: int, **kw):
    from rmqtool.io.indexfile import IndexGeometry
    from rmqtool.ops.rebuild import rebuild_consumequeue, rebuild_index
    cq = rebuild_consumequeue(Store(root), cq_file_size=800, output=out / "cq", engine=engine,
                              split_size=split_size, **kw)
    ix = rebuild_index(Store(root), IndexGeometry(61, 350), output=out / "ix", engine=engine,
                       split_size=split_size, **kw)
    return cq, ix


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_rebuild_through_split_tasks_is_byte_identical_to_upstream(name, tmp_path):
    with task_engine() as eng:
        cq, ix = rebuild_both(reference_store(name), tmp_path, eng, 7000)
    assert _tree(tmp_path / "cq") == _tree(reference_store(name) / "consumequeue")
    assert _index_files(tmp_path / "ix") == _index_files(reference_store(name) / "index")
    assert cq.records == ix.records > 0


def test_rebuild_through_tasks_stops_at_mid_log_corruption(store_copy, tmp_path):
    from conftest import load_answers
    from rmqtool.ops.rebuild import rebuild_consumequeue
    root = store_copy("basic")
    victim = load_answers("basic")["messages"][1000]
    seg = root / "commitlog" / f"{victim['phyOffset'] // 98304 * 98304:020d}"
    data = bytearray(seg.read_bytes())
    data[victim["phyOffset"] % 98304 + 4] ^= 0xFF
    seg.write_bytes(bytes(data))
    want = rebuild_consumequeue(Store(root), cq_file_size=800, output=tmp_path / "want", workers=1,
                                allow_truncate=True)
    with task_engine(1) as eng:
        got, _ = rebuild_both(root, tmp_path / "got", eng, 5000, allow_truncate=True)
    assert (got.range_end, got.end_kind, got.records) == (want.range_end, want.end_kind, want.records)
    assert _tree(tmp_path / "got" / "cq") == _tree(tmp_path / "want")


def rebuild_all_on(root: Path, out: Path, engine, split_size: int, **kw):
    from rmqtool.io.indexfile import IndexGeometry
    from rmqtool.ops.rebuild import rebuild_all
    return rebuild_all(Store(root), IndexGeometry(61, 350), cq_file_size=800, output=out, engine=engine,
                       split_size=split_size, **kw)


@pytest.mark.parametrize("case", ["crashed", "corrupt", "to-offset"])
def test_rebuild_all_through_tasks_equals_local_rebuild(case, store_copy, tmp_path):
    from conftest import load_answers
    from rmqtool.io.indexfile import IndexGeometry
    from rmqtool.ops.rebuild import rebuild_consumequeue, rebuild_index
    root = store_copy("crashed" if case == "crashed" else "basic")
    to_offset = None
    if case == "corrupt":
        victim = load_answers("basic")["messages"][1000]
        seg = root / "commitlog" / f"{victim['phyOffset'] // 98304 * 98304:020d}"
        data = bytearray(seg.read_bytes())
        data[victim["phyOffset"] % 98304 + 4] ^= 0xFF
        seg.write_bytes(bytes(data))
    if case == "to-offset":
        to_offset = load_answers("basic")["messages"][1234]["phyOffset"]
    cq = rebuild_consumequeue(Store(root), cq_file_size=800, output=tmp_path / "lcq", to_offset=to_offset,
                              allow_truncate=True)
    ix = rebuild_index(Store(root), IndexGeometry(61, 350), output=tmp_path / "lix", to_offset=to_offset,
                       allow_truncate=True)
    with task_engine(1) as eng:
        dcq, dix = rebuild_all_on(root, tmp_path / "d", eng, 5000, to_offset=to_offset, allow_truncate=True)
    assert (dcq.records, dcq.range_end, dcq.end_kind) == (cq.records, cq.range_end, cq.end_kind)
    assert (dcq.units, dix.entries) == (cq.units, ix.entries)
    assert _tree(tmp_path / "d" / "consumequeue") == _tree(tmp_path / "lcq")
    assert _index_files(tmp_path / "d" / "index") == _index_files(tmp_path / "lix")


def test_rebuild_through_tasks_installs_like_the_local_rebuild(store_copy, tmp_path):
    from rmqtool.io.indexfile import IndexGeometry
    from rmqtool.ops.rebuild import rebuild_consumequeue, rebuild_index
    root = store_copy("mixed")
    shutil.rmtree(root / "consumequeue")
    (root / "index" / "00000000000000000").write_bytes(b"junk")      # an index file name: replaced
    (root / "index" / "notes.txt").write_text("kept")                 # not an index file: carried
    with task_engine(1) as eng:
        r = rebuild_consumequeue(Store(root), cq_file_size=800, engine=eng, split_size=9000)
        assert _tree(root / "consumequeue") == _tree(reference_store("mixed") / "consumequeue")
        assert r.records == 662 and r.backup is None
        i = rebuild_index(Store(root), IndexGeometry(61, 350), output=tmp_path / "ix", engine=eng, split_size=9000)
    (tmp_path / "ix" / "notes.txt").unlink()
    assert _index_files(tmp_path / "ix") == _index_files(reference_store("mixed") / "index")
    assert i.entries > 0 and not [p for p in root.iterdir() if ".rmqtool-" in p.name]


@pytest.mark.parametrize("key", ["key-0005", "key-0150", "nope"])
def test_query_key_scan_through_tasks_equals_query_key_scan(key):
    from rmqtool.ops.query.keyscan import query_key_scan
    from rmqtool.ops.query.bykey import query_key
    store = Store(reference_store("basic"))
    want = query_key(store, key, scan=True)
    with get_engine("local", jobs=2) as eng:
        got = query_key_scan(store, key, eng, split_size=7000)
    assert [h.record() for h in got.hits] == [h.record() for h in want.hits]
    assert got.scanned_bytes == want.scanned_bytes


def test_spark_job_errors_become_rmq_errors():
    from rmqtool.engines.spark import job_error
    from rmqtool.errors import FileChangedError, RmqError
    err = job_error(Exception("py4j...\n  File \"x\"\nrmqtool.errors.FileChangedError: /s/f@12: file vanished\n\tat org"))
    assert isinstance(err, FileChangedError) and str(err) == "/s/f@12: file vanished"
    err = job_error(RuntimeError("\nPythonException: boom\n  more"))
    assert type(err) is RmqError and str(err) == "Spark job failed: PythonException: boom"


def test_a_vanished_file_ends_its_tasks_like_a_changed_file(store_copy):
    root = store_copy("basic")
    stores = [("basic", Store(root))]
    tasks = plan_tasks(stores, 30000)
    victim = Store(root).commitlog.files[2].path
    victim.unlink()
    with get_engine("local") as eng:
        table = eng.run(tasks, ScanStage("none"), arrow_schema("none"))
    assert table.num_rows > 0 and str(victim) not in table.column("file").to_pylist()


def test_spark_partitions_one_per_full_task_small_ones_grouped():
    """Seventeen 128 MiB tasks and seven empty tails on two slots: a partition each (the slots end
    together); a thousand 1 MiB tasks: grouped 16 MiB to a partition; few small ones: four per slot."""
    from rmqtool.engines.spark import SparkEngine
    engine = SparkEngine.__new__(SparkEngine)
    engine.max_partitions = None
    engine.parallelism = lambda: 2
    full = 128 << 20
    assert engine.partitions([full] * 16 + [full * 4 // 5] + [full] * 7) == 24
    assert engine.partitions([1 << 20] + [full] * 3) == 4
    assert engine.partitions([1 << 20] * 1000) == 1000 // 16
    assert engine.partitions([1 << 20] * 20) == 8
    assert engine.partitions([1] * 5) == 5
    assert engine.partitions([]) == 1
    engine.max_partitions = 3
    assert engine.partitions([full] * 24) == 3
