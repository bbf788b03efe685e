"""Once the exit code is decided, the objects alive are left out of the cyclic collector's passes
(the interpreter's collection at exit walked them all), and nothing a command relies on changes:
threads joined, exit functions run, output complete, the same exit codes."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import reference_store, run_cli

#: runs the CLI as ``rmqtool`` does, after a command has started a thread and registered an exit
#: function
HARNESS = r"""
import atexit, gc, sys, threading, time
from pathlib import Path
import rmqtool.__main__ as entry
from rmqtool.cli import startup
marks = Path(sys.argv[1])
answer = startup.answer


def during_the_command(argv):
    atexit.register(lambda: (marks / "exit-function").write_text(f"ran, {gc.get_freeze_count()} frozen"))

    def slow():
        time.sleep(0.3)
        (marks / "thread").write_text("finished")
    threading.Thread(target=slow).start()
    return answer(argv)


startup.answer = during_the_command
sys.argv = ["rmqtool", *sys.argv[2:]]
entry.run()
"""


def _run(tmp_path, *args):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    res = subprocess.run([sys.executable, "-c", HARNESS, str(marks), *map(str, args)], capture_output=True,
                         text=True, timeout=120)
    return res, {p.name: p.read_text() for p in marks.iterdir()}


def test_the_objects_alive_at_the_decided_exit_are_frozen_and_nothing_is_skipped(tmp_path):
    res, marks = _run(tmp_path, "info", reference_store("basic"), "-f", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["commitlog"]["files"]
    ran, frozen = marks.pop("exit-function").split(", ")
    assert ran == "ran" and int(frozen.split()[0]) > 10_000
    assert marks == {"thread": "finished"}


def test_the_exit_codes_are_the_commands(tmp_path):
    res, marks = _run(tmp_path, "info", tmp_path / "no-such-store")
    assert res.returncode == 2 and "no-such-store" in res.stderr
    assert marks["thread"] == "finished" and marks["exit-function"].startswith("ran")
    res, _ = _run(tmp_path, "verify", reference_store("basic"), "--no-such-option")
    assert res.returncode == 2
    res, _ = _run(tmp_path, "--help")
    assert res.returncode == 0 and "Usage" in res.stdout


def test_a_long_output_reaches_the_reader_whole(tmp_path):
    """The buffered rest of stdout is flushed before the process ends: the same rows as in-process."""
    res, _ = _run(tmp_path, "dump", "commitlog", reference_store("mixed"), "-f", "jsonl")
    assert res.returncode == 0, res.stderr
    in_process = run_cli("dump", "commitlog", reference_store("mixed"), "-f", "jsonl")
    assert res.stdout == in_process.out and len(in_process.jsonl()) > 100
