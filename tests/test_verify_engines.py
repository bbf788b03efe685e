"""verify through engine tasks (process pool, split byte ranges) reports exactly what the
sequential walk reports: same findings, summary and forecast, on clean and corrupted stores."""
from __future__ import annotations

import json

import pytest

from conftest import STORE_NAMES, dledger_copy, reference_store, run_cli
from corruptions import CASES, DLEDGER_CASES, corrupt, corrupt_dledger
from rmqtool.engines import get_engine
from rmqtool.io.store import Store
from rmqtool.ops.verify import VerifyOptions, verify

pytest.importorskip("pyarrow")


def both(root, level: str, engine, split_size: int):
    seq = verify(Store(root), VerifyOptions(level=level, limit_per_check=None)).as_dict()
    par = verify(Store(root), VerifyOptions(level=level, limit_per_check=None), engine=engine,
                 split_size=split_size).as_dict()
    return seq, par


@pytest.fixture(scope="module")
def pool():
    with get_engine("local", jobs=2) as eng:
        yield eng


@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_reference_stores_same_report(level, pool):
    for name in STORE_NAMES:
        seq, par = both(reference_store(name), level, pool, 7000)
        assert seq == par, name
        assert pool.tasks and len(pool.tasks) > 3 * len(Store(reference_store(name)).commitlog.files)


@pytest.mark.parametrize("case", CASES)
def test_corrupted_store_same_findings(case, store_copy, pool):
    root = store_copy("crashed" if case == "torn-tail" else "basic")
    corrupt(root, case)
    seq, par = both(root, "deep", pool, 5000)
    assert seq["summary"]["findings"]["error"] + seq["summary"]["findings"]["warning"] > 0, case
    assert seq == par, case


@pytest.mark.parametrize("case", DLEDGER_CASES)
def test_corrupted_dledger_store_same_findings(case, tmp_path, pool):
    root = dledger_copy(tmp_path / "s")
    corrupt_dledger(root, case)
    seq, par = both(root, "deep", pool, 20000)
    assert seq["summary"]["findings"]["error"] + seq["summary"]["findings"]["warning"] > 0, case
    assert seq == par, case


def test_cli_jobs_and_split_size_give_the_same_json(store_copy):
    root = store_copy("basic")
    corrupt(root, "bad-magic")
    a = run_cli("verify", str(root), "--level", "deep", "-f", "json")
    b = run_cli("verify", str(root), "--level", "deep", "-f", "json", "--jobs", "2", "--split-size", "20000")
    assert a.code == b.code == 1
    assert json.loads(a.out) == json.loads(b.out)


def test_cli_bad_engine_options_are_usage_errors():
    store = str(reference_store("basic"))
    for args in (["--engine", "flink"], ["--jobs", "-1"], ["--split-size", "0"]):
        r = run_cli("verify", store, *args)
        assert r.code == 2 and r.err.startswith("error:") and "Traceback" not in r.err, args


def test_verify_a_fleet_reports_each_store(store_copy):
    """verify STORE... : one report per store, JSONL lines tagged with the store, worst exit code."""
    bad = store_copy("basic")
    corrupt(bad, "bad-magic")
    good = str(reference_store("mixed"))
    fleet = run_cli("verify", good, str(bad), "-f", "json")
    assert fleet.code == 1
    doc = json.loads(fleet.out)
    alone = [json.loads(run_cli("verify", p, "-f", "json").out) for p in (good, str(bad))]
    assert doc["reports"] == alone and doc["exit_code"] == 1
    assert doc["fleet"] == {"stores": 2, "clean": 1, "with_findings": 1, "stores_with_findings": [bad.name],
                            "worst_exit_code": 1}
    lines = run_cli("verify", good, str(bad), "-f", "jsonl", "--jobs", "2").jsonl()
    assert lines[-1] == {"type": "fleet", **doc["fleet"]}
    lines = lines[:-1]
    assert {line["store"] for line in lines} == {"mixed", bad.name}
    assert [line["check"] for line in lines if line["type"] == "finding" and line["store"] == "mixed"
            and line["severity"] != "info"] == []
    assert run_cli("verify", good, good + "/../mixed").code == 0


@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_a_fleet_is_walked_in_one_engine_run(level, store_copy, monkeypatch):
    """verify STORE... --jobs N: every store's walk as the tasks of one run; each report is the
    store's own sequential report."""
    from rmqtool.engines import Engine
    bad = store_copy("basic")
    corrupt(bad, "total-size")
    paths = [str(reference_store("mixed")), str(bad), str(reference_store("crashed"))]
    runs = []
    real = Engine.run
    monkeypatch.setattr(Engine, "run", lambda self, *a, **kw: runs.append(len(a[0])) or real(self, *a, **kw))
    fleet = json.loads(run_cli("verify", *paths, "--level", level, "-f", "json", "--jobs", "2",
                               "--split-size", "30000").out)
    assert len(runs) == 1 and runs[0] > 3
    monkeypatch.setattr(Engine, "run", real)
    alone = [json.loads(run_cli("verify", p, "--level", level, "-f", "json").out) for p in paths]
    assert fleet["reports"] == alone
