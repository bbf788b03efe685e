"""How rows reach the user: tables, JSON, JSON lines, CSV, TSV; times; the consoles.

The rules, each in one place here:

- **Times.** Row producers carry epoch milliseconds under the names in ``TIME_FIELDS``. Tables show
  them as ``format_time`` (one ISO-8601 form, UTC, ``2026-11-26T14:01:13.123Z``); machine formats
  keep the milliseconds and add an ISO twin ``<field>_iso`` right after each (``with_iso``).
  ``parse_time`` reads every time a user gives: epoch ms, ISO-8601, or relative (``1h ago``,
  ``now-15m``, ``today``, ``yesterday``).
- **Cells.** ``true``/``false`` for booleans, nested values as JSON, nothing for None.
- **CSV/TSV sections.** A header per row kind: whenever the set of keys changes, an empty line
  and a new header (``_delimited``).
- **Tables never cut a value.** Columns named in ``FREE_TEXT_COLUMNS`` wrap at spaces, those in
  ``PATH_COLUMNS`` after a ``/``; every other column (numbers, ids, offsets, times, names) is shown
  whole on one line. When the columns do not fit the terminal, the rightmost are left out with one
  note on stderr naming them; when fewer than ``MIN_TABLE_COLUMNS`` would remain, each row is printed
  as a vertical ``field: value`` record instead. ``--wide`` shows every column, wrapping.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from typing import Iterable, Optional

from rmqtool.errors import UsageError
from rmqtool.wording import agree, counted, format_time, human_size  # noqa: F401 (the CLI's names for them)

# --- consoles -----------------------------------------------------------------------------------


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal: tables there, tab-separated lines when piped."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def quiet() -> bool:
    """``--quiet``: notes, progress and summaries on stderr are silenced (errors still print)."""
    return os.environ.get("RMQTOOL_QUIET") == "1"


def _width() -> int | None:
    """Full width on a terminal; wide tables (not 80 columns) when piped."""
    if stdout_is_terminal():
        return None
    return int(os.environ.get("COLUMNS", "200"))


class LazyConsole:
    """A rich Console made on first use, so a command that prints only JSON never imports rich
    (~20-40 ms of start-up). Attribute access goes to the Console; ``get()`` returns it. The
    stderr console is quiet under ``--quiet``, except for lines that start with ``error``."""

    def __init__(self, stderr: bool = False):
        self._stderr = stderr
        self._console = None

    def get(self):
        if self._console is None:
            from rich.console import Console
            color = os.environ.get("RMQTOOL_COLOR", "auto")       # --color; rich honours NO_COLOR itself
            style = {"always": dict(force_terminal=True), "never": dict(no_color=True)}.get(color, {})
            self._console = (Console(stderr=True, soft_wrap=True, highlight=False, emoji=False, quiet=quiet(), **style)
                             if self._stderr
                             else Console(soft_wrap=True, highlight=False, emoji=False, width=_width(), **style))
        return self._console

    def reset(self) -> None:
        """Forget the Console (each command reads --color, --quiet and the width afresh)."""
        self._console = None

    def print(self, *objects, **kwargs):
        if self._stderr and quiet() and objects and isinstance(objects[0], str) \
                and objects[0].startswith("error"):
            say_error(objects[0])
            return
        if self._console is None and kwargs == {"markup": False} and len(objects) == 1 \
                and isinstance(objects[0], str) and "\t" not in objects[0]:    # tabs: rich lays them out
            self._plain(objects[0])            # a plain line: rich would print it as it is
            return
        return self.get().print(*objects, **kwargs)

    def _plain(self, line: str) -> None:
        """One line of plain text, as rich prints it unstyled (no markup, no highlighting, soft
        wrap), without making a Console: a short command that prints a note never imports rich."""
        if self._stderr and quiet():
            return
        stream = sys.stderr if self._stderr else sys.stdout
        stream.write(line + "\n")
        if self._stderr:
            stream.flush()

    def __getattr__(self, name):
        return getattr(self.get(), name)


def real_console(console):
    """The rich Console behind a LazyConsole (or the console itself), for rich's own widgets."""
    return console.get() if isinstance(console, LazyConsole) else console


stdout = LazyConsole()
stderr = LazyConsole(stderr=True)


def note(text: str) -> None:
    """One ``note:`` line on stderr (silenced by --quiet)."""
    stderr.print(f"note: {escape_control(text)}", markup=False)


def say_error(line: str) -> None:
    """An error line on stderr, whatever --quiet says."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


# --- times --------------------------------------------------------------------------------------

#: fields that hold epoch milliseconds, in every row producer (dump, query, locate, stats, timers, info)
TIME_FIELDS = frozenset({
    "store_timestamp", "born_timestamp", "timestamp", "time", "time_ms",
    "begin_timestamp", "end_timestamp",                                   # index headers, entries
    "physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
    "min_timestamp", "min_timestamp_index",                               # checkpoint
    "first_store_time", "last_store_time", "bucket_start",                # stats
    "due_ms", "first_due_ms", "last_due_ms", "enqueue_time_ms", "slot_time_ms", "timer_out_ms",
    "last_read_time_ms", "data_version_timestamp",                        # timers
})
ISO_SUFFIX = "_iso"


def with_iso(obj):
    """``obj`` (a row, or any JSON value) with an ISO twin ``<field>_iso`` after every epoch-ms
    field of ``TIME_FIELDS``, at any depth (None stays None, so every row of a kind has the same keys)."""
    t = type(obj)
    if t is dict:
        out = {}
        for k, v in obj.items():
            tv = type(v)
            if tv is dict or tv is list:
                v = with_iso(v)
            out[k] = v
            if k in TIME_FIELDS and (tv is int or v is None) and k + ISO_SUFFIX not in obj:
                out[k + ISO_SUFFIX] = None if v is None else format_time(v)
        return out
    if t is list:
        return [with_iso(v) for v in obj]
    return obj


_EPOCH_MS = re.compile(r"^-?\d+$")
_RELATIVE = re.compile(r"^(?:(?P<base>now|today|yesterday|tomorrow)\s*(?:(?P<sign>[+-])\s*(?P<span1>.+))?"
                       r"|(?P<span2>.+?)\s+ago)$")
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h"
                        r"|days?|d|weeks?|w)(?![a-z])\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
TIME_FORMS = ("epoch ms, ISO-8601 (UTC unless it names a zone), or relative: now, today, yesterday, "
              "1h ago, now-15m, now+1d")


def _span_ms(text: str) -> int | None:
    """``1h30m``, ``15 min``, ``2d`` -> milliseconds (None when it is not a span)."""
    text = text.strip().lower()
    pos, total = 0, 0.0
    while pos < len(text):
        m = _SPAN_PART.match(text, pos)
        if m is None:
            return None
        unit = m.group(2)
        unit = "ms" if unit == "ms" else ("m" if unit.startswith("mi") or unit == "m" else unit[0])
        total += float(m.group(1)) * _UNIT_MS[unit]
        pos = m.end()
    return int(total) if pos else None


def parse_time(text: Optional[str], option: str, now_ms: Optional[int] = None) -> Optional[int]:
    """A time the user gives -> epoch ms: epoch milliseconds, ISO-8601 (UTC unless a zone is given),
    or relative to ``now_ms`` (default: the clock): ``now``, ``today`` / ``yesterday`` / ``tomorrow``
    (midnight UTC), ``1h ago``, ``now-15m``, ``now+1d``, ``yesterday+6h``."""
    if text is None:
        return None
    text = text.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    m = _RELATIVE.match(text.lower())
    if m is not None:
        now = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000) if now_ms is None else now_ms
        midnight = now - now % 86_400_000
        if m.group("span2") is not None:
            span = _span_ms(m.group("span2"))
            if span is not None:
                return now - span
        else:
            base = {"now": now, "today": midnight, "yesterday": midnight - 86_400_000,
                    "tomorrow": midnight + 86_400_000}[m.group("base")]
            if m.group("sign") is None:
                return base
            span = _span_ms(m.group("span1"))
            if span is not None:
                return base + span if m.group("sign") == "+" else base - span
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a time; give {TIME_FORMS}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return int(value.timestamp() * 1000)


# --- cells --------------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escape_control(text: str) -> str:
    """Terminal control characters shown as \\xNN, so bodies never drive the terminal; bytes of a
    name that were not UTF-8 as \\xNN too (``topicpath.printable``)."""
    from rmqtool.io.topicpath import printable
    return printable(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))




def _cell(value) -> str:
    """A value as CSV/TSV text: nothing for None, true/false, nested values as JSON."""
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def table_cell(column: str, value) -> str:
    """A value as a table cell: ``_cell``, epoch ms of ``TIME_FIELDS`` as ``format_time``,
    control characters escaped."""
    if column in TIME_FIELDS and type(value) is int:
        return format_time(value)
    return escape_control(_cell(value))


def _tsv_cell(value) -> str:
    return escape_control(_cell(value))            # tabs and newlines come out as \x09, \x0a


# --- emitting -----------------------------------------------------------------------------------

#: rows per rich table on a terminal: a person sees the first rows at once, whatever follows
TABLE_CHUNK = 100


def emit(rows: Iterable[dict], fmt: str, columns: list[str] | None = None, title: str | None = None) -> int:
    """Render rows as they come: a JSON array, JSON lines, CSV, TSV, rich tables (on a terminal, in
    chunks of ``TABLE_CHUNK`` rows) or the table's cells as tab-separated lines (table format, stdout
    not a terminal). ``columns``: the table's columns; in CSV/TSV only their order (every key of a
    row is printed). Memory stays flat whatever the row count. Returns the row count."""
    if fmt == "jsonl":
        return emit_jsonl(rows)
    if fmt == "json":
        return emit_json(rows)
    if fmt == "csv":
        return emit_csv(rows, columns)
    if fmt == "tsv":
        return emit_tsv(rows, columns)
    if not stdout_is_terminal():
        return _delimited(rows, columns, _tsv_writer(), table=True)
    return _emit_tables(rows, columns, title)


def emit_jsonl(rows: Iterable[dict]) -> int:
    n = 0
    write = sys.stdout.write
    for row in rows:
        write(json.dumps(with_iso(row), ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    sys.stdout.flush()
    return n


def emit_json(rows: Iterable[dict]) -> int:
    """A JSON array streamed row by row, the same text as ``json.dumps(rows, indent=2)``."""
    import textwrap
    write = sys.stdout.write
    n = 0
    for row in rows:
        write("[\n" if n == 0 else ",\n")
        write(textwrap.indent(json.dumps(with_iso(row), ensure_ascii=False, indent=2), "  "))
        n += 1
    write("[]\n" if n == 0 else "\n]\n")
    sys.stdout.flush()
    return n


def emit_tsv(rows: Iterable[dict], columns: list[str] | None = None, title: str | None = None) -> int:
    """Tab-separated lines, a header per row kind (``_delimited``); tabs and newlines in a value as \\x09, \\x0a."""
    return _delimited(rows, columns, _tsv_writer(), table=False)


def emit_csv(rows: Iterable[dict], columns: list[str] | None = None) -> int:
    """RFC 4180 CSV, a header per row kind (``_delimited``); text exactly as it is (quoted as needed)."""
    import csv
    out = csv.writer(sys.stdout, lineterminator="\n")
    return _delimited(rows, columns, lambda cells: out.writerow(cells), table=False, cell=_cell)


def _tsv_writer():
    write = sys.stdout.write
    return lambda cells: write("\t".join(cells) + "\n")


def _with_twins(columns: list[str]) -> list[str]:
    return [name for c in columns for name in ((c, c + ISO_SUFFIX) if c in TIME_FIELDS else (c,))]


def _delimited(rows: Iterable[dict], columns: list[str] | None, writerow, table: bool, cell=_tsv_cell) -> int:
    """Rows as delimited lines. Machine formats (``table`` False): every key of every row, epoch-ms
    fields with their ISO twins; a new section (an empty line, then a header) whenever a row's set
    of keys differs from the previous row's, so no column is ever empty for a field its kind has.
    ``columns`` order the keys they name first. Piped tables (``table`` True): the table's cells
    (``table_cell``), under one header of ``columns`` (sections only when no columns are given)."""
    n = 0
    order = None if columns is None else (list(columns) if table else _with_twins(columns))
    keyset, header = None, None
    for row in rows:
        if not table:
            row = with_iso(row)
        if header is None and table and columns is not None:
            header = order
            writerow(header)
        elif not (table and columns is not None) and row.keys() != keyset:
            keyset = set(row)
            header = list(row) if order is None else (
                [c for c in order if c in keyset] + [k for k in row if k not in set(order)])
            if n:
                sys.stdout.write("\n")
            writerow(header)
        if table:
            writerow([table_cell(c, row.get(c)) for c in header])
        else:
            writerow([cell(row.get(c)) for c in header])
        n += 1
    if n == 0 and order:
        writerow(order)
    sys.stdout.flush()
    return n


# --- tables -------------------------------------------------------------------------------------

#: columns of free text: they wrap at spaces (and fold a word longer than the column)
FREE_TEXT_COLUMNS = frozenset({"body", "keys", "tags", "properties", "detail", "note", "message", "excerpt",
                               "reason", "hint", "description", "text", "summary"})
#: columns of paths: they wrap after a ``/``, never inside a name
PATH_COLUMNS = frozenset({"file", "path", "dir", "directory", "store", "target", "source"})
#: fewer columns than this would fit: each row is printed as a vertical ``field: value`` record
MIN_TABLE_COLUMNS = 3
#: a free-text column is never made narrower than this (or its longest word, or its header)
TEXT_MIN_WIDTH = 12
#: severity colours in tables on a terminal
SEVERITY_STYLES = {"error": "bold red", "fatal": "bold red", "critical": "bold red", "warning": "yellow",
                   "warn": "yellow", "info": "dim"}
SEVERITY_COLUMNS = frozenset({"severity", "level"})


def column_kind(name: str) -> str:
    """``text`` (wraps at spaces), ``path`` (wraps after ``/``) or ``whole`` (one line, never cut)."""
    if name in FREE_TEXT_COLUMNS:
        return "text"
    if name in PATH_COLUMNS or name.endswith(("_file", "_path", "_dir")):
        return "path"
    return "whole"


def _cell_len(text: str) -> int:
    from rich.cells import cell_len
    return cell_len(text)


def _min_width(kind: str, header: str, cells: list[str], natural: int) -> int:
    head = _cell_len(header)
    if kind == "whole":
        return natural
    if kind == "path":
        parts = [p for c in cells for p in _path_parts(c)]
        return max([head] + [_cell_len(p) for p in parts])
    longest = max([0] + [_cell_len(w) for c in cells for w in c.split()])
    return max(head, min(natural, max(TEXT_MIN_WIDTH, min(longest, 40))))


def _path_parts(text: str) -> list[str]:
    return re.findall(r"[^/]*/|[^/]+$", text) or [text]


def _wrap_path(text: str, width: int) -> str:
    lines, line = [], ""
    for part in _path_parts(text):
        if line and _cell_len(line) + _cell_len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join(lines + [line])


def fit_columns(cols: list[str], cells: list[list[str]], width: int) -> Optional[tuple[list[int], list[int]]]:
    """The columns that fit a table in ``width`` terminal columns and their widths, as
    ``(kept column indexes, widths)``: the columns from the left, each whole column at least its
    minimum (``whole`` ones their widest cell, headers never cut), while they fit (3 columns of frame
    and padding per column, plus one); the room left goes to the wrapping columns. None: fewer than
    ``MIN_TABLE_COLUMNS`` (or all of them, when there are fewer) fit, print vertical records."""
    kinds = [column_kind(c) for c in cols]
    natural = [max([_cell_len(c)] + [_cell_len(r[k]) for r in cells]) for k, c in enumerate(cols)]
    minimum = [_min_width(kinds[k], c, [r[k] for r in cells], natural[k]) for k, c in enumerate(cols)]
    kept: list[int] = []
    used = 1
    for k in range(len(cols)):
        if used + minimum[k] + 3 > width:
            break
        kept.append(k)
        used += minimum[k] + 3
    if len(kept) < min(MIN_TABLE_COLUMNS, len(cols)):
        return None
    widths = [minimum[k] for k in kept]
    spare = width - used
    for i, k in enumerate(kept):              # the room left, left to right, to the columns that wrap
        if spare <= 0:
            break
        grow = min(spare, natural[k] - widths[i])
        widths[i] += grow
        spare -= grow
    return kept, widths


def _styled(column: str, text: str):
    """A cell as rich Text, coloured by severity in a severity column."""
    from rich.text import Text
    style = SEVERITY_STYLES.get(text.lower()) if column in SEVERITY_COLUMNS else None
    return Text(text, style=style or "")


def _emit_tables(rows: Iterable[dict], columns: list[str] | None, title: str | None) -> int:
    """Rich tables, ``TABLE_CHUNK`` rows at a time (a new table whenever the keys change when no
    ``columns`` are given), fitted to the terminal (``fit_columns``) unless ``--wide``."""
    from itertools import islice
    it = iter(rows)
    n = 0
    wide = os.environ.get("RMQTOOL_WIDE") == "1"
    noted: set[str] = set()
    pending: list[dict] = []
    while True:
        chunk = pending + list(islice(it, TABLE_CHUNK - len(pending)))
        if not chunk:
            if n == 0 and columns:
                _print_table(columns, [], title, wide, noted)
            return n
        cols, pending = columns, []
        if cols is None:                    # one table per set of keys
            keys = chunk[0].keys()
            same = next((i for i, r in enumerate(chunk) if r.keys() != keys), len(chunk))
            chunk, pending, cols = chunk[:same], chunk[same:], list(keys)
        cells = [[table_cell(c, row.get(c)) for c in cols] for row in chunk]
        _print_table(cols, cells, title if n == 0 else None, wide, noted)
        n += len(chunk)


def _print_table(cols: list[str], cells: list[list[str]], title: str | None, wide: bool, noted: set) -> None:
    from rich.table import Table
    width = real_console(stdout).width
    fit = None if wide else fit_columns(cols, cells, width)
    if not wide and fit is None:
        _print_records(cols, cells, title)
        return
    table = Table(title=title, show_lines=False)
    if wide:
        kept, widths = list(range(len(cols))), [None] * len(cols)
    else:
        kept, widths = fit
        dropped = [c for k, c in enumerate(cols) if k not in set(kept) and c not in noted]
        if dropped:
            noted.update(dropped)
            note(f"{counted(len(dropped), 'column')} not shown at {width} columns: {', '.join(dropped)} "
                 f"(--wide or -f json shows {agree(len(dropped), 'it', 'them')})")
    for k, w in zip(kept, widths):
        kind = column_kind(cols[k])
        if wide:
            table.add_column(cols[k], overflow="fold")
        elif kind == "whole":
            table.add_column(cols[k], width=w, no_wrap=True, overflow="ignore")
        else:
            table.add_column(cols[k], width=w, overflow="fold")
    for row in cells:
        out = []
        for k, w in zip(kept, widths):
            text = row[k]
            if w is not None and column_kind(cols[k]) == "path":
                text = _wrap_path(text, w)
            out.append(_styled(cols[k], text))
        table.add_row(*out)
    stdout.print(table)


def _print_records(cols: list[str], cells: list[list[str]], title: str | None) -> None:
    """Each row as a vertical record: ``field: value`` lines, a blank line between rows."""
    from rich.text import Text
    pad = max(_cell_len(c) for c in cols) + 1
    if title:
        stdout.print(Text(title, style="italic"))
    for i, row in enumerate(cells):
        if i:
            stdout.print("")
        for c, v in zip(cols, row):
            line = Text(f"{c + ':':<{pad}} ")
            line.append_text(_styled(c, v))
            stdout.print(line)
