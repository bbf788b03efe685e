"""`rebuild` and `write`: the end-of-run summary (files written, units/entries, time; JSON with
--format json) and the progress bar that appears on a terminal once a run has taken more than 1 s.

The clock is faked (no timed assertions): the bar's clock is replaced by one that a test moves.
"""
from __future__ import annotations

import io
import json
import shutil
from types import SimpleNamespace

import pytest
from rich.console import Console

from conftest import load_answers, reference_store, run_cli
from rmqtool.cli import progress


class FakeClock:
    """perf_counter() that advances ``step`` seconds at every call."""

    def __init__(self, step: float):
        self.now, self.step = 1000.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def terminal(monkeypatch):
    """Point the progress bar at a recording terminal console and at a fake clock."""
    def install(step: float, is_terminal: bool = True) -> io.StringIO:
        buf = io.StringIO()
        console = Console(file=buf, force_terminal=is_terminal, width=120, color_system=None)
        monkeypatch.setattr(progress, "stderr", console)
        monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=FakeClock(step).perf_counter))
        return buf
    return install


def _store(tmp_path, name="basic"):
    root = tmp_path / name
    shutil.copytree(reference_store(name), root)
    return root


# --- summaries ------------------------------------------------------------------------------------
def test_rebuild_consumequeue_json_summary(tmp_path):
    root = _store(tmp_path)
    shutil.rmtree(root / "consumequeue")
    res = run_cli("rebuild", "consumequeue", root, "--yes", "--workers", "1", "--cq-file-size", 800, "-f", "json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)[0]
    on_disk = sorted(str(p.relative_to(root / "consumequeue")) for p in (root / "consumequeue").rglob("*")
                     if p.is_file())
    assert sorted(f["path"] for f in doc["files_written"]) == on_disk and all(
        f["size"] == 800 for f in doc["files_written"])
    answers = load_answers("basic")
    assert doc["units"] == sum(len(q["entries"]) for q in answers["consumeQueues"])
    assert doc["records"] == answers["commitlog"]["messageCount"]
    assert isinstance(doc["seconds"], float) and doc["seconds"] >= 0
    assert doc["kind"] == "consumequeue" and doc["dry_run"] is False


def test_rebuild_index_json_and_table_summary(tmp_path):
    root = _store(tmp_path)
    shutil.rmtree(root / "index")
    args = ["--yes", "--workers", "1", "--index-slots", 61, "--index-entries", 350]
    res = run_cli("rebuild", "index", root, *args, "-f", "json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)[0]
    answers = load_answers("basic")
    assert len(doc["files_written"]) == len(answers["indexFiles"]) == len(list((root / "index").iterdir()))
    assert doc["entries"] == sum(f["indexCount"] - 1 for f in answers["indexFiles"])
    assert isinstance(doc["seconds"], float) and doc["seconds"] >= 0
    table = run_cli("rebuild", "index", root, *args)                   # the people's summary says the same
    assert table.code == 0, table.err
    assert f"wrote {len(answers['indexFiles'])} files" in table.out and f"{doc['entries']} entries" in table.out
    assert " s (whole run), " in table.out and "messages/s" in table.out


def test_write_json_summary(tmp_path):
    res = run_cli("write", tmp_path / "w", "--synthetic", 1500, "--seed", 3, "--commitlog-file-size", 65536,
                  "--cq-file-size", 800, "--index-slots", 61, "--index-entries", 350, "-f", "json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)[0]
    root = tmp_path / "w"
    assert doc["records"] == 1500 and doc["cq_units"] == 1500 and doc["index_entries"] > 1500
    assert doc["commitlog_files"] == sorted(p.name for p in (root / "commitlog").iterdir())
    assert doc["index_files"] == sorted(p.name for p in (root / "index").iterdir())
    assert doc["cq_files"] > 0 and isinstance(doc["seconds"], float) and doc["seconds"] >= 0
    units = [r for r in run_cli("dump", "consumequeue", root, "-f", "jsonl").jsonl() if r["kind"] == "UNIT"]
    entries = [r for r in run_cli("dump", "index", root, "-f", "jsonl").jsonl() if r["kind"] == "ENTRY"]
    assert (len(units), len(entries)) == (doc["cq_units"], doc["index_entries"])


# --- progress bars --------------------------------------------------------------------------------
def _rebuild(tmp_path):
    root = _store(tmp_path)
    return run_cli("rebuild", "consumequeue", root, "--yes", "--workers", "1", "-f", "json")


def test_rebuild_shows_a_progress_bar_once_past_one_second(tmp_path, terminal):
    buf = terminal(step=0.7)                 # the second look at the clock is past 1 s
    res = _rebuild(tmp_path)
    assert res.code == 0, res.err
    assert "rebuild consumequeue" in buf.getvalue()
    json.loads(res.out)                      # stdout stays clean JSON


def test_no_progress_bar_for_a_run_under_one_second(tmp_path, terminal):
    buf = terminal(step=0.0)
    assert _rebuild(tmp_path).code == 0
    assert buf.getvalue() == ""


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, terminal):
    buf = terminal(step=5.0, is_terminal=False)
    assert _rebuild(tmp_path).code == 0
    assert buf.getvalue() == ""


def _write_synthetic(out, *extra):
    """``write --synthetic 3000`` in the small reference geometry."""
    return run_cli("write", out, "--synthetic", 3000, "--commitlog-file-size", 65536, "--cq-file-size", 800,
                   "--index-slots", 61, "--index-entries", 350, *extra)


def test_write_shows_a_progress_bar_once_past_one_second(tmp_path, terminal):
    buf = terminal(step=0.7)
    res = _write_synthetic(tmp_path / "w", "-f", "json")
    assert res.code == 0, res.err
    assert "write" in buf.getvalue()
    assert json.loads(res.out)[0]["records"] == 3000
    buf = terminal(step=0.0)
    assert _write_synthetic(tmp_path / "w2").code == 0
    assert buf.getvalue() == ""


def test_write_progress_counts_records_not_bytes(tmp_path, terminal):
    buf = terminal(step=0.7)
    res = _write_synthetic(tmp_path / "w", "-f", "json")
    assert res.code == 0, res.err
    assert "3000/3000 records" in buf.getvalue()
    assert "kB" not in buf.getvalue() and "/3.0" not in buf.getvalue()


def _long_commands(tmp_path):
    store = str(reference_store("basic"))
    return {"export": ["export", store, "--to", tmp_path / "ex", "--format", "jsonl"],
            "stats": ["stats", store, "-f", "json"],
            "report": ["report", store, "-o", tmp_path / "r.html", "--level", "shallow"],
            "verify": ["verify", store, "-f", "json"],
            "compare": ["compare", store, store, "-f", "json"]}


@pytest.mark.parametrize("command", ["export", "stats", "report", "verify", "compare"])
def test_long_commands_show_a_byte_progress_bar_on_a_terminal(tmp_path, terminal, command):
    if command == "export":
        pytest.importorskip("pyarrow")
    buf = terminal(step=0.7)
    res = run_cli(*_long_commands(tmp_path)[command])
    assert res.code == 0, res.err
    total = sum(p.stat().st_size for p in (reference_store("basic") / "commitlog").iterdir())
    whole = f"{total * (2 if command in ('report', 'compare') else 1) / 1e6:.1f}"     # two walks
    assert f"{command} " in buf.getvalue() and f"{whole}/{whole} MB" in buf.getvalue(), buf.getvalue()[-500:]
    if command in ("stats", "verify", "compare"):
        json.loads(res.out)                  # stdout stays clean JSON


@pytest.mark.parametrize("command", ["export", "stats"])
def test_no_progress_bar_in_piped_output(tmp_path, terminal, command):
    pytest.importorskip("pyarrow")
    buf = terminal(step=5.0, is_terminal=False)
    assert run_cli(*_long_commands(tmp_path)[command]).code == 0
    assert buf.getvalue() == ""


def test_engine_progress_counts_every_task_of_a_pool(tmp_path):
    """A process pool's tasks report as each ends: the last report is the whole CommitLog."""
    pytest.importorskip("pyarrow")
    from rmqtool.engines import get_engine
    from rmqtool.io.store import Store
    from rmqtool.ops.export import export
    store = Store(reference_store("basic"))
    total = sum(seg.size for seg in store.commitlog.files)
    seen = []
    with get_engine("local", jobs=2) as eng:
        export([("basic", store)], tmp_path / "ex", eng, "jsonl", split_size=50000,
               progress=lambda done, of: seen.append((done, of)))
    assert seen[-1] == (total, total) and len(seen) > 10
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


def test_info_count_shows_the_files_it_walked_on_a_terminal(terminal):
    """info --count walks every CommitLog file: the bar counts them (stdout stays clean JSON)."""
    buf = terminal(step=0.7)
    res = run_cli("info", reference_store("basic"), "--count", "-f", "json")
    assert res.code == 0, res.err
    files = len(list((reference_store("basic") / "commitlog").iterdir()))
    assert f"info --count" in buf.getvalue() and f"{files}/{files} files" in buf.getvalue(), buf.getvalue()[-300:]
    assert json.loads(res.out)[0]["commitlog"]["messages"] == 3000


@pytest.mark.parametrize("args", [["query-key", "key-0001", "--scan"],
                                  ["query-id", "FD0000000000000000000000000000027A145FFD2B2769A652740011", "--scan"]])
def test_query_scans_show_a_byte_progress_bar_on_a_terminal(terminal, args):
    """query-key/query-id --scan walk the whole CommitLog: the bar counts its bytes to the end."""
    import re
    buf = terminal(step=0.7)
    command, *rest = args
    res = run_cli(command, reference_store("basic"), *rest, "-f", "json")
    assert res.code == 0, res.err
    json.loads(res.out)
    shown = re.findall(r"([\d.]+)/([\d.]+) MB", buf.getvalue())
    assert f"{command}: scanning" in buf.getvalue() and shown and shown[-1][0] == shown[-1][1], buf.getvalue()[-300:]


def test_query_key_progress_reaches_the_bytes_it_scanned():
    """The in-process scan reports every byte it walks, in order, ending at the range it had to scan."""
    from rmqtool.io.store import Store
    from rmqtool.ops.query.bykey import query_key, uncovered_ranges
    store = Store(reference_store("basic"))
    seen = []
    res = query_key(store, "key-0001", scan=True, progress=lambda done, of: seen.append((done, of)))
    total = sum(hi - lo for lo, hi in uncovered_ranges(store, None))
    assert res.hits and len(seen) > 5
    assert all(of == total for _, of in seen) and all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert seen[-1][0] == res.scanned_bytes <= total
