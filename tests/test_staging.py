"""Engine stages leave large parts in staging: the driver takes them one at a time, reports are
unchanged, and nothing is left behind."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from conftest import reference_store, run_cli
from corruptions import corrupt
from rmqtool.engines import get_engine
from rmqtool.errors import UnreadableError
from rmqtool.io.staging import Staging
from rmqtool.io.store import Store
from rmqtool.ops.verify import VerifyOptions, verify

pa = pytest.importorskip("pyarrow")


def test_put_take_discard_close(tmp_path):
    staging = Staging(str(tmp_path))
    a, b = staging.put(b"first"), staging.put(b"second")
    (run_dir,) = os.listdir(tmp_path)
    assert sorted(os.listdir(tmp_path / run_dir)) == sorted([a, b])
    assert staging.take(a) == b"first"
    assert os.listdir(tmp_path / run_dir) == [b]          # taken parts are removed at once
    with pytest.raises(UnreadableError, match="staged part missing"):
        staging.take(a)
    staging.discard(b)
    staging.discard(b)                                   # discarding twice is harmless
    staging.put(b"left over")
    staging.close()
    assert os.listdir(tmp_path) == []                    # the run directory goes, with what it held


def test_read_leaves_the_part_for_a_rerun_task(tmp_path):
    staging = Staging(str(tmp_path))
    ref = staging.put(b"chunk")
    assert staging.read(ref) == staging.read(ref) == b"chunk"
    assert staging.take(ref) == b"chunk"
    with pytest.raises(UnreadableError, match="staged part missing"):
        staging.read(ref)
    staging.close()


def test_default_staging_is_a_temporary_directory_removed_on_close():
    staging = Staging()
    ref = staging.put(b"x")
    assert os.path.exists(os.path.join(staging.root, ref))
    staging.close()
    assert not os.path.exists(staging.root)


class CountingStaging(Staging):
    puts = takes = discards = 0

    def put(self, data):
        type(self).puts += 1
        return super().put(data)

    def take(self, ref):
        type(self).takes += 1
        return super().take(ref)

    def discard(self, ref):
        type(self).discards += 1
        return super().discard(ref)


@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_verify_through_staging_equals_the_sequential_walk(level, tmp_path, store_copy, monkeypatch):
    root = store_copy("basic")
    tmp_path = tmp_path / "staging"
    tmp_path.mkdir()
    corrupt(root, "bad-magic")
    options = VerifyOptions(level=level, limit_per_check=None)
    expected = verify(Store(root), options).as_dict()
    monkeypatch.setattr("rmqtool.io.staging.Staging", CountingStaging)
    CountingStaging.puts = CountingStaging.takes = CountingStaging.discards = 0
    with get_engine("local", jobs=1, staging=str(tmp_path)) as engine:     # in-process: puts counted
        got = verify(Store(root), options, engine=engine, split_size=20000).as_dict()
    assert got == expected
    # every part is taken once, except those of tasks re-run after a false resync (discarded);
    # take() also discards what it took
    assert CountingStaging.puts > 1
    assert CountingStaging.puts == CountingStaging.discards
    assert CountingStaging.takes <= CountingStaging.puts
    assert os.listdir(tmp_path) == []


def test_staging_closed_when_the_walk_fails(tmp_path, monkeypatch):
    def broken(*a, **kw):
        raise UnreadableError("disk gone", "somewhere")
    monkeypatch.setattr("rmqtool.ops.verify.commitlog.CommitLogVerifier._adopt_file", broken)
    with get_engine("local", jobs=1, staging=str(tmp_path)) as engine:
        with pytest.raises(UnreadableError):
            verify(Store(reference_store("basic")), VerifyOptions(level="deep"), engine=engine, split_size=20000)
    assert os.listdir(tmp_path) == []


def test_discarded_task_output_is_removed_from_staging(tmp_path):
    from rmqtool.ops.verify.engine_walk import PART_SCHEMA
    staging = Staging(str(tmp_path))
    refs = [staging.put(b"a"), staging.put(b"b")]
    table = pa.Table.from_pylist([{"task": 0, "records": 1, "part": None, "ref": r} for r in refs],
                                 schema=PART_SCHEMA)
    staging.discard_rows(table)
    assert os.listdir(tmp_path / os.listdir(tmp_path)[0]) == []
    staging.close()


def test_spark_engine_stages_on_this_machine_only():
    from rmqtool.engines.spark import SparkEngine

    def engine(master):
        e = SparkEngine.__new__(SparkEngine)
        e.spark = SimpleNamespace(sparkContext=SimpleNamespace(master=master))
        e.staging_location = None
        return e
    for master in ("local[2]", "local", "spark://127.0.0.1:7077", "spark://localhost:7077"):
        assert engine(master).on_this_machine(), master
        assert engine(master).open_staging() is not None
    remote = engine("spark://10.0.0.5:7077")
    assert not remote.on_this_machine()
    assert remote.open_staging() is None              # parts travel with the rows: still correct
    remote.staging_location = "/shared/staging"
    assert remote.open_staging().root.startswith("/shared/staging/rmqtool-staging-")


def test_cli_staging_option(tmp_path, store_copy):
    root = store_copy("basic")
    tmp_path = tmp_path / "staging"
    tmp_path.mkdir()
    plain = run_cli("verify", str(root), "--level", "deep", "-f", "json")
    staged = run_cli("verify", str(root), "--level", "deep", "-f", "json", "--jobs", "2",
                     "--split-size", "20000", "--staging", str(tmp_path))
    assert staged.code == plain.code == 0
    assert json.loads(staged.out) == json.loads(plain.out)
    assert os.listdir(tmp_path) == []
    bad = run_cli("verify", str(root), "--jobs", "2", "--staging", str(tmp_path / "missing"))
    assert bad.code == 2 and "--staging" in bad.err and "\n" not in bad.err.strip()


@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_the_driver_never_reads_the_walked_records(level, tmp_path, monkeypatch):
    """With a staging location the records go from the walk's tasks to the join tasks: the
    driver adopts each part by reference (its count, first and last offset) and never reads it."""
    def refuse(self, staging):
        raise AssertionError("the driver read a part's columns")
    root = reference_store("basic")
    options = VerifyOptions(level=level, limit_per_check=None, chunk_records=7)     # many chunks of many parts
    expected = verify(Store(root), options).as_dict()
    monkeypatch.setattr("rmqtool.ops.verify.engine_walk.FilePart.cols", refuse)
    with get_engine("local", jobs=2, staging=str(tmp_path)) as engine:
        got = verify(Store(root), options, engine=engine, split_size=20000)
    assert got.as_dict() == expected
    assert os.listdir(tmp_path) == []
