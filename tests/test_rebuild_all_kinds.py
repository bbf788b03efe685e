"""`rebuild all` rebuilds every structure the store derives from its CommitLog (ConsumeQueues,
BatchConsumeQueues, IndexFiles) and the timer wheel from the timer log, on every engine, with
``--output`` writing each beside the others; the operation holds the writer lock however it is
called; the rebuild commands all take the engine options."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import reference_store, run_cli, timer_store_root
from rmqtool.errors import RefusedError
from rmqtool.io.store import Store
from test_engines import _index_files, _tree

BATCHCQ = "propcrc-lmq-batchcq"


def _same_trees(out: Path, root: Path, trees=("consumequeue", "batchconsumequeue")) -> None:
    for tree in trees:
        assert _tree(out / tree) == _tree(root / tree), tree
    assert _index_files(out / "index") == _index_files(root / "index")     # names are creation times


def test_rebuild_all_output_writes_batchconsumequeue_beside_the_others(tmp_path):
    root = reference_store(BATCHCQ)
    r = run_cli("rebuild", "all", root, "--output", tmp_path / "out", "-f", "json")
    assert r.code == 0, r.err
    kinds = [x["kind"] for x in json.loads(r.out)]
    assert kinds == ["consumequeue", "index", "batchconsumequeue"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["batchconsumequeue", "consumequeue", "index"]
    _same_trees(tmp_path / "out", root)


def test_rebuild_all_output_writes_the_timer_wheel_beside_the_others(tmp_path):
    root = timer_store_root()
    r = run_cli("rebuild", "all", root, "--output", tmp_path / "out", "-f", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [x.get("kind") for x in rows] == ["consumequeue", "index", "timerwheel"]
    assert rows[2]["differing_slots"] == 0 and rows[2]["output"] == str(tmp_path / "out" / "timerwheel")
    assert (tmp_path / "out" / "timerwheel").read_bytes() == (root / "timerwheel").read_bytes()
    _same_trees(tmp_path / "out", root, ("consumequeue",))


def test_rebuild_all_in_place_rebuilds_a_damaged_batchconsumequeue(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(reference_store(BATCHCQ), root, symlinks=True)
    victim = sorted(p for p in (root / "batchconsumequeue").rglob("*") if p.is_file())[0]
    victim.write_bytes(bytes(len(victim.read_bytes())))          # every unit zeroed
    r = run_cli("rebuild", "all", root, "--yes", "--allow-truncate")
    assert r.code == 0, r.err
    assert _tree(root / "batchconsumequeue") == _tree(reference_store(BATCHCQ) / "batchconsumequeue")


@pytest.mark.parametrize("command", ["all", "batchconsumequeue", "timerwheel", "consumequeue", "index"])
def test_every_rebuild_command_takes_the_engine_options(command):
    from typer.main import get_command
    from rmqtool.cli import app
    group = get_command(app).commands["rebuild"]
    options = {o for p in group.commands[command].params for o in p.opts}
    assert {"--engine", "--jobs", "--master", "--remote", "--spark-conf", "--split-size", "--staging"} <= options


def test_rebuild_all_as_a_library_takes_the_writer_lock(tmp_path):
    """ops.rebuild.rebuild_all called directly (not through the CLI) is refused while another
    rmqtool holds the store, and holds the lock itself while it runs."""
    from rmqtool.io.storelock import read_side, writer_lock
    from rmqtool.ops import rebuild as rb
    root = tmp_path / "store"
    shutil.copytree(reference_store("mixed"), root, symlinks=True)
    with writer_lock(root, "rmqtool write"):
        with pytest.raises(RefusedError):
            rb.rebuild_all(Store(root), Store(root).index_geometry, confirm=lambda r: True)
    seen = []
    real = rb._rebuild

    def spy(*args, **kwargs):
        seen.append(read_side(root))
        return real(*args, **kwargs)
    rb._rebuild = spy
    try:
        rb.rebuild_all(Store(root), Store(root).index_geometry, confirm=lambda r: True, allow_truncate=True)
        rb.rebuild_consumequeue(Store(root), confirm=lambda r: True, allow_truncate=True)
    finally:
        rb._rebuild = real
    assert [s["command"] for s in seen] == ["rmqtool rebuild all", "rmqtool rebuild consumequeue"]


@pytest.mark.spark
def test_rebuild_all_on_spark_writes_every_tree(tmp_path):
    pytest.importorskip("pyspark")
    root = reference_store(BATCHCQ)
    r = run_cli("rebuild", "all", root, "--output", tmp_path / "out", "--engine", "spark", "--master", "local[2]",
                "--split-size", "40000", "-f", "json")
    assert r.code == 0, r.err
    _same_trees(tmp_path / "out", root)


@pytest.mark.spark
def test_rebuild_of_an_s3_store_on_spark_into_a_local_output(tmp_path):
    """A store on object storage rebuilt with --engine spark into a local --output (it failed with
    ``TypeError: ... not RemotePath``)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("moto")
    import logging
    import os
    from conftest import run_cli_process
    from s3server import S3Server
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    try:
        server.bucket("fleet")
        uri = server.upload(reference_store(BATCHCQ), "fleet", "propcrc")
        env = {**os.environ, **server.env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        r = run_cli_process("rebuild", "consumequeue", uri, "--output", tmp_path / "cq", "--engine", "spark",
                            "--master", "local[2]", "-f", "json", env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert _tree(tmp_path / "cq") == _tree(reference_store(BATCHCQ) / "consumequeue")
        r = run_cli_process("rebuild", "all", uri, "--output", tmp_path / "all", "--engine", "spark",
                            "--master", "local[2]", "-f", "json", env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        _same_trees(tmp_path / "all", reference_store(BATCHCQ))
    finally:
        server.stop()


def test_a_rebuild_through_engine_tasks_refuses_a_linked_topic_as_the_local_one(tmp_path):
    """The engine path runs the same guards: a full rebuild that has records for a topic whose
    directory is a symlink is refused (exit 3) before anything is installed, on either walk."""
    import os
    from rmqtool.ops.rebuild import rebuild_consumequeue
    from test_engines import task_engine
    from test_hostile_names import tree
    from test_store_symlinks import GEOMETRY, rows
    store = tmp_path / "store"
    assert run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows(["A", "Linked"])).code == 0
    outside = tmp_path / "outside" / "Linked"
    outside.parent.mkdir()
    os.rename(store / "consumequeue" / "Linked", outside)
    os.symlink(outside, store / "consumequeue" / "Linked")
    before = tree(tmp_path)
    for engine in (None, task_engine(1)):
        with pytest.raises(RefusedError, match="consumequeue/Linked") as exc:
            rebuild_consumequeue(Store(store), confirm=lambda r: True, engine=engine, split_size=4096)
        assert exc.value.exit_code == 3
        assert tree(tmp_path) == before


def test_rebuild_all_in_place_replaces_the_timer_wheel_with_a_backup(tmp_path):
    from conftest import timer_copy
    root = timer_copy(tmp_path / "timer")
    want = (root / "timerwheel").read_bytes()
    r = run_cli("rebuild", "all", root, "--yes", "-f", "json")
    assert r.code == 0, r.err
    wheel = json.loads(r.out)[-1]
    assert wheel["backup"] and Path(wheel["backup"]).read_bytes() == want
    assert (root / "timerwheel").read_bytes() == want
