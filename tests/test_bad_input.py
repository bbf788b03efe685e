"""Bad input is one clear line naming the file and what was expected, exit 2, never "internal
error" (issue 19 points 3 and 4); defaults that keep data (point 5)."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import reference_store, run_cli


def _one_error(r, *needles):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.err
    assert "internal error" not in r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_write_bad_arguments(tmp_path):
    _one_error(run_cli("write", tmp_path / "s", "--from", "/nonexistent"), "/nonexistent", "no such file")
    _one_error(run_cli("write", tmp_path / "s", "--from", tmp_path), "is a directory")
    _one_error(run_cli("write", tmp_path / "s", "--synthetic", "-5"), "--synthetic -5", ">= 0")
    _one_error(run_cli("write", tmp_path / "s", "--synthetic", "5", "--body-size", "600-400"),
               "--body-size '600-400'", "MIN <= MAX")
    _one_error(run_cli("write", tmp_path / "s", "--synthetic", "5", "--body-size", "x"), "expected MIN-MAX")
    assert not (tmp_path / "s").exists()


def test_dump_checkpoint_of_a_commitlog_file():
    f = sorted((reference_store("basic") / "commitlog").iterdir())[0]
    _one_error(run_cli("dump", "checkpoint", f), str(f), "not a checkpoint", "4096")
    for name in ("basic", "mixed", "crashed"):               # the real ones still read
        assert run_cli("dump", "checkpoint", reference_store(name), "-f", "json").code == 0


def test_dump_checkpoint_with_bytes_after_the_fields(tmp_path):
    cp = tmp_path / "checkpoint"
    data = bytearray((reference_store("basic") / "checkpoint").read_bytes())
    data[100] = 1
    cp.write_bytes(bytes(data))
    _one_error(run_cli("dump", "checkpoint", cp), f"{cp}@40", "non-zero bytes")


@pytest.mark.parametrize("sub", ["commitlog", "consumequeue", "index"])
def test_verify_and_rebuild_refuse_a_data_directory_as_the_root(sub):
    d = reference_store("basic") / sub
    what = f"is {'an' if sub == 'index' else 'a'} {sub} directory"
    _one_error(run_cli("verify", d), str(d), what, "pass the store root")
    _one_error(run_cli("rebuild", "all", d, "--dry-run"), what)


def test_renamed_commitlog_file_needs_its_base_offset(tmp_path):
    src = sorted((reference_store("basic") / "commitlog").iterdir())[1]
    renamed = tmp_path / "segment.bak"
    shutil.copy(src, renamed)
    _one_error(run_cli("dump", "commitlog", renamed), str(renamed), "--base-offset")
    want = run_cli("dump", "commitlog", src, "-f", "jsonl", "--limit", "3").jsonl()
    got = run_cli("dump", "commitlog", renamed, "-f", "jsonl", "--limit", "3",
                  "--base-offset", int(src.name)).jsonl()
    assert [r["phy_offset"] for r in got] == [r["phy_offset"] for r in want]


def test_mistyped_topic_and_queue():
    root = reference_store("basic")
    _one_error(run_cli("verify", root, "--topic", "ordertopic"), "no topic 'ordertopic'",
               "did you mean 'OrderTopic'")
    _one_error(run_cli("query-queue", root, "NoTopic", "0"), "no topic 'NoTopic'")
    _one_error(run_cli("query-queue", root, "OrderTopic", "9", "--offset", "0"), "has no queue 9")
    _one_error(run_cli("verify", root, "--topic", "OrderTopic", "--queue", "7"), "has no queue 7")
    assert run_cli("verify", root, "--topic", "OrderTopic", "--queue", "1").code == 0


def test_export_keeps_bodies_by_default(tmp_path):
    assert run_cli("export", reference_store("basic"), "--to", tmp_path / "o", "-f", "jsonl").code == 0
    rows = [json.loads(line) for f in (tmp_path / "o").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(rows) == 3000 and all(r["body"] is not None for r in rows if r["body_length"])


def test_info_names_what_it_counts():
    def info(*extra):
        got = json.loads(run_cli("info", reference_store("basic"), "-f", "json", *extra).out)
        return (got[0] if isinstance(got, list) else got)["commitlog"]
    fast, counted = info(), info("--count")
    assert fast["messages"] is None and fast["messages_from_recovery_start"] == 74
    assert counted["messages"] == 3000 and counted["messages_from_recovery_start"] == 74
    out = run_cli("info", reference_store("basic")).err          # the text: on stderr when stdout is piped
    assert "74 from the recovery start file (--count for the whole store)" in out


def test_traceback_option_adds_the_traceback_and_keeps_the_line_and_code(tmp_path):
    """--traceback (or RMQTOOL_TRACEBACK=1) prints the traceback for a bug report before the
    usual one line; the exit code stays the documented 2."""
    import os
    from conftest import run_cli_process
    args = ["export", reference_store("basic"), "--to", "/dev/null/x"]
    env = {k: v for k, v in os.environ.items() if k != "RMQTOOL_TRACEBACK"}
    plain = run_cli_process(*args, env=env)
    assert plain.returncode == 2 and plain.stderr == "error: /dev/null/x: Not a directory\n", plain.stderr
    for extra, more_env in ((["--traceback"], {}), ([], {"RMQTOOL_TRACEBACK": "1"})):
        r = run_cli_process(*extra, *args, env=dict(env, **more_env))
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("Traceback (most recent call last):"), r.stderr
        assert r.stderr.endswith("error: /dev/null/x: Not a directory\n"), r.stderr
