"""Tables fit the terminal (issue 18): at 80 columns every row is one line and no cell is cut (the
columns that do not fit are left out; issue 35); --wide keeps every column, wrapping."""
from __future__ import annotations

import io
import json

from conftest import reference_store, run_cli
from rmqtool.cli import common, render


def _render(rows, cols, width, wide=False, monkeypatch=None):
    from rich.console import Console
    buf = io.StringIO()
    monkeypatch.setattr(common.stdout, "_console", Console(file=buf, width=width, no_color=True, soft_wrap=True))
    monkeypatch.setenv("RMQTOOL_WIDE", "1" if wide else "0")
    render._emit_tables(iter(rows), cols, None)
    return buf.getvalue().splitlines()


def test_records_fit_80_columns_one_line_per_row(monkeypatch):
    rows = [json.loads(line) for line in run_cli("dump", "commitlog", reference_store("mixed"), "--limit", "40",
                                                 "--body", "text", "-f", "jsonl").out.split("\n") if line]
    cols = ["phy_offset", "size", "kind", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys",
            "uniq_key", "body"]
    lines = _render(rows, cols, 80, monkeypatch=monkeypatch)
    assert all(len(line) <= 80 for line in lines)
    assert len(lines) == len(rows) + 4                    # top rule, header, header rule, rows, bottom rule
    assert not any("…" in line for line in lines)
    wide = _render(rows, cols, 80, wide=True, monkeypatch=monkeypatch)
    assert len(wide) > len(lines)                         # whole cells: some wrap over several lines


def test_fit_columns_keeps_whole_columns_and_narrows_free_text():
    kept, w = common.fit_columns(["a", "long_header", "body"], [["1", "x", "y " * 100]], 60)
    assert kept == [0, 1, 2] and w[:2] == [1, len("long_header")] and sum(w) + 3 * 3 + 1 <= 60 and w[2] < 200


def test_binary_bodies_show_as_hex_in_tables_and_text_stays_text():
    import base64
    from rmqtool.cli.cmd_dump import _table_body
    assert _table_body({"body": base64.b64encode(b"\xff\xfe\x00abc").decode()}, True) == "hex:fffe00616263"
    assert _table_body({"body": base64.b64encode("héllo".encode()).decode()}, True) == "héllo"
    assert _table_body({"body": None, "detail": "zero"}, True) == "zero"


def test_sizes_for_people():
    assert [common.human_size(n) for n in (0, 999, 1000, 3_700_271, 2_147_483_648)] == \
        ["0 B", "999 B", "1.0 KB", "3.7 MB", "2.1 GB"]
