"""Every one-line error names the file (and the byte offset or input row): each error path found
in the code is fed here and its line checked. Also: names that are not UTF-8 are shown, escaped,
by every command (never an encoding error), and a lock file that is not a regular file is
refused, not waited on or written."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import reference_store, run_cli

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _error_line(err: str) -> str:
    """The one error line: the last line of stderr, which holds nothing after it."""
    lines = err.splitlines()
    assert lines and lines[-1].startswith("error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    return lines[-1]


# --- hostile store files: each command's error line names the file ------------------------------

def _cq(root: Path) -> Path:
    return sorted((root / "consumequeue" / "TopicTest" / "0").iterdir())[0]


def _index(root: Path) -> Path:
    return sorted((root / "index").iterdir())[0]


def _replace_with_dir(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.mkdir()
    return path


def _truncate(path: Path, size: int) -> Path:
    os.truncate(path, size)
    return path


#: case -> a change to a copy of the basic store, returning the path the error must name
STORE_CASES = {
    "checkpoint-short": lambda r: _truncate(r / "checkpoint", 10),
    "cq-odd-size": lambda r: _truncate(_cq(r), 7),
    "index-short": lambda r: _truncate(_index(r), 10),
    "lock-dir": lambda r: _replace_with_dir(r / "lock"),
    "checkpoint-dir": lambda r: _replace_with_dir(r / "checkpoint"),
    "commitlog-is-a-file": lambda r: (shutil.rmtree(r / "commitlog"), (r / "commitlog").write_text("x"),
                                      r / "commitlog")[-1],
}
COMMANDS = {
    "info": ["info", "{s}"],
    "verify": ["verify", "{s}"],
    "verify-deep": ["verify", "{s}", "--level", "deep"],
    "dump-cq": ["dump", "consumequeue", "{s}", "-f", "jsonl"],
    "dump-index": ["dump", "index", "{s}", "-f", "jsonl"],
    "dump-checkpoint": ["dump", "checkpoint", "{s}"],
    "stats": ["stats", "{s}"],
    "rebuild-dry-run": ["rebuild", "all", "{s}", "--dry-run"],
    "rebuild-output": ["rebuild", "all", "{s}", "--output", "{o}"],
    "query-queue": ["query-queue", "{s}", "TopicTest", "0", "--offset", "0"],
    "write": ["write", "{s}", "--synthetic", "3"],
}


@pytest.mark.parametrize("case", list(STORE_CASES))
def test_every_command_names_the_file_it_fails_on(case, store_copy, tmp_path):
    """Where a command fails (exit 2 or 3), its one line names the store file at fault; a dump that
    walks on past the damaged file (exit 1) names it in its ``damaged:`` line. Commands that
    tolerate the damage (a finding, or a file they never read) are not asked to fail."""
    failed = 0
    for name, args in COMMANDS.items():
        root = store_copy("basic")
        target = STORE_CASES[case](root)
        r = run_cli(*[a.format(s=root, o=tmp_path / f"out-{name}") for a in args])
        if r.code in (2, 3):
            failed += 1
            line = _error_line(r.err)
            assert str(target) in line, (name, line)
        elif r.code == 1 and "damaged: " in r.err:      # a dump that went on past the damaged file
            failed += 1
            line, = [ln for ln in r.err.splitlines() if ln.startswith("damaged: ")]
            assert str(target) in line and "error:" not in r.err, (name, r.err)
        else:
            assert "error:" not in r.err, (name, r.err)
        shutil.rmtree(root)
        shutil.rmtree(tmp_path / f"out-{name}", ignore_errors=True)
    assert failed, "no command failed: the case tests nothing"


# --- the lock file: a FIFO or a directory is refused, naming it -----------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_lock_that_is_not_a_regular_file_is_refused_naming_it(kind, store_copy):
    """Was 'error: rmqtool: Illegal seek' (exit 2) for a FIFO; a dry run hung opening it."""
    root = store_copy("basic")
    lock = root / "lock"
    lock.unlink(missing_ok=True)
    os.mkfifo(lock) if kind == "fifo" else lock.mkdir()
    for args in (["write", root, "--synthetic", "3"], ["rebuild", "all", root, "--yes"]):
        p = subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True, text=True,
                           env=_env(), timeout=120)
        assert p.returncode == 3, p.stderr
        line = _error_line(p.stderr)
        assert f"{lock}: the lock file is not a regular file" in line, line
    p = subprocess.run([sys.executable, "-m", "rmqtool", "rebuild", "all", str(root), "--dry-run"],
                       capture_output=True, text=True, env=_env(), timeout=120)
    assert p.returncode == 0, p.stderr                  # nobody holds a FIFO: the plan is shown


# --- a full temporary disk: the temporary file is named ---------------------------------------

_SMALL_CHUNKS = """
import sys
from rmqtool.ops.verify import chunks
chunks.CHUNK_RECORDS = 256                      # spill the basic store's records in many chunks
from rmqtool.__main__ import run
sys.argv = ["rmqtool"] + sys.argv[1:]
run()
"""


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("jobs", [[], ["--jobs", "2", "--split-size", "200000"]], ids=["threads", "jobs"])
def test_a_full_temporary_disk_names_the_temporary_file(jobs, tmp_path):
    """Was 'error: rmqtool: 134909 requested and 18944 written' (numpy's short write, no file)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.run([sys.executable, "-c", _SMALL_CHUNKS, "verify", str(reference_store("basic")), "--level",
                        "deep", *jobs], capture_output=True, text=True, timeout=300,
                       env=_env(TMPDIR=str(tmp)), preexec_fn=_file_size_limit(4096))
    assert p.returncode == 2, (p.returncode, p.stderr)
    line = _error_line(p.stderr)
    assert line.startswith(f"error: {tmp}{os.sep}"), line           # the temporary file itself
    assert "requested and" not in line or "short write" in line, line


# --- write --from: every field's range error names the file and the line --------------------------

_GOOD = {"topic": "T", "body": "aGk=", "body_encoding": "base64"}
BIG = 1 << 70
BAD_ROWS = {
    **{f"{name}-huge": {name: BIG} for name in ("queue_id", "flag", "queue_offset", "sys_flag", "born_timestamp",
                                                  "store_timestamp", "reconsume_times",
                                                  "prepared_transaction_offset")},
    **{f"{name}-very-negative": {name: -BIG} for name in ("store_timestamp", "born_timestamp", "queue_id")},
    "queue_id-int32": {"queue_id": 1 << 31},
    "store_timestamp-float": {"store_timestamp": 1.5},
    "store_timestamp-string": {"store_timestamp": "now"},
    "born_host-port": {"born_host": "1.2.3.4:70000"},
    "store_host-text": {"store_host": "nowhere"},
    "body_encoding": {"body_encoding": "rot13"},
    "body-not-base64": {"body": "@@@"},
    "properties-list": {"properties": [1, 2]},
    "property-int": {"properties": {"A": 1}},
    "topic-missing": {"topic": None},
    "topic-path": {"topic": "../x"},
    "body_length": {"body_length": 99},
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_bad_write_from_row_names_the_file_and_its_line(case, tmp_path):
    row = {**_GOOD, **BAD_ROWS[case]}
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps(_GOOD) + "\n\n" + json.dumps(row) + "\n")   # the bad row: line 3
    r = run_cli("write", tmp_path / "store", "--from", source)
    assert r.code == 2, (r.code, r.err)
    line = _error_line(r.err)
    assert f"{source}:3:" in line, line


def test_a_record_the_store_cannot_hold_names_its_row(tmp_path):
    """A row whose record is larger than a CommitLog file: was a line naming neither."""
    source = tmp_path / "rows.jsonl"
    big = {**_GOOD, "body": "eHh4" * 2000}
    source.write_text(json.dumps(_GOOD) + "\n" + json.dumps(big) + "\n")
    r = run_cli("write", tmp_path / "store", "--from", source, "--commitlog-file-size", 4096)
    assert r.code == 2
    assert _error_line(r.err).startswith(f"error: {source}:2: a "), r.err


def test_a_geometry_the_store_does_not_have_names_its_file(store_copy):
    root = store_copy("basic")
    r = run_cli("write", root, "--synthetic", 1, "--commitlog-file-size", 4096)
    assert r.code == 2
    assert _error_line(r.err).startswith(f"error: {root / 'commitlog'}{os.sep}"), r.err


def test_locating_in_a_queue_that_has_no_files_names_its_directory():
    store = reference_store("basic")
    r = run_cli("locate", store, "--topic", "Nope", "--queue", 0, "--queue-offset", 0)
    assert r.code == 2
    assert _error_line(r.err).startswith(f"error: {store / 'consumequeue' / 'Nope' / '0'}: "), r.err


@pytest.mark.parametrize("bad", [{"queue_offset": "x"}, {"store_timestamp": BIG}, {"body": None},
                                 {"body_encoding": "rot13"}], ids=lambda b: next(iter(b)))
def test_a_bad_row_of_a_simplified_write_names_the_file_and_its_line(bad, tmp_path):
    """The article's layout (`--layout simplified`) numbered rows from 0 and named no file."""
    source = tmp_path / "rows.jsonl"
    row = {"topic": "T", "body": "hi", **bad}
    source.write_text(json.dumps({"topic": "T", "body": "hi"}) + "\n\n" + json.dumps(row) + "\n")
    r = run_cli("write", tmp_path / "simple", "--layout", "simplified", "--from", source)
    assert r.code == 2, r.err
    assert _error_line(r.err).startswith(f"error: {source}:3: "), r.err


def test_a_store_timestamp_of_2_to_the_70_names_the_row_not_the_store(tmp_path):
    """The probe's case: was 'error: STORE: Value too large for defined data type'."""
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps({**_GOOD, "store_timestamp": BIG}) + "\n")
    p = subprocess.run([sys.executable, "-m", "rmqtool", "write", str(tmp_path / "store"), "--from", str(source)],
                       capture_output=True, text=True, env=_env(), timeout=120)
    assert p.returncode == 2
    assert _error_line(p.stderr) == (f"error: {source}:1: store_timestamp {BIG} does not fit a 64-bit field")


# --- names that are not UTF-8 --------------------------------------------------------------------

@pytest.fixture
def non_utf8_store(store_copy):
    root = store_copy("basic")
    queue = os.path.join(os.fsencode(root), b"consumequeue", b"\xff\xfe", b"0")
    os.makedirs(queue)
    shutil.copy(_cq(root), os.path.join(queue, os.fsencode(_cq(root).name)))
    return root


@pytest.mark.parametrize("args", [
    ["info", "{s}", "-f", "json"], ["info", "{s}"], ["verify", "{s}", "--level", "deep", "-f", "json"],
    ["verify", "{s}", "--level", "deep"], ["stats", "{s}", "-f", "json"], ["stats", "{s}"],
    ["dump", "consumequeue", "{s}", "-f", "jsonl"], ["dump", "consumequeue", "{s}"],
    ["rebuild", "all", "{s}", "--dry-run"],
], ids=lambda a: "-".join(x for x in a if x != "{s}"))
def test_a_topic_directory_that_is_not_utf8_is_shown_escaped(non_utf8_store, args):
    """With a strict UTF-8 stdout (a UTF-8 locale), every command prints the name escaped: JSON
    as \\udcNN escapes (the same string again when parsed), tables as \\xNN."""
    argv = [a.format(s=non_utf8_store) for a in args]
    p = subprocess.run([sys.executable, "-m", "rmqtool", *argv], capture_output=True, timeout=300,
                       env=_env(PYTHONIOENCODING="utf-8:strict"))
    err = p.stderr.decode("utf-8")                          # (verify's summary is there: stdout is piped)
    assert p.returncode in (0, 1), err
    assert not any(line.startswith("error") for line in err.splitlines()), err
    out = p.stdout.decode("utf-8")                          # valid UTF-8 throughout
    if "json" in args[-1] or "jsonl" in args:
        rows = [json.loads(x) for x in out.splitlines() if x.strip()] if "jsonl" in args else [json.loads(out)]
        if args[0] in ("verify", "dump", "info"):
            assert "\udcff\udcfe" in json.dumps(rows, ensure_ascii=False), out[:500]
    elif args[0] in ("verify", "dump"):                     # (info and stats list queues of records)
        assert "\\xff\\xfe" in out + err, out[:500]


def test_report_renders_a_topic_directory_that_is_not_utf8(non_utf8_store, tmp_path):
    """Was 'internal error TypeError: set_text()…' (the chart's label)."""
    out = tmp_path / "report.html"
    r = run_cli("report", non_utf8_store, "--output", out)
    assert r.code in (0, 1), r.err
    page = out.read_text(encoding="utf-8")
    assert "\\xff\\xfe/0" in page


# --- the CLI boundary: an OS error that names no file ------------------------------------------

def test_an_os_error_naming_no_file_names_the_commands_path(monkeypatch, capsys, tmp_path):
    """The boundary used to print 'error: rmqtool: <what>' for an OS error without a file name:
    it names what it knows, the command line's path argument."""
    import errno
    from rmqtool.cli.common import run_app

    def failing(standalone_mode=False):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(sys, "argv", ["rmqtool", "info", str(tmp_path), "-f", "json"])
    with pytest.raises(SystemExit) as ended:
        run_app(failing)
    assert ended.value.code == 2
    assert capsys.readouterr().err == (json.dumps({"error": "Input/output error", "file": str(tmp_path),
                                                   "offset": None, "exit": 2}) + "\n"     # -f json: also JSON
                                       + f"error: {tmp_path}: Input/output error\n")
