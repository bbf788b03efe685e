"""Shared fixtures: the upstream-written reference stores and their answers."""
from __future__ import annotations

import gzip
import json
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "fixtures" / "reference"
STORE_NAMES = ("basic", "mixed", "crashed")


@lru_cache(maxsize=None)
def load_answers(name: str) -> dict:
    with gzip.open(REFERENCE / "answers" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def reference_store(name: str) -> Path:
    return REFERENCE / name


@pytest.fixture(params=STORE_NAMES)
def store_name(request):
    return request.param


@pytest.fixture
def store_copy(tmp_path):
    """Factory: a writable copy of a reference store in tmp_path."""
    def make(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(reference_store(name), dest)
        return dest
    return make


class CliResult:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def jsonl(self) -> list:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def run_cli(*args, stdin: str | None = None) -> CliResult:
    """Run the rmqtool CLI in-process; returns exit code, stdout and stderr."""
    import contextlib
    import io
    import sys
    from rmqtool.cli import main
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_stdin = sys.argv, sys.stdin
    sys.argv = ["rmqtool", *map(str, args)]
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.argv, sys.stdin = old_argv, old_stdin
    return CliResult(code, out.getvalue(), err.getvalue())


def run_cli_process(*args, timeout: float = 120, **kw):
    """Run the installed CLI in a subprocess (for tests that need a real process)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kw)
