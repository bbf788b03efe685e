"""Issue 35's acceptance for what commands print: every command x every format its help lists, on
the reference stores. Each exits as documented; machine output parses (JSON, every JSONL line,
CSV/TSV sections whose rows have as many columns as their header); CSV/TSV drop no field the JSON
lines carry (no empty column for a kind that has the field); and a table at 80 columns cuts or
wraps no number, offset, id or time."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, dledger_store, reference_store, run_cli, timer_copy, timer_store_root

ROW_FORMATS = ("table", "json", "jsonl", "csv", "tsv")

#: commands whose -f/--format is not the row format, and why (the README says the same)
OTHER_FORMAT = {"export": "-f is the format of the files it writes (parquet | jsonl); it prints a table of "
                          "what it wrote"}


class Stores:
    """The stores a case runs on; ``copy`` for commands that write (a fresh copy per run)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self._cq_ext = None

    def ref(self, name: str) -> str:
        return str(reference_store(name))

    def copy(self, name: str) -> str:
        dest = self.tmp / f"{name}-{len(list(self.tmp.iterdir()))}"
        if name == "timer":
            return str(timer_copy(dest))
        shutil.copytree(reference_store(name), dest)
        return str(dest)

    def new(self, name: str) -> str:
        """A path that does not exist yet (an output the command creates)."""
        return str(self.tmp / f"{name}-{len(list(self.tmp.iterdir()))}")

    def dledger(self) -> str:
        return str(dledger_store())

    def timer(self) -> str:
        return str(timer_store_root())

    def cq_ext(self) -> str:
        """A small 4.x store with ConsumeQueueExt files (written once per test: it is tiny)."""
        if self._cq_ext is None:
            self._cq_ext = self.new("cq-ext")
            r = run_cli("write", self._cq_ext, "--synthetic", "40", "--topics", "2", "--queues", "2", "--cq-ext")
            assert r.code == 0, r.err
        return self._cq_ext


#: command -> (its arguments for a ``Stores``, the exit code it documents for them)
CASES = {
    "info": (lambda s: ["info", s.ref("basic")], 0),
    "dump commitlog": (lambda s: ["dump", "commitlog", s.ref("crashed"), "--from-offset", "2300000"], 0),
    "dump consumequeue": (lambda s: ["dump", "consumequeue", s.ref("mixed"), "--limit", "40"], 0),
    "dump consumequeue-ext": (lambda s: ["dump", "consumequeue-ext", s.cq_ext(), "--limit", "40"], 0),
    "dump index": (lambda s: ["dump", "index", s.ref("basic"), "--limit", "40"], 0),
    "dump checkpoint": (lambda s: ["dump", "checkpoint", s.ref("crashed")], 0),
    "dump dledger-entries": (lambda s: ["dump", "dledger-entries", s.dledger(), "--limit", "40"], 0),
    "dump dledger-index": (lambda s: ["dump", "dledger-index", s.dledger(), "--limit", "40"], 0),
    "dump timerlog": (lambda s: ["dump", "timerlog", s.timer(), "--limit", "40"], 0),
    "dump timerwheel": (lambda s: ["dump", "timerwheel", s.timer(), "--limit", "40"], 0),
    "dump timercheck": (lambda s: ["dump", "timercheck", s.timer()], 0),
    "locate": (lambda s: ["locate", s.ref("basic"), "98310"], 0),
    "query-key": (lambda s: ["query-key", s.ref("basic"), "key-0011"], 0),
    "query-id": (lambda s: ["query-id", s.ref("basic"), "FD0000000000000000000000000000027A145FFD2B2769A652740011"], 0),
    "query-queue": (lambda s: ["query-queue", s.ref("basic"), "TopicTest", "1", "--offset", "3", "--count", "3"], 0),
    "query-timer": (lambda s: ["query-timer", s.timer()], 0),
    "verify": (lambda s: ["verify", s.ref("crashed"), "--level", "deep"], 0),
    "stats": (lambda s: ["stats", s.ref("mixed"), "--by", "minute"], 0),
    "consumers": (lambda s: ["consumers", s.ref("consumers")], 0),
    "reset-offsets": (lambda s: ["reset-offsets", s.copy("consumers"), "--group", "cg-order-mid", "--to-earliest"], 0),
    "query-delayed": (lambda s: ["query-delayed", s.ref("consumers")], 0),
    "query-transactions": (lambda s: ["query-transactions", s.ref("mixed"), "--at", "2026-11-26T00:00:00Z"], 0),
    "compare": (lambda s: ["compare", s.ref("basic"), s.ref("crashed")], 1),
    "write": (lambda s: ["write", s.copy("basic"), "--synthetic", "20"], 0),
    "rebuild consumequeue": (lambda s: ["rebuild", "consumequeue", s.copy("basic"), "--dry-run"], 0),
    "rebuild batchconsumequeue": (lambda s: ["rebuild", "batchconsumequeue", s.copy("propcrc-lmq-batchcq"),
                                             "--dry-run"], 0),
    "rebuild index": (lambda s: ["rebuild", "index", s.copy("basic"), "--dry-run"], 0),
    "rebuild all": (lambda s: ["rebuild", "all", s.copy("mixed"), "--dry-run"], 0),
    "rebuild timerwheel": (lambda s: ["rebuild", "timerwheel", s.copy("timer"), "--dry-run"], 0),
    "convert": (lambda s: ["convert", s.dledger(), "-o", s.new("converted")], 0),
    "report": (lambda s: ["report", s.ref("basic"), "-o", s.new("report") + ".html", "--level", "shallow"], 0),
    "export": (lambda s: ["export", s.ref("basic"), "--to", s.new("export")], 0),
}


#: cases that write (a copy of a store, or a new output): their rows name paths that differ run to run
WRITERS = {"write", "convert", "report", "export"} | {n for n in CASES if n.startswith("rebuild")}


def _leaf_commands():
    import typer.main
    from rmqtool.cli import app

    def walk(command, path=()):
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, path + (name,))
        else:
            yield " ".join(path), command
    return dict(walk(typer.main.get_command(app)))


def listed_formats(command) -> list[str]:
    """The formats a command's ``-f/--format`` offers: its choices, else the ``a | b | c`` its help starts with."""
    for param in command.params:
        if "--format" in getattr(param, "opts", ()):
            choices = getattr(param.type, "choices", None)
            if choices:
                return [getattr(c, "value", c) for c in choices]
            return [w.strip() for w in re.match(r"[\w |]+", param.help).group().split("|") if w.strip()]
    return []


COMMANDS = _leaf_commands()


def test_every_command_has_a_case_and_every_row_command_takes_every_format():
    assert set(COMMANDS) == set(CASES)
    for name, command in COMMANDS.items():
        formats = listed_formats(command)
        if name in OTHER_FORMAT:
            assert not set(formats) & {"table", "csv", "tsv"}, name
        else:
            assert sorted(formats) == sorted(ROW_FORMATS), (name, formats)


def csv_sections(text: str, delimiter: str = ",") -> list[tuple[list[str], list[list[str]]]]:
    """CSV/TSV output as ``[(header, rows)]``: a section starts the output and after each empty line."""
    sections: list = []
    start = True
    for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter):
        if not row:
            start = True
        elif start:
            sections.append((row, []))
            start = False
        else:
            sections[-1][1].append(row)
    return sections


def _run(name: str, fmt: str, stores: Stores):
    args, code = CASES[name]
    return run_cli(*args(stores), "-f", fmt), code


ROW_CASES = [(n, f) for n in sorted(CASES) if n not in OTHER_FORMAT for f in listed_formats(COMMANDS[n])]


@pytest.mark.parametrize("name,fmt", [c for c in ROW_CASES if c[1] != "table"])
def test_machine_formats_exit_as_documented_and_parse(name, fmt, tmp_path):
    r, code = _run(name, fmt, Stores(tmp_path))
    assert r.code == code, (r.code, r.err[-2000:])
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert r.out.strip(), "no rows"
    if fmt == "json":
        json.loads(r.out)
    elif fmt == "jsonl":
        assert all(isinstance(json.loads(line), dict) for line in r.out.splitlines())
    else:
        sections = csv_sections(r.out, "," if fmt == "csv" else "\t")
        assert sections
        for header, rows in sections:
            assert len(set(header)) == len(header), header
            assert all(len(row) == len(header) for row in rows), (header, [row for row in rows
                                                                            if len(row) != len(header)][:3])


def _kind_key(header: list[str]) -> str | None:
    return header[0] if header and header[0] in ("kind", "type") else None


def _same_cell(cell: str, value, exact: bool) -> bool:
    if value is None or value == "":
        return cell == ""
    if not exact:                        # TSV shows control characters escaped: only "there or not"
        return cell != ""
    if isinstance(value, bool):
        return cell.lower() == str(value).lower()
    if isinstance(value, (dict, list)):
        return json.loads(cell) == value
    return cell == str(value)


#: rows of several kinds interleaved in one stream (MESSAGE, BLANK and END records; a ConsumeQueue's
#: units and its END; index headers and entries): their sections come from the renderer, which
#: starts one whenever the set of fields changes (the renderer's part of issue 35)
STREAMED_KINDS = {"dump commitlog", "dump consumequeue", "dump consumequeue-ext", "dump index", "dump timerlog",
                  "dump dledger-entries"}


def _check_no_field_dropped(name: str, fmt: str, tmp_path: Path) -> None:
    """The CSV/TSV rows are the JSONL rows, in the same order: every field a row has is a column of
    its section, empty exactly where the field is null."""
    args, _ = CASES[name]
    stores = Stores(tmp_path)            # each call of ``args`` makes a fresh copy or output path
    want = [row for row in run_cli(*args(stores), "-f", "jsonl").jsonl() if set(row) != {"summary"}]
    if name == "dump commitlog":         # CSV/TSV: the records, then the rows where files end
        want = [r for r in want if "end" not in r] + [r for r in want if "end" in r]
    r = run_cli(*args(stores), "-f", fmt)
    writes = name in WRITERS             # paths in the rows differ run to run: only "there or not"
    sections = csv_sections(r.out, "," if fmt == "csv" else "\t")
    got = [(header, row) for header, rows in sections for row in rows]
    key = _kind_key(sections[0][0]) if sections else None
    assert len(got) == len(want), (len(got), len(want))
    volatile = {"seconds", "messages_per_second"}          # measured, not stored
    for (header, cells), row in zip(got, want):
        missing = [k for k in row if k not in header]
        assert not missing, f"{name}: fields {missing} of a {row.get(key or 'kind')} row have no column"
        cell = dict(zip(header, cells))
        for k, v in row.items():
            if k not in volatile:
                assert _same_cell(cell[k], v, fmt == "csv" and not writes), (name, k, cell[k], v)


@pytest.mark.parametrize("name,fmt", [c for c in ROW_CASES if c[1] in ("csv", "tsv")
                                      and c[0] not in STREAMED_KINDS])
def test_csv_and_tsv_carry_every_field_of_every_row(name, fmt, tmp_path):
    _check_no_field_dropped(name, fmt, tmp_path)


# The streamed dumps interleave row kinds; no field is dropped: the renderer starts a new section
# whenever the set of fields changes (rmqtool/cli/render.py).
@pytest.mark.parametrize("name,fmt", [c for c in ROW_CASES if c[1] in ("csv", "tsv") and c[0] in STREAMED_KINDS])
def test_streamed_kinds_keep_every_field_in_csv_and_tsv(name, fmt, tmp_path):
    _check_no_field_dropped(name, fmt, tmp_path)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_dump_commitlog_prints_one_section_per_row_kind(fmt):
    """A store of many CommitLog files: the records under one header, then every file's end row
    (its BLANK, the data end) under another, not a new section after each file."""
    r = run_cli("dump", "commitlog", str(reference_store("basic")), "-f", fmt)
    sections = csv_sections(r.out, "," if fmt == "csv" else "\t")
    assert len(sections) == 2, [h[:5] for h, _ in sections]
    (records_header, records), (ends_header, ends) = sections
    assert "end" not in records_header and "end" in ends_header
    assert len(ends) == len(list((reference_store("basic") / "commitlog").iterdir()))
    assert {dict(zip(records_header, row))["kind"] for row in records} == {"MESSAGE"}


def test_machine_formats_hold_only_data():
    """Prose (summaries, forecasts, the id line) never reaches stdout in machine formats or piped tables."""
    crashed, basic = str(reference_store("crashed")), str(reference_store("basic"))
    for fmt in ("csv", "tsv", "table"):
        r = run_cli("verify", crashed, "-f", fmt)
        assert not re.search(r"exit code \d|recovery forecast \(|findings \{'", r.out), r.out
        if fmt == "table":               # piped: the text for people on stderr
            assert "recovery forecast (" in r.err and "exit code 0" in r.err
    r = run_cli("info", basic)
    assert r.out.splitlines()[0].split("\t")[:2] == ["topic", "queue_id"] and "recovery" in r.err
    r = run_cli("query-id", basic, "FD0000000000000000000000000000027A145FFD2B2769A652740011")
    assert r.out.splitlines()[0].startswith("phy_offset\t") and "uniqKey" in r.err
    last = run_cli("query-id", basic, "FD0000000000000000000000000000027A145FFD2B2769A652740011", "-f",
                   "jsonl").jsonl()[-1]
    assert last["summary"]["kind"] == "uniqKey" and last["summary"]["decoded"]


@pytest.mark.parametrize("name,kinds", [("stats", ["topic", "queue", "file", "bucket", "total"]),
                                        ("verify", ["finding", "summary", "forecast", "not_dispatched"]),
                                        ("info", ["store", "queue"])])
def test_kind_prints_one_kind_in_every_format(name, kinds, tmp_path):
    args, code = CASES[name]
    argv = args(Stores(tmp_path))
    key = "type" if name == "verify" else "kind"
    for kind in kinds:
        rows = run_cli(*argv, "--kind", kind, "-f", "jsonl").jsonl()
        assert rows and {row[key] for row in rows} == {kind}, (name, kind)
        for fmt in ("csv", "tsv", "table"):
            r = run_cli(*argv, "--kind", kind, "-f", fmt)
            assert r.code == code, r.err
            sections = csv_sections(r.out, "," if fmt == "csv" else "\t")
            assert len(sections) == 1 and len(sections[0][1]) == (len(rows) if fmt != "table" or kind != "store"
                                                                   else len(sections[0][1])), (name, kind, fmt)
        assert isinstance(json.loads(run_cli(*argv, "--kind", kind, "-f", "json").out), list)
    r = run_cli(*argv, "--kind", "no-such-kind")
    assert r.code == 2 and "--kind" in r.err


# --- tables at 80 columns ----------------------------------------------------------------------------
# A table on a terminal 80 columns wide: no cell holding a number, offset, id or time ends in "…" or
# goes on over a second line, and no header is cut. This part depends on the renderer (rmqtool/cli/
# render.py, the renderer's part of issue 35, merged beside this one): on this branch alone it fails.

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBER_LIKE = re.compile(r"[0-9A-Fa-f:.+\-TZ%]+")


def _on_terminal(argv: list[str], columns: int = 80) -> tuple[int, str]:
    """``rmqtool ARGV`` with stdout on a pseudo-terminal ``columns`` wide; returns (exit code, its text)."""
    import fcntl
    import pty
    import struct
    import tempfile
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "60", "NO_COLOR": "1", "TERM": "xterm"}
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-m", "rmqtool", *argv], stdin=subprocess.DEVNULL, stdout=slave,
                             stderr=err, env=env, cwd=ROOT)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:             # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = p.wait(timeout=300)
        os.close(master)
    return code, _ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r", "")


def _table_problems(text: str) -> list[str]:
    """Cut headers, cut number-like cells, and number-like cells on a continuation line (a row's
    later line: its first cell empty), except in a path column, which wraps after a ``/`` and so
    shows a whole file name there (``render.column_kind``)."""
    from rmqtool.cli.render import column_kind
    problems, header = [], []
    for line in text.splitlines():
        sep = "┃" if "┃" in line else "│"
        if line.count(sep) < 2:
            continue
        cells = [c.strip() for c in line.split(sep)[1:-1]]
        if sep == "┃":
            header = cells
        for c in cells:
            if c.endswith("…") and (sep == "┃" or _NUMBER_LIKE.fullmatch(c[:-1] or "0")):
                problems.append(f"cut: {c!r} in {line!r}")
        if sep == "│" and cells and cells[0] == "" and any(
                _NUMBER_LIKE.fullmatch(c) and re.search(r"\d", c)
                and not (k < len(header) and column_kind(header[k]) == "path")
                for k, c in enumerate(cells) if k):
            problems.append(f"wrapped: {line!r}")
    return problems


@pytest.mark.parametrize("name", [n for n, f in ROW_CASES if f == "table"])
def test_tables_at_80_columns_cut_no_number_id_or_time(name, tmp_path):
    args, code = CASES[name]
    got, text = _on_terminal(args(Stores(tmp_path)) + ["-f", "table"])
    assert got == code, text[-2000:]
    assert not _table_problems(text), _table_problems(text)[:5]
