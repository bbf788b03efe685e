"""The renderer (cli/render.py, issue 35): tables that never cut a number, an id, an offset or a time;
CSV/TSV with one header per row kind; true/false; epoch ms with ISO twins; relative times;
errors as JSON under -f json|jsonl; one-line usage errors; severity colour and NO_COLOR; --quiet."""
from __future__ import annotations

import csv
import io
import json
import re
import sys

import pytest

from conftest import reference_store, run_cli, timer_store_root
from rmqtool.cli import common, render
from rmqtool.errors import CorruptDataError, UsageError

UNIQ = "7F0000011A2B18B4AAC27A0F4E3D{:04X}"
T0 = 1795263707733                                   # 2026-11-21T12:21:47.733Z


def _rows(n=5):
    return [{"phy_offset": 1_234_567_890_123 + i, "size": 1474 + i, "kind": "MESSAGE", "topic": "pay_events.v1",
             "queue_id": i, "queue_offset": 100_000 + i, "store_timestamp": T0 + i, "tags": "TagA",
             "keys": " ".join(f"key-{i:04d}-{j}" for j in range(6)), "uniq_key": UNIQ.format(i),
             "body": "héllo wörld " * 20} for i in range(n)]


def _table(rows, cols, width, monkeypatch, wide=False, **console):
    """What ``_emit_tables`` prints on a terminal ``width`` columns wide, and its stderr."""
    from rich.console import Console
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(render.stdout, "_console", Console(file=out, width=width, soft_wrap=True,
                                                           **(console or {"no_color": True})))
    monkeypatch.setattr(render.stderr, "_console", Console(file=err, width=200, no_color=True))
    monkeypatch.setenv("RMQTOOL_WIDE", "1" if wide else "0")
    render._emit_tables(iter(rows), cols, "title")
    return out.getvalue(), err.getvalue()


def _whole_values(row):
    """The cells that must never be cut or split: numbers, ids, offsets, times."""
    return {"phy_offset": str(row["phy_offset"]), "size": str(row["size"]), "queue_id": str(row["queue_id"]),
            "queue_offset": str(row["queue_offset"]), "store_timestamp": render.format_time(row["store_timestamp"]),
            "uniq_key": row["uniq_key"]}


# --- tables ----------------------------------------------------------------------------------------

def test_at_80_columns_no_number_id_or_time_is_cut_or_split_and_left_out_columns_are_named(monkeypatch):
    rows = _rows()
    cols = list(rows[0])
    out, err = _table(rows, cols, 80, monkeypatch)
    lines = out.splitlines()
    assert lines and all(len(line) <= 80 for line in lines)
    assert "…" not in out
    header = next(line for line in lines if "phy_offset" in line)
    shown = [c for c in cols if re.search(rf"(?<![\w]){re.escape(c)}(?![\w])", header)]
    hidden = [c for c in cols if c not in shown]
    assert shown[:3] == ["phy_offset", "size", "kind"] and hidden == cols[len(shown):]     # dropped from the right
    assert err.count("note:") == 1
    assert f"note: {len(hidden)} columns not shown at 80 columns: {', '.join(hidden)} (--wide or -f json" in err
    for row in rows:                            # every value of a shown column is whole on one line
        for c, value in _whole_values(row).items():
            if c in shown:
                assert any(value in line for line in lines), (c, value)


def test_free_text_wraps_but_numbers_ids_and_times_never_do(monkeypatch):
    rows = _rows(3)
    cols = ["phy_offset", "store_timestamp", "uniq_key", "keys"]
    out, _ = _table(rows, cols, 100, monkeypatch)
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines) and "…" not in out
    assert len(lines) > len(rows) + 4                  # the keys wrap over several lines
    for row in rows:
        for c in ("phy_offset", "store_timestamp", "uniq_key"):
            assert any(_whole_values(row)[c] in line for line in lines)


def test_when_even_the_first_columns_do_not_fit_rows_become_field_value_records(monkeypatch):
    rows = _rows(2)
    out, _ = _table(rows, list(rows[0]), 28, monkeypatch)
    assert "…" not in out and "┃" not in out
    assert f"phy_offset:      {rows[0]['phy_offset']}" in out
    assert f"uniq_key:        {rows[1]['uniq_key']}" in out
    assert f"store_timestamp: {render.format_time(T0)}" in out


def test_wide_shows_every_column(monkeypatch):
    rows = _rows(2)
    out, err = _table(rows, list(rows[0]), 80, monkeypatch, wide=True)
    top = next(line for line in out.splitlines() if line.startswith("┏"))
    assert "note:" not in err and top.count("┳") == len(rows[0]) - 1      # every column, wrapping


def test_headers_are_never_cut(monkeypatch):
    rows = [{"physic_msg_timestamp": T0, "a_rather_long_column_name": 1, "x": 2}]
    out, _ = _table(rows, None, 80, monkeypatch)
    assert "physic_msg_timestamp" in out and "a_rather_long_column_name" in out and "…" not in out


def test_tables_colour_severity_unless_no_color(monkeypatch):
    rows = [{"severity": "error", "check": "commitlog.crc", "offset": 7},
            {"severity": "warning", "check": "cq.gap", "offset": 8}]
    monkeypatch.delenv("NO_COLOR", raising=False)
    out, _ = _table(rows, None, 80, monkeypatch, force_terminal=True, color_system="standard")
    assert "\x1b[1;31merror" in out and "\x1b[33mwarning" in out
    monkeypatch.setenv("NO_COLOR", "1")
    out, _ = _table(rows, None, 80, monkeypatch, force_terminal=True, color_system="standard")
    assert "31m" not in out and "33m" not in out and "error" in out


def test_no_color_and_color_never_reach_the_console(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("RMQTOOL_COLOR", "always")
    render.stdout.reset()
    try:
        assert render.stdout.get().no_color
        monkeypatch.delenv("NO_COLOR")
        monkeypatch.setenv("RMQTOOL_COLOR", "never")
        render.stdout.reset()
        assert render.stdout.get().no_color
    finally:
        render.stdout.reset()


# --- cells, CSV/TSV sections ----------------------------------------------------------------------

KINDS = [{"kind": "queue", "topic": "T", "queue_id": 0, "messages": 3, "first_store_time": T0, "sparse": False},
         {"kind": "queue", "topic": "T", "queue_id": 1, "messages": 4, "first_store_time": None, "sparse": True},
         {"kind": "file", "file": "commitlog/00000000000000000000", "messages": 7, "fill": 0.5},
         {"kind": "file", "file": "commitlog/00000000000000098304", "messages": 0, "fill": 0.0},
         {"kind": "total", "messages": 7, "nested": {"a": [1, True]}}]


def _sections(text: str, reader):
    blocks = [b for b in text.split("\n\n") if b.strip()]
    return [list(reader(io.StringIO(b))) for b in blocks]


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_and_tsv_print_one_header_per_row_kind(fmt, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert render.emit(iter(KINDS), fmt) == len(KINDS)
    reader = csv.reader if fmt == "csv" else (lambda f: csv.reader(f, delimiter="\t"))
    sections = _sections(out.getvalue(), reader)
    assert [s[0][:1] + [s[1][0]] for s in sections] == [["kind", "queue"], ["kind", "file"], ["kind", "total"]]
    assert sections[0][0] == ["kind", "topic", "queue_id", "messages", "first_store_time", "first_store_time_iso",
                              "sparse"]
    assert sections[1][0] == ["kind", "file", "messages", "fill"]
    for section in sections:
        assert all(len(row) == len(section[0]) for row in section)
    assert sections[0][1][-2:] == [render.format_time(T0), "false"] and sections[0][2][-1] == "true"
    assert sections[1][1][1] == "commitlog/00000000000000000000"
    assert json.loads(sections[2][1][2]) == {"a": [1, True]}              # nested values stay JSON
    assert "True" not in out.getvalue() and "False" not in out.getvalue()


def test_csv_columns_order_the_keys_and_never_drop_one(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    render.emit(iter([{"a": 1, "b": 2, "extra": "x"}]), "csv", ["b", "a"])
    assert out.getvalue().splitlines() == ["b,a,extra", "2,1,x"]


def test_piped_table_prints_booleans_and_times_like_the_table(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    render.emit(iter([{"ok": True, "store_timestamp": T0}]), "table", ["ok", "store_timestamp"])
    assert out.getvalue().splitlines() == ["ok\tstore_timestamp", f"true\t{render.format_time(T0)}"]


def test_machine_formats_keep_epoch_ms_beside_an_iso_twin(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    render.emit(iter([{"due_ms": T0, "store_timestamp": None, "inner": [{"begin_timestamp": T0}]}]), "jsonl")
    row = json.loads(out.getvalue())
    assert list(row) == ["due_ms", "due_ms_iso", "store_timestamp", "store_timestamp_iso", "inner"]
    assert row["due_ms"] == T0 and row["due_ms_iso"] == "2026-11-21T12:21:47.733Z"
    assert row["store_timestamp_iso"] is None and row["inner"][0]["begin_timestamp_iso"] == row["due_ms_iso"]


def test_one_iso_form_with_zone():
    assert render.format_time(1_795_701_673_123) == "2026-11-26T14:01:13.123Z"
    assert render.format_time(0) == "1970-01-01T00:00:00.000Z"
    assert common.format_time is render.format_time


# --- times given -----------------------------------------------------------------------------------

NOW = 1_795_701_673_123                              # 2026-11-26T14:01:13.123Z
MIDNIGHT = 1_795_651_200_000                         # 2026-11-26T00:00:00Z


@pytest.mark.parametrize("text, expected", [
    ("now", NOW), ("1h ago", NOW - 3_600_000), ("15m ago", NOW - 900_000), ("1h30m ago", NOW - 5_400_000),
    ("2 days ago", NOW - 2 * 86_400_000), ("now-15m", NOW - 900_000), ("now+1d", NOW + 86_400_000),
    ("today", MIDNIGHT), ("yesterday", MIDNIGHT - 86_400_000), ("yesterday+6h", MIDNIGHT - 64_800_000),
    ("1795263707733", 1795263707733), ("2026-11-26T14:01:13.123Z", NOW), ("2026-11-26T15:01:13.123+01:00", NOW),
    ("2026-11-26", MIDNIGHT), (" Now ", NOW),
])
def test_times_absolute_and_relative(text, expected):
    assert render.parse_time(text, "--begin", now_ms=NOW) == expected


@pytest.mark.parametrize("text", ["1h", "ago", "now-", "now-15x", "last tuesday", "5 parsecs ago"])
def test_a_time_that_is_none_of_them_is_a_usage_error(text):
    with pytest.raises(UsageError, match=r"--begin .*not a time; give epoch ms, ISO-8601 .* 1h ago, now-15m"):
        render.parse_time(text, "--begin", now_ms=NOW)


def test_relative_times_work_on_the_command_line():
    store = reference_store("basic")
    r = run_cli("dump", "commitlog", store, "--begin", "1h ago", "--body", "none", "-f", "jsonl")
    assert r.code == 0 and r.out == ""                # the store's records are days older than the clock
    r = run_cli("dump", "commitlog", store, "--end", "now", "--limit", "2", "--body", "none", "-f", "jsonl")
    assert r.code == 0 and len(r.out.splitlines()) == 2


def test_dump_commitlog_begin_end_leave_blank_rows_out():
    store = reference_store("basic")
    every = run_cli("dump", "commitlog", store, "--body", "none", "-f", "jsonl").out
    assert '"kind":"BLANK"' in every
    for window in (("--begin", "0"), ("--end", "now")):
        rows = [json.loads(x) for x in run_cli("dump", "commitlog", store, *window, "--body", "none",
                                                "-f", "jsonl").out.splitlines()]
        assert rows and {r["kind"] for r in rows} == {"MESSAGE"}


# --- errors ----------------------------------------------------------------------------------------

def test_errors_under_json_formats_are_also_one_json_object(monkeypatch, capsys):
    def failing(standalone_mode=False):
        raise CorruptDataError("bad magic", "/store/commitlog/00000000000000000000", 1474)
    for fmt in (["-f", "json"], ["--format=jsonl"], ["-fjsonl"]):
        monkeypatch.setattr(sys, "argv", ["rmqtool", "dump", "commitlog", "/store", *fmt])
        with pytest.raises(SystemExit) as ended:
            common.run_app(failing)
        assert ended.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert json.loads(err[0]) == {"error": "bad magic", "file": "/store/commitlog/00000000000000000000",
                                      "offset": 1474, "exit": 2}
        assert err[1:] == ["error: /store/commitlog/00000000000000000000@1474: bad magic"]
    monkeypatch.setattr(sys, "argv", ["rmqtool", "dump", "commitlog", "/store", "-f", "csv"])
    with pytest.raises(SystemExit):
        common.run_app(failing)
    assert capsys.readouterr().err == "error: /store/commitlog/00000000000000000000@1474: bad magic\n"


def test_only_the_export_command_s_format_is_not_the_output_format():
    from rmqtool.cli import load_commands
    load_commands([])
    asked = common._json_format_asked
    assert not asked(["export", "/store", "-o", "/out", "-f", "jsonl"])
    assert not asked(["--quiet", "export", "info", "-o", "/out", "-f", "jsonl"])
    assert asked(["query-key", "/store", "export", "-f", "json"])          # a key named export
    assert asked(["dump", "commitlog", "export", "--topic", "export", "-fjsonl"])


def test_a_missing_store_under_json_says_so_in_json():
    r = run_cli("dump", "commitlog", "/nonexistent/store", "-f", "json")
    objs = [json.loads(line) for line in r.err.splitlines() if line.startswith("{")]
    assert r.code == 2 and len(objs) == 1 and set(objs[0]) == {"error", "file", "offset", "exit"}
    assert objs[0]["exit"] == 2 and r.err.splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize("args", [["dump", "commitlog", "{s}", "--lmit", "3"], ["stats", "{s}", "--by"],
                                  ["locate", "{s}", "notanumber"], ["dump", "commitlog"]])
def test_usage_errors_are_one_line(args):
    r = run_cli(*[a.format(s=reference_store("basic")) for a in args])
    assert r.code == 2 and r.out == ""
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0].endswith(" --help)"), r.err


def test_a_usage_error_under_json_is_json_too():
    r = run_cli("dump", "commitlog", reference_store("basic"), "-f", "json", "--lmit", "3")
    first, last = r.err.splitlines()
    assert r.code == 2 and json.loads(first)["exit"] == 2 and "--lmit" in json.loads(first)["error"]
    assert last.startswith("error: No such option: --lmit")


# --- on the reference stores, at 80 columns --------------------------------------------------------

@pytest.fixture
def terminal(monkeypatch):
    """stdout taken for an 80-column terminal (what the renderer sees), colour off."""
    monkeypatch.setattr(render, "stdout_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    yield
    render.stdout.reset()


def _jsonl(*args):
    return [json.loads(x) for x in run_cli(*args, "-f", "jsonl").out.split("\n") if x]


@pytest.mark.parametrize("args, whole", [
    (["dump", "commitlog", "{basic}", "--limit", "30", "--body", "text"], ["phy_offset", "queue_offset"]),
    (["query-key", "{basic}", "key-0011"], ["phy_offset", "queue_offset", "uniq_key"]),
    (["dump", "index", "{basic}", "--limit", "30"], ["phy_offset", "key_hash", "begin_timestamp"]),
    (["query-timer", "{timer}"], ["due_ms", "phy_offset", "uniq_key"]),
    (["dump", "consumequeue", "{mixed}", "--limit", "30"], ["commitlog_offset", "queue_offset", "tags_code"]),
])
def test_reference_tables_at_80_columns_cut_nothing(args, whole, terminal):
    args = [a.format(basic=reference_store("basic"), mixed=reference_store("mixed"), timer=timer_store_root())
            for a in args]
    r = run_cli(*args)
    assert r.code in (0, 1), r.err
    lines = r.out.splitlines()
    assert lines and all(len(line) <= 80 for line in lines) and "…" not in r.out
    records = not any("┃" in line for line in lines)
    header = "" if records else next(line for line in lines if "┃" in line)
    cells = [c.strip() for line in lines for c in re.split(r"[│┃]|:\s", line)]
    for row in _jsonl(*args):
        for field in whole:
            if row.get(field) is None or (not records and f" {field} " not in header):
                continue
            value = render.format_time(row[field]) if field in render.TIME_FIELDS else str(row[field])
            assert value in cells, (field, value)        # a whole cell, not cut, not split over lines


def test_stats_csv_sections_match_their_headers():
    r = run_cli("stats", reference_store("basic"), "--by", "hour", "-f", "csv")
    assert r.code == 0
    sections = _sections(r.out, csv.reader)
    kinds = [s[1][s[0].index("kind")] for s in sections]
    assert "queue" in kinds and "file" in kinds and len(kinds) == len(set(kinds))
    for section in sections:
        header = section[0]
        assert all(len(row) == len(header) for row in section[1:])
        assert len(set(header)) == len(header)
        for field in ("file", "topic", "bucket_start"):
            if field in header:
                assert all(row[header.index(field)] for row in section[1:]), (field, header)
        for field in header:
            if field.endswith("_iso"):
                assert field[:-4] in header
    assert "True" not in r.out and "False" not in r.out


def test_time_twins_in_every_machine_format_of_the_time_carrying_commands():
    basic = reference_store("basic")
    assert all("store_timestamp_iso" in r and "born_timestamp_iso" in r
               for r in _jsonl("dump", "commitlog", basic, "--limit", "5") if r["kind"] == "MESSAGE")
    header = next(r for r in _jsonl("dump", "index", basic, "--limit", "1"))
    assert header["begin_timestamp_iso"] == render.format_time(header["begin_timestamp"])
    assert "physic_msg_timestamp_iso" in _jsonl("dump", "checkpoint", basic)[0]
    assert "first_store_time_iso" in _jsonl("stats", basic)[0]
    assert "store_timestamp_iso" in json.dumps(_jsonl("locate", basic, "0"))
    assert all("due_ms_iso" in r for r in _jsonl("query-timer", timer_store_root()))
    tsv = run_cli("dump", "index", basic, "--limit", "3", "-f", "tsv").out.splitlines()
    assert "begin_timestamp\tbegin_timestamp_iso" in tsv[0]


def test_quiet_silences_notes_but_not_errors(terminal):
    basic = reference_store("basic")
    loud = run_cli("query-key", basic, "key-0011")
    assert "note:" in loud.err                       # the columns that do not fit at 80
    quiet = run_cli("--quiet", "query-key", basic, "key-0011")
    assert quiet.code == loud.code and quiet.out == loud.out and quiet.err == ""
    failed = run_cli("--quiet", "dump", "commitlog", "/nonexistent/store")
    assert failed.code == 2 and failed.err.startswith("error: ")


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_plain_line_is_printed_as_rich_prints_it_without_rich(stream, monkeypatch, capsys):
    """LazyConsole prints a plain line (markup=False) itself, without making a rich Console: the
    text is the one rich writes for it (emoji codes, brackets, wide and combining characters kept)."""
    import io
    from rich.console import Console
    from rmqtool.cli import render
    lines = ["note: :smile: [bold]x[/bold] 标签 e\u0301 \\x07", "plain", "", "a tab\tis laid out by rich"]
    console = render.LazyConsole(stderr=stream == "stderr")
    monkeypatch.delenv("RMQTOOL_QUIET", raising=False)
    for line in lines[:-1]:
        console.print(line, markup=False)
    assert console._console is None
    console.print(lines[-1], markup=False)
    out = getattr(capsys.readouterr(), "err" if stream == "stderr" else "out")
    ref = io.StringIO()
    rich_console = Console(file=ref, soft_wrap=True, highlight=False, emoji=False, width=80)
    for line in lines:
        rich_console.print(line, markup=False)
    assert out == ref.getvalue()
