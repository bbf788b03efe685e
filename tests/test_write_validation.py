"""`write --from` refuses a row it cannot store exactly: one line naming the file and row, exit 2,
and the store unchanged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("v") / "store"
    r = run_cli("write", root, "--synthetic", "20")
    assert r.code == 0, r.err
    return root


BAD_ROWS = [
    ({"queue_id": 1.5}, "queue_id 1.5 is not an integer"),
    ({"queue_id": True}, "queue_id True is not an integer"),
    ({"queue_offset": "7"}, "queue_offset '7' is not an integer"),
    ({"flag": 1 << 31}, "flag 2147483648 does not fit a 32-bit field"),
    ({"born_timestamp": 1 << 63}, "does not fit a 64-bit field"),
    ({"born_host": "10.0.0.1:99999"}, "born_host port 99999 is outside 0..65535"),
    ({"store_host": "10.0.0.1:-1"}, "store_host"),
    ({"store_host": 5}, "store_host must be a string"),
    ({"properties_raw": "@@@"}, "properties_raw is not valid base64"),
    ({"body": "@@", "body_encoding": "base64"}, "body is not valid base64"),
    ({"properties": {"a": {"b": 1}}}, "property 'a' must be a string, not dict"),
    ({"properties": {"a": 3}}, "property 'a' must be a string, not int"),
    ({"properties": ["a"]}, "properties must be an object"),
]


@pytest.mark.parametrize("fields,message", BAD_ROWS, ids=[m for _, m in BAD_ROWS])
def test_bad_value_is_refused_and_nothing_written(small_store, tmp_path, fields, message):
    rows = tmp_path / "rows.jsonl"
    good = {"topic": "T", "body": "ok"}
    rows.write_text(json.dumps(good) + "\n" + json.dumps({**good, **fields}) + "\n")
    before = _tree(small_store)
    r = run_cli("write", small_store, "--from", rows)
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {rows}:2: ") and message in lines[0], r.err
    assert _tree(small_store) == before


def test_nested_json_and_oversized_rows_are_one_line_errors(small_store, tmp_path):
    from rmqtool.cli.cmd_write import MAX_ROW_BYTES
    rows = tmp_path / "rows.jsonl"
    before = _tree(small_store)
    rows.write_text(json.dumps({"topic": "T", "body": "a"}) + "\n" + "[" * 100_000 + "\n")
    r = run_cli("write", small_store, "--from", rows)
    assert r.code == 2 and r.err.count("\n") == 1 and "line 2: not JSON" in r.err, r.err
    with open(rows, "w") as fh:
        fh.write('{"topic": "T", "body": "' + "a" * MAX_ROW_BYTES + '"}\n')
    r = run_cli("write", small_store, "--from", rows)
    assert r.code == 2 and f"{rows}@0: line 1 is longer than {MAX_ROW_BYTES} bytes" in r.err, r.err
    assert _tree(small_store) == before
