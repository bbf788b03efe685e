"""Output streams: rows are written as they come (JSON array, TSV when piped, tables in chunks),
and a reader that goes away (`| head`) ends the command quietly with exit 0."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from conftest import reference_store
from rmqtool.cli import common


@pytest.mark.parametrize("fmt", ["table", "json", "jsonl"])
@pytest.mark.parametrize("take", ["-c 100", "-c 1", "-n 5"])
def test_closed_pipe_exits_0_quietly(fmt, take):
    cmd = (f"set -o pipefail; {sys.executable} -m rmqtool dump commitlog {reference_store('basic')} -f {fmt} "
           f"| head {take} > /dev/null; echo ${{PIPESTATUS[0]}}")
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "0" and p.stderr == "", (p.stdout, p.stderr)


class _Boom(Exception):
    pass


def _rows_then_boom(n):
    for i in range(n):
        yield {"a": i, "b": f"x\t{i}"}
    raise _Boom


@pytest.mark.parametrize("fmt", ["json", "jsonl", "table"])
def test_rows_are_written_before_the_rest_is_produced(fmt, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(_Boom):
        common.emit(_rows_then_boom(250), fmt)
    assert "249" in out.getvalue()              # every produced row is out before the producer fails


def test_json_stream_is_the_json_dumps_text(monkeypatch):
    rows = [{"a": 1, "nested": {"k": [1, 2]}, "s": "ü\n"}, {"a": 2, "nested": None, "s": ""}]
    for data in (rows, rows[:1], []):
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        assert common.emit(iter(data), "json") == len(data)
        assert out.getvalue() == json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def test_piped_table_is_tab_separated_with_a_header(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    common.emit(iter([{"a": 1, "b": "x\ty"}, {"a": 2, "b": None}]), "table")
    assert out.getvalue().splitlines() == ["a\tb", "1\tx\\x09y", "2\t"]
