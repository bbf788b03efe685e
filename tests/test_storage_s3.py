"""Stores on object storage: every command reads ``s3://`` exactly as it reads the local copy.

The reference stores are uploaded to a local S3-compatible server (moto in server mode on
127.0.0.1, ``tests/s3server.py``) and the golden cases (``tests/golden/cases.py``: info, dump,
locate, verify, query-key/-id/-queue, rebuild --output) run on ``s3://bucket/<store>`` must print
what they print on the local store; the other store kinds, the engines, globs, and the errors of
a missing bucket, refused credentials and a truncated object are checked beside them.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from cases import GOLDEN, ROOT, STORES, cases, run_case  # noqa: E402
from conftest import dledger_store, reference_store, run_cli, timer_store_root  # noqa: E402

pytest.importorskip("pyarrow")
pytest.importorskip("moto")
pytest.importorskip("boto3")

REFERENCE = ROOT / "fixtures" / "reference"
OTHER_KINDS = ("propcrc-lmq-batchcq", "rocksdb-cq", "dledger", "timer")


def local_root(name: str) -> Path:
    return {"dledger": dledger_store, "timer": timer_store_root}.get(name, lambda: reference_store(name))()


@pytest.fixture(scope="module")
def s3():
    from s3server import S3Server
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    saved = dict(os.environ)
    os.environ.update(server.env())
    server.bucket("fleet")
    for name in STORES + OTHER_KINDS:
        server.upload(local_root(name), "fleet", name)
    yield server
    os.environ.clear()
    os.environ.update(saved)
    server.stop()


def _answers(name: str) -> dict:
    with gzip.open(REFERENCE / "answers" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _golden_cases():
    """Every golden case of the first store; of the others, verify's (what differs between stores
    is what verify finds: a crashed tail, mixed versions). Not export's: every exported row names
    its store by its directory (``store`` here, ``basic`` in the bucket); the export tests below
    compare the two."""
    for name in STORES:
        for case, argv in cases(name, _answers(name)).items():
            if case.startswith("export"):
                continue
            if name == STORES[0] or case.startswith("verify"):
                yield pytest.param(name, case, argv, id=f"{name}-{case}")


@pytest.mark.parametrize("name,case,argv", list(_golden_cases()))
def test_golden_output_through_s3(s3, tmp_path, name, case, argv):
    """The command on s3://fleet/<store> prints the golden output of the local store."""
    got = run_case(argv, f"s3://fleet/{name}", tmp_path / "out", ROOT)
    assert _listing_order(got) == _listing_order((GOLDEN / name / f"{case}.out").read_text(encoding="utf-8"))


def _listing_order(record: str) -> str:
    """A rebuild lists the files it replaces and keeps in directory order: the local walk's
    (the filesystem's order) and an object store's (sorted) differ; the lists' contents must not."""
    head, sep, rest = record.partition("--- stdout\n")
    body, sep2, files = rest.partition("--- files\n")
    try:
        data = json.loads(body)
    except ValueError:
        return record

    def sort(obj):
        if isinstance(obj, dict):
            return {k: sorted(v) if k in ("files_replaced", "files_kept") and isinstance(v, list) else sort(v)
                    for k, v in obj.items()}
        return [sort(v) for v in obj] if isinstance(obj, list) else obj
    return head + sep + json.dumps(sort(data), indent=2, ensure_ascii=False) + "\n" + sep2 + files


def _same(name: str, *args) -> None:
    local, uri = str(local_root(name)), f"s3://fleet/{name}"
    a = run_cli(*[x.replace("{store}", local) for x in args])
    b = run_cli(*[x.replace("{store}", uri) for x in args])

    def norm(text: str) -> str:          # a RocksDB ConsumeQueue's view is a fresh temporary directory
        return re.sub(r"rmqtool-rocksdb-cq-\w+", "rmqtool-rocksdb-cq-<tmp>", text)
    assert (b.code, norm(b.out.replace(uri, local))) == (a.code, norm(a.out)), (name, args, b.err[-2000:])


@pytest.mark.parametrize("name", OTHER_KINDS)
def test_other_store_kinds_through_s3(s3, name):
    """DLedger members, timer stores, RocksDB ConsumeQueues (copied down, opened read-only),
    property-CRC/light-queue/BatchConsumeQueue stores: the local answers."""
    _same(name, "info", "{store}", "-f", "json")
    _same(name, "verify", "{store}", "--level", "deep", "-f", "json")
    _same(name, "dump", "commitlog", "{store}", "-f", "jsonl")
    _same(name, "dump", "consumequeue", "{store}", "-f", "jsonl")
    _same(name, "stats", "{store}", "-f", "json")
    if name == "dledger":
        _same(name, "dump", "dledger-entries", "{store}", "-f", "jsonl")
    if name == "timer":
        _same(name, "dump", "timerlog", "{store}", "-f", "jsonl")


def test_engines_and_export_through_s3(s3, tmp_path):
    """Task-parallel walks read their byte ranges from S3 in worker processes; export writes the
    same Parquet rows."""
    pq = pytest.importorskip("pyarrow.parquet")
    for name in ("basic", "crashed"):
        _same(name, "verify", "{store}", "--level", "deep", "-f", "json", "--jobs", "2", "--split-size", "50000")
        _same(name, "stats", "{store}", "-f", "json", "--jobs", "2", "--split-size", "50000")
    local, uri = str(reference_store("mixed")), "s3://fleet/mixed"
    for src, out in ((local, tmp_path / "a"), (uri, tmp_path / "b")):
        r = run_cli("export", src, "--to", str(out), "--jobs", "2")
        assert r.code == 0, r.err
    rows = [pq.read_table(out).sort_by([("phy_offset", "ascending")]).to_pylist() for out in (tmp_path / "a", tmp_path / "b")]
    for row in rows[1]:
        row["file"] = row["file"].replace(uri, local)       # each row names the file it came from
    assert rows[0] == rows[1] and rows[0]


def test_globs_over_a_bucket(s3):
    """STORE... globs expand on object storage: each row names its store, one fleet summary."""
    r = run_cli("verify", "s3://fleet/[bcm]*", "-f", "jsonl", "--jobs", "2")
    lines = [json.loads(x) for x in r.out.splitlines() if x]
    fleet = lines[-1]
    assert fleet["type"] == "fleet" and fleet["stores"] == 3
    assert {x["store"] for x in lines[:-1] if "store" in x} == {"basic", "crashed", "mixed"}
    stats = run_cli("stats", "s3://fleet/[bm]*", "-f", "jsonl").jsonl()
    assert {x["store"] for x in stats} == {"basic", "mixed"}
    hits = run_cli("query-key", "s3://fleet/[bm]*", "key-0005", "--scan", "-f", "jsonl").jsonl()
    assert hits and {x["store"] for x in hits} <= {"basic", "mixed"}
    assert run_cli("verify", "s3://fleet/nothing-*").code == 2


def test_a_fleet_report_over_a_bucket(s3, tmp_path):
    """`report 's3://bucket/*'`: one summary row per store, then each store's section (issue 36)."""
    out = tmp_path / "fleet.html"
    r = run_cli("report", "s3://fleet/[bc]*", "-o", out, "--level", "shallow")
    assert r.code == 0, r.err
    text = out.read_text(encoding="utf-8")
    assert text.count('<section class="store') == 2 and 'href="#store-1"' in text and 'href="#store-2"' in text
    assert ">abnormal shutdown<" in text and ">clean shutdown<" in text and "s3://fleet/crashed" in text


def test_remote_stores_are_read_only(s3, tmp_path):
    for args in (["rebuild", "consumequeue", "s3://fleet/basic"], ["write", "s3://fleet/new", "--synthetic", "3"],
                 ["rebuild", "index", "s3://fleet/basic", "--output", "s3://fleet/out"]):
        r = run_cli(*args)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, (args, r.err)
    # each says what its own --output takes: the timer wheel is one file
    assert "--output DIR" in _one_line_exit_2("rebuild", "all", "s3://fleet/basic", "--yes")
    assert "--output FILE" in _one_line_exit_2("rebuild", "timerwheel", "s3://fleet/basic", "--yes")
    r = run_cli("rebuild", "consumequeue", "s3://fleet/basic", "--output", str(tmp_path / "cq"), "-f", "json",
                "--allow-truncate")
    assert r.code == 0, r.err


def _one_line_exit_2(*args) -> str:
    r = run_cli(*args)
    assert r.code == 2, (args, r.code, r.out[-500:], r.err[-2000:])
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err, r.err
    return lines[0]


def test_missing_bucket_and_missing_store(s3):
    assert "s3://no-such-bucket/basic" in _one_line_exit_2("info", "s3://no-such-bucket/basic")
    assert "s3://fleet/absent" in _one_line_exit_2("verify", "s3://fleet/absent")


def test_truncated_object(s3):
    """A CommitLog object shorter than its neighbours: the same findings as the local store with
    the same file cut; a checkpoint cut short is one line, exit 2, naming it."""
    data = (reference_store("basic") / "commitlog" / "00000000000000098304").read_bytes()
    s3.upload(reference_store("basic"), "fleet", "cut")
    s3.put("fleet", "cut/commitlog/00000000000000098304", data[:5000])
    r = run_cli("verify", "s3://fleet/cut", "-f", "json")
    assert r.code == 1
    checks = {f["check"] for f in json.loads(r.out)["findings"]}
    assert "commitlog.file-size" in checks or "commitlog.torn" in checks or checks, checks
    s3.put("fleet", "cut/checkpoint", b"\0" * 7)
    assert "s3://fleet/cut/checkpoint" in _one_line_exit_2("dump", "checkpoint", "s3://fleet/cut/checkpoint")


def test_refused_credentials_and_unreachable_endpoint(s3, monkeypatch):
    from s3server import S3Server
    auth = S3Server(free_actions=2)          # then credentials are checked: ours are unknown to it
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", auth.endpoint)
        auth.bucket("locked")
        auth.put("locked", "basic/checkpoint", (reference_store("basic") / "checkpoint").read_bytes())
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
        line = _one_line_exit_2("info", "s3://locked/basic")
        assert "s3://locked/basic" in line
    finally:
        auth.stop()
    from s3server import free_port
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    line = _one_line_exit_2("--storage-option", "connect_timeout=1", "--storage-option", "request_timeout=2",
                            "info", "s3://fleet/basic")
    assert "s3://fleet/basic" in line


def test_storage_options_and_s3a_settings():
    from rmqtool.io import storage
    opts = storage.parse_options(["region=eu-west-1"], ["spark.hadoop.fs.s3a.endpoint=http://minio:9000",
                                                        "spark.hadoop.fs.s3a.path.style.access=true",
                                                        "spark.executor.memory=2g"])
    assert opts == {"endpoint_override": "http://minio:9000", "path_style": "true", "region": "eu-west-1"}
    kw = storage._s3_kwargs(opts)
    assert (kw["endpoint_override"], kw["scheme"], kw["region"], kw["force_virtual_addressing"]) == \
        ("minio:9000", "http", "eu-west-1", False)
    assert _one_line_exit_2("--storage-option", "novalue", "info", "s3://fleet/basic")


def test_remote_path_names():
    from rmqtool.io.storage import RemotePath, is_uri, path
    p = RemotePath("s3a://bucket/a/b/../store/")
    assert str(p) == "s3a://bucket/a/store" and p.name == "store" and str(p.parent) == "s3a://bucket/a"
    assert str(p / "commitlog" / "00000000000000000000") == "s3a://bucket/a/store/commitlog/00000000000000000000"
    assert is_uri("gs://b/x") and not is_uri("/tmp/x") and not is_uri("file:///tmp/x")
    assert str(path("file:///tmp/x")) == "/tmp/x" and path("s3://b/k") == RemotePath("s3://b/k")
    import pickle
    assert pickle.loads(pickle.dumps(p)) == p


def _exported_rows(where: str) -> list:
    """The rows of an export (a local directory or an ``s3://`` URI) by CommitLog offset, without the
    ``file`` column (the CommitLog path each row was read from)."""
    import pyarrow.dataset as ds
    from rmqtool.io.storage import RemotePath, is_uri
    if is_uri(where):
        remote = RemotePath(where)
        table = ds.dataset(remote.fs_path, filesystem=remote.fs, partitioning="hive", format="parquet").to_table()
    else:
        table = ds.dataset(where, partitioning="hive", format="parquet").to_table()
    return table.sort_by([("phy_offset", "ascending")]).drop_columns(["file"]).to_pylist()


def _exported_keys(s3, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.client.list_objects_v2(Bucket="fleet", Prefix=prefix)["Contents"]]


def test_export_to_s3(s3, tmp_path):
    """export --to s3://...: the part files, _topics.json and _SUCCESS land in the bucket with the
    rows of a local export; a second export needs --force, and replaces only a previous export."""
    pytest.importorskip("pyarrow.parquet")
    store = str(reference_store("mixed"))
    assert run_cli("export", store, "--to", str(tmp_path / "local")).code == 0
    r = run_cli("export", store, "--to", "s3://fleet/exports/mixed", "--jobs", "2")
    assert r.code == 0, r.err
    keys = _exported_keys(s3, "exports/mixed/")
    assert "exports/mixed/_SUCCESS" in keys and "exports/mixed/_topics.json" in keys
    assert not any("/." in k for k in keys)                    # no temporaries left
    assert _exported_rows("s3://fleet/exports/mixed") == _exported_rows(str(tmp_path / "local"))
    assert run_cli("export", store, "--to", "s3://fleet/exports/mixed").code == 3
    assert run_cli("export", store, "--to", "s3://fleet/exports/mixed", "--force").code == 0
    s3.put("fleet", "exports/other/notes.txt", b"x")
    assert run_cli("export", store, "--to", "s3://fleet/exports/other", "--force").code == 3


@pytest.mark.spark
def test_spark_engine_exports_from_and_to_s3(s3, tmp_path):
    """export --engine spark from ``s3://`` to ``s3://``: executors open the byte ranges and write
    the parts themselves. (verify --engine spark through ``s3://`` runs on a standalone cluster in
    test_spark_cluster.py; each command here starts a JVM.)"""
    pytest.importorskip("pyspark")
    from rmqtool.engines.spark import find_java
    if find_java() is None:
        pytest.skip("no Java runtime")
    from conftest import run_cli_process
    uri = "s3://fleet/crashed"
    c = run_cli_process("export", uri, "--to", "s3://fleet/exports/spark", "--engine", "spark", "--master",
                        "local[2]", "--split-size", "50000", timeout=300)
    assert c.returncode == 0, c.stderr[-2000:]
    keys = _exported_keys(s3, "exports/spark/")
    assert "exports/spark/_SUCCESS" in keys and any(k.endswith(".parquet") for k in keys)
    assert run_cli("export", str(reference_store("crashed")), "--to", str(tmp_path / "local")).code == 0
    assert _exported_rows("s3://fleet/exports/spark") == _exported_rows(str(tmp_path / "local"))


def test_verify_parts_staged_on_s3(s3):
    """--staging s3://...: the tasks' parts go to the bucket and are gone after the run."""
    local = str(reference_store("basic"))
    a = run_cli("verify", local, "--level", "deep", "-f", "json")
    b = run_cli("verify", local, "--level", "deep", "-f", "json", "--jobs", "2", "--split-size", "50000",
                "--staging", "s3://fleet/staging")
    assert (b.code, b.out) == (a.code, a.out), b.err
    left = s3.client.list_objects_v2(Bucket="fleet", Prefix="staging/").get("Contents", [])
    # only pyarrow's empty directory marker of the parent prefix may remain
    assert all(o["Key"].endswith("/") and o["Size"] == 0 for o in left), left
