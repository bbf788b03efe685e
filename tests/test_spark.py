"""The Spark engine gives the local engine's answers: exports row for row, split files,
re-run tasks; its output is readable by Spark itself. One local[2] session for the file."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from conftest import STORE_NAMES, reference_store
from rmqtool.engines import get_engine, plan_tasks
from rmqtool.output.arrow import arrow_schema
from rmqtool.engines.spark import find_java
from rmqtool.io.stores import open_stores
from rmqtool.ops.export import export
from rmqtool.io.store import Store
from rmqtool.output.arrow import ScanStage

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(find_java() is None, reason="no Java runtime (java on PATH or JAVA_HOME)")]


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    tmp = tmp_path_factory.mktemp("spark")
    session = (SparkSession.builder.master("local[2]").appName("rmqtool-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.local.dir", str(tmp / "local"))
               .config("spark.sql.warehouse.dir", str(tmp / "warehouse")).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def synthetic_store(tmp_path_factory):
    """A store made by `rmqtool write --synthetic` (or, before `write` exists, a copy of a
    reference store under another broker name)."""
    root = tmp_path_factory.mktemp("synthetic") / "broker-syn"
    res = subprocess.run([sys.executable, "-m", "rmqtool", "write", "--help"], capture_output=True, text=True)
    if res.returncode == 0 and "--synthetic" in res.stdout:
        res = subprocess.run([sys.executable, "-m", "rmqtool", "write", str(root), "--synthetic", "3000",
                              "--commitlog-file-size", "262144"], capture_output=True, text=True)
        if res.returncode == 0:
            return root
    shutil.copytree(reference_store("basic"), root)
    return root


def _read(path: Path) -> pa.Table:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    table = table.set_column(table.schema.get_field_index("topic"), "topic",
                             table.column("topic").cast(pa.string()))
    return table.sort_by([("store", "ascending"), ("phy_offset", "ascending")])


def test_export_spark_equals_local_row_for_row(spark, tmp_path, synthetic_store):
    paths = [str(reference_store(n)) for n in STORE_NAMES] + [str(synthetic_store)]
    stores = open_stores(paths, Store)
    with get_engine("local") as local:
        export(stores, tmp_path / "local", local, body="raw", split_size=1 << 40)
    with get_engine("spark", spark=spark) as eng:
        summary = export(stores, tmp_path / "spark", eng, body="raw", split_size=40000)
    assert summary["tasks"] > 2 * sum(len(s.commitlog.files) for _, s in stores)
    a, b = _read(tmp_path / "local"), _read(tmp_path / "spark")
    assert a.num_rows == summary["rows"] > 5000
    assert set(a.column("store").to_pylist()) == {"basic", "mixed", "crashed", "broker-syn"}
    assert a.select(sorted(a.column_names)).equals(b.select(sorted(b.column_names)))


def test_spark_reads_the_export(spark, tmp_path):
    stores = open_stores([str(reference_store("mixed"))], Store)
    with get_engine("spark", spark=spark) as eng:
        summary = export(stores, tmp_path / "out", eng, body="text")
    df = spark.read.parquet(str(tmp_path / "out"))
    assert df.count() == summary["rows"]
    per_topic = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    assert per_topic == summary["topics"]


def test_jsonl_export_spark_equals_local(spark, tmp_path):
    stores = open_stores([str(reference_store("mixed"))], Store)
    with get_engine("local") as local:
        export(stores, tmp_path / "l", local, fmt="jsonl", body="raw")
    with get_engine("spark", spark=spark) as eng:
        export(stores, tmp_path / "s", eng, fmt="jsonl", body="raw", split_size=4096)
    rows = lambda d: [json.loads(line) for f in d.glob("topic=*/*.jsonl")
                      for line in f.read_text().splitlines()]
    key = lambda r: r["phy_offset"]
    assert sorted(rows(tmp_path / "l"), key=key) == sorted(rows(tmp_path / "s"), key=key)


def test_spark_reruns_a_task_that_resynced_on_a_false_magic(spark, store_copy):
    """Same corrupted-by-design store as the local test: Spark's run must re-run the task."""
    import struct
    import numpy as np
    from formats import commitlog as cl
    from rmqtool.records.scan import RecordBatch, walk_store
    root = store_copy("basic")
    seg = Store(root).commitlog.files[1]
    batch = next(b for b in walk_store(Store(root), files=[seg]) if isinstance(b, RecordBatch))
    i = int(np.argmax((batch.body_len >= 40) & (batch.position > 40000)))
    q = int(batch.body_start[i]) + int(batch.buf_base) + 4
    raw = bytearray(seg.path.read_bytes())
    at = cl.MESSAGE_HEAD_OFFSETS["magic"]
    raw[q + at:q + at + 4] = struct.pack(">I", cl.MESSAGE_MAGIC_V1)
    at = cl.MESSAGE_HEAD_OFFSETS["physical_offset"]
    raw[q + at:q + at + 8] = struct.pack(">q", seg.start + q)
    seg.path.write_bytes(bytes(raw))
    stores = [("basic", Store(root))]
    with get_engine("local") as local:
        want = local.run(plan_tasks(stores, 1 << 40), ScanStage("raw"), arrow_schema("raw"))
    with get_engine("spark", spark=spark) as eng:
        tasks = plan_tasks(stores, q - 1)
        got = eng.run(tasks, ScanStage("raw"), arrow_schema("raw"))
    assert any(t.lo == q - 1 for t in tasks) and len(tasks) < 200
    assert got.equals(want)


def test_export_cli_on_spark(spark, tmp_path):
    from typer.testing import CliRunner
    from rmqtool.cli import app
    res = CliRunner().invoke(app, ["export", str(reference_store("crashed")), "--to", str(tmp_path / "c"),
                                   "--engine", "spark", "--topic", "OrderTopic", "--split-size", "30000"])
    assert res.exit_code == 0, res.output
    table = _read(tmp_path / "c")
    assert set(table.column("topic").to_pylist()) == {"OrderTopic"} and table.num_rows > 0
    assert spark.sparkContext._jsc is not None       # the shared session was not stopped


def test_rebuild_all_on_spark_is_byte_identical_to_upstream(spark, tmp_path):
    """The executors scan and dispatch; the driver builds the files with the local rebuild's jobs."""
    from test_engines import _index_files, _tree, rebuild_all_on
    with get_engine("spark", spark=spark) as eng:
        cq, ix = rebuild_all_on(reference_store("mixed"), tmp_path, eng, 40000)
    assert _tree(tmp_path / "consumequeue") == _tree(reference_store("mixed") / "consumequeue")
    assert _index_files(tmp_path / "index") == _index_files(reference_store("mixed") / "index")
    assert cq.records == 662 and len(ix.files_written) > 1


def test_rebuild_cli_on_spark(spark, store_copy, tmp_path):
    from typer.testing import CliRunner
    from rmqtool.cli import app
    from test_engines import _index_files, _tree
    root = store_copy("mixed")
    shutil.rmtree(root / "consumequeue")
    res = CliRunner().invoke(app, ["rebuild", "consumequeue", str(root), "--yes", "--cq-file-size", "800",
                                   "--engine", "spark"])
    assert res.exit_code == 0, res.output
    assert _tree(root / "consumequeue") == _tree(reference_store("mixed") / "consumequeue")
    res = CliRunner().invoke(app, ["rebuild", "index", str(root), "--output", str(tmp_path / "ix"),
                                   "--index-slots", "61", "--index-entries", "350", "--engine", "spark"])
    assert res.exit_code == 0, res.output
    assert _index_files(tmp_path / "ix") == _index_files(reference_store("mixed") / "index")
    res = CliRunner().invoke(app, ["rebuild", "consumequeue", str(root), "--yes", "--cq-file-size", "800",
                                   "--engine", "spark", "--topic", "MixedTopic", "--output", str(tmp_path / "sel")])
    assert res.exit_code == 0, res.output
    assert _tree(tmp_path / "sel") == _tree(reference_store("mixed") / "consumequeue")   # others carried


def test_query_key_scan_cli_on_spark(spark):
    from typer.testing import CliRunner
    from rmqtool.cli import app
    store = str(reference_store("basic"))
    args = ["query-key", store, "key-0005", "--scan", "-f", "jsonl"]
    local = CliRunner().invoke(app, args)
    on_spark = CliRunner().invoke(app, args + ["--engine", "spark"])
    assert local.exit_code == on_spark.exit_code == 0, on_spark.output
    rows = lambda out: [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert rows(on_spark.output) == rows(local.output) and len(rows(local.output)) > 10


def test_a_worker_error_is_one_rmq_error_not_a_java_trace(spark, tmp_path):
    from rmqtool.ops.dump import RecordFilter
    from rmqtool.errors import RmqError
    from rmqtool.ops.export import SUMMARY_SCHEMA, ExportStage
    (tmp_path / "file").write_text("x")
    stores = [("mixed", Store(reference_store("mixed")))]
    stage = ExportStage(str(tmp_path / "file" / "below"), "parquet", "none", RecordFilter())
    with get_engine("spark", spark=spark) as eng:
        with pytest.raises(RmqError, match="Spark job failed: .*NotADirectoryError") as info:
            eng.run(plan_tasks(stores, 1 << 40), stage, SUMMARY_SCHEMA)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("case", [None, "bad-magic", "body-flip", "torn-tail"])
def test_verify_spark_equals_local(spark, store_copy, case):
    """verify --engine spark: the same findings, summary and forecast as the in-process walk."""
    from corruptions import corrupt
    from rmqtool.ops.verify import VerifyOptions, verify
    root = store_copy("crashed" if case == "torn-tail" else "basic")
    if case:
        corrupt(root, case)
    opts = lambda: VerifyOptions(level="deep", limit_per_check=None)   # noqa: E731
    want = verify(Store(root), opts()).as_dict()
    with get_engine("spark", spark=spark) as eng:
        got = verify(Store(root), opts(), engine=eng, split_size=30000).as_dict()
        assert len(eng.tasks) > len(Store(root).commitlog.files)
    assert got == want
    assert (want["summary"]["findings"]["error"] > 0) == bool(case)


@pytest.mark.parametrize("case", ["zeroed-middle", "queues-and-index"])
def test_verify_joins_run_as_spark_tasks(spark, store_copy, case):
    """verify --engine spark joins each chunk of records as a Spark task (chunk sizes that make
    many chunk edges): the sequential report, byte for byte, capped or not, shallow or deep."""
    from corruptions import corrupt
    from rmqtool.engines.spark import SparkEngine
    from rmqtool.ops.verify import VerifyOptions, verify
    from test_verify_chunks import _mutate_queues_and_index
    root = store_copy("basic")
    corrupt(root, case) if case != "queues-and-index" else _mutate_queues_and_index(root, 3)
    engine = SparkEngine(session=spark)
    chunks = []
    real_map = engine.map
    engine.map = lambda items, fn, schema: chunks.append(len(items)) or real_map(items, fn, schema)

    def rep(level, limit, eng=None, chunk_records=None):
        r = verify(Store(root), VerifyOptions(level=level, limit_per_check=limit, chunk_records=chunk_records),
                   engine=eng, split_size=30000).as_dict()
        return json.dumps(r, sort_keys=True)
    for level, limit, chunk_records in (("deep", None, 7), ("deep", 2, 40), ("shallow", None, 25)):
        assert rep(level, limit, engine, chunk_records) == rep(level, limit), (level, limit)
    assert len(chunks) == 3 and min(chunks) > 5


def test_query_key_scan_over_a_fleet_in_one_spark_job(spark):
    """query-key --scan --engine spark over several stores: per store the local scan's answer."""
    from rmqtool.ops.query.keyscan import query_key_scan_stores
    from rmqtool.ops.query.bykey import query_key
    stores = open_stores([str(reference_store(n)) for n in STORE_NAMES], Store)
    for key in ("key-0005", "hcAaBB"):
        with get_engine("spark", spark=spark) as eng:
            got = query_key_scan_stores(stores, key, eng, split_size=30000)
            assert len({t.store for t in eng.tasks}) == len(stores)
        for (name, res), (name2, store) in zip(got, stores):
            want = query_key(store, key, scan=True)
            assert name == name2
            assert [(h.phy_offset, h.match) for h in res.hits] == [(h.phy_offset, h.match) for h in want.hits]
            assert res.scanned_bytes == want.scanned_bytes


def test_stats_of_a_fleet_in_one_spark_job(spark):
    """stats through Spark: every store's tasks in one job, the sequential walk's rows."""
    from rmqtool.engines.spark import SparkEngine
    from rmqtool.ops.stats import stats_with_engine, store_stats
    stores = open_stores([str(reference_store(n)) for n in STORE_NAMES], Store)
    want = [row for name, s in stores for row in store_stats(s, name, "minute").rows()]
    engine = SparkEngine(session=spark)
    runs = []
    real_run = engine.run
    engine.run = lambda *a, **kw: runs.append(1) or real_run(*a, **kw)
    got = [row for st in stats_with_engine(engine, stores, "minute", split_size=50000) for row in st.rows()]
    assert got == want
    assert len(runs) == 1


def test_verify_of_a_fleet_in_one_spark_job(spark):
    """verify of several stores through Spark: one job walks them all (parts in staging), and
    each report is the store's own sequential report."""
    from rmqtool.engines.spark import SparkEngine
    from rmqtool.ops.verify.engine_walk import fleet_walk
    from rmqtool.ops.verify import VerifyOptions, verify
    stores = open_stores([str(reference_store(n)) for n in STORE_NAMES], Store)
    options = VerifyOptions(level="deep", limit_per_check=None)
    engine = SparkEngine(session=spark)
    with fleet_walk(engine, stores, True, split_size=50000) as fleet:
        got = [verify(s, options, engine=engine, prepared=fleet.walks[name]).as_dict() for name, s in stores]
        staging_root = fleet.staging.root
    assert got == [verify(s, options).as_dict() for _, s in stores]
    assert not os.path.exists(staging_root)
