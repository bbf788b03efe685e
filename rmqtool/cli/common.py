"""Shared CLI pieces: the app, common options, time parsing, output rendering, error boundary."""
from __future__ import annotations

import datetime as dt
import functools
import inspect
import json
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, List, Optional

import typer

from rmqtool.cli.options import (App, BodyOpt, Color, CommitlogDirsOpt, Engine, EngineOpt, Format,  # noqa: F401 (re-exported)
                                 FormatOpt, IdleIoOpt, IndexEntriesOpt, IndexSlotsOpt, JobsOpt, MasterOpt,
                                 MaxReadRateOpt, RemoteOpt, SparkConfOpt, SplitOpt, StagingOpt)
from rmqtool.cli.startup import quiet_closed_stdout as _quiet_closed_stdout
from rmqtool.errors import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, MissingDependencyError, RmqError, UsageError,
                            missing_extra)

app = App(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
          help="Offline forensic and repair tool for Apache RocketMQ broker stores.")


def _print_version(value: bool) -> None:
    if value:
        from rmqtool.cli.startup import version_text
        sys.stdout.write(version_text())
        raise typer.Exit()


def _set_wide(value: bool) -> None:
    if value:
        os.environ["RMQTOOL_WIDE"] = "1"             # read by the table renderer


def _set_color(value: Color) -> Color:
    os.environ["RMQTOOL_COLOR"] = value.value
    return value


def _keep_traceback(value: bool) -> None:
    if value:
        os.environ["RMQTOOL_TRACEBACK"] = "1"       # read by run_app's error boundary


def _set_storage_options(values: Optional[List[str]]) -> None:
    if values:
        from rmqtool.io import storage
        storage.set_options({**storage.options(), **storage.parse_options(values)})


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version, which kernel path runs (native C or numpy) and the installed extras, then exit"),
          wide: bool = typer.Option(False, "--wide", callback=_set_wide, is_eager=True,
                                    help="tables show every column and whole cells (they wrap); without it a "
                                         "table fits the terminal, long cells cut with an ellipsis"),
          color: Color = typer.Option(Color.auto, "--color", callback=_set_color, is_eager=True,
                                      help="colour in tables and messages (NO_COLOR in the environment also "
                                           "turns it off)"),
          traceback: bool = typer.Option(False, "--traceback", callback=_keep_traceback, is_eager=True,
                                         help="on an internal or OS error, print the Python traceback "
                                              "(for bug reports; same as RMQTOOL_TRACEBACK=1)"),
          storage_option: Optional[List[str]] = typer.Option(
              None, "--storage-option", metavar="KEY=VALUE", callback=_set_storage_options, is_eager=True,
              help="a setting of the object store the STORE URIs (s3://, gs://, hdfs://) are read from, "
                   "e.g. endpoint_override=host:9000, region=eu-west-1, anonymous=true (repeatable; "
                   "see docs/guide-fleets.md)"),
          ) -> None:
    """Offline forensic and repair tool for Apache RocketMQ broker stores."""


def _width() -> int | None:
    """Full width on a terminal; wide tables (not 80 columns) when piped."""
    if sys.stdout.isatty():
        return None
    return int(os.environ.get("COLUMNS", "200"))


class LazyConsole:
    """A rich Console made on first use, so a command that prints only JSON never imports rich
    (~20-40 ms of start-up). Attribute access goes to the Console; ``get()`` returns it."""

    def __init__(self, stderr: bool = False):
        self._stderr = stderr
        self._console = None

    def get(self):
        if self._console is None:
            from rich.console import Console
            color = os.environ.get("RMQTOOL_COLOR", "auto")       # --color; rich honours NO_COLOR itself
            style = {"always": dict(force_terminal=True), "never": dict(no_color=True)}.get(color, {})
            self._console = (Console(stderr=True, soft_wrap=True, highlight=False, **style) if self._stderr
                             else Console(soft_wrap=True, highlight=False, width=_width(), **style))
        return self._console

    def __getattr__(self, name):
        return getattr(self.get(), name)


def real_console(console):
    """The rich Console behind a LazyConsole (or the console itself), for rich's own widgets."""
    return console.get() if isinstance(console, LazyConsole) else console


stdout = LazyConsole()
stderr = LazyConsole(stderr=True)

FORMATS = tuple(f.value for f in Format)
BODY_MODES = ("raw", "text", "hex", "base64", "none")

def gentle(max_read_rate: Optional[float], idle_io: bool) -> None:
    """Apply ``--max-read-rate`` and ``--idle-io`` to this process and the workers it starts."""
    from rmqtool.io import throttle
    if max_read_rate is not None:
        if max_read_rate <= 0:
            raise UsageError(f"--max-read-rate {max_read_rate}: expected MB/s > 0")
        throttle.set_max_read_rate(max_read_rate)
    if idle_io and not throttle.use_idle_io():
        stderr.print("note: --idle-io: this system offers no idle I/O class; reading at normal priority",
                     markup=False)


def open_store(path: str, commitlog_dirs: str | None = None, index_slots: int | None = None,
               index_entries: int | None = None):
    from rmqtool.io.store import Store
    return Store(path, commitlog_dirs=commitlog_dirs, index_slots=index_slots, index_entries=index_entries)


def open_stores(paths, commitlog_dirs: str | None = None, index_slots: int | None = None,
                index_entries: int | None = None) -> list[tuple[str, object]]:
    """``[(name, Store)]`` for STORE... arguments: one path as given, or several paths and globs
    named like ``export`` names them (directory name, full path when names collide)."""
    if len(paths) == 1 and not any(ch in paths[0] for ch in "*?["):
        return [(paths[0], open_store(paths[0], commitlog_dirs, index_slots, index_entries))]
    from rmqtool.io.stores import open_stores as open_many
    return open_many(paths, lambda p: open_store(p, commitlog_dirs, index_slots, index_entries))


@contextmanager
def engine_from_options(engine: str, jobs: Optional[int], master: Optional[str], remote: Optional[str],
                        spark_conf: Optional[list], staging: Optional[str] = None,
                        split_size: Optional[int] = None, scan_option: Optional[bool] = None,
                        own_pool: bool = False):
    """The engine the common options ask for, for as long as the command runs: None for the
    local default (``--jobs`` not given, or 1: the operation's own in-process way), else an
    ``Engine`` (``--jobs N``: a local pool of N processes, 0 one per CPU; ``--engine spark``).
    Every operation takes it as ``engine=``; no command decides more than this.
    ``scan_option``: the command walks the CommitLog only with ``--scan``, which was (True) or
    was not (False) given; an engine asked for without it is a usage error (before Spark starts).
    ``own_pool``: the operation runs ``--jobs`` local processes itself (rebuild's ordered pool, which
    the operation is given as ``workers=``), so the local engine is always None."""
    from rmqtool.engines import default_jobs, get_engine
    check_engine_options(engine, jobs, split_size)
    if engine == "local" and jobs is not None:
        jobs = jobs or default_jobs()
    if engine == "local" and (jobs in (None, 1) or own_pool):
        if staging is not None:
            from rmqtool.io.staging import check_location
            check_location(staging)
        yield None
        return
    if scan_option is False:
        raise UsageError(f"--engine {engine}" + (f" --jobs {jobs}" if engine == "local" else "")
                         + " runs the CommitLog scan: add --scan")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        asked = "--engine spark" if engine == "spark" else "--jobs"
        extra = "spark" if engine == "spark" else "parquet"
        raise MissingDependencyError(f"{asked} needs pyarrow: pip install 'rmqtool[{extra}]'") from None
    with get_engine(engine, jobs=jobs, master=master, remote=remote, spark_conf=spark_conf or (),
                    staging=staging) as eng:
        yield eng


@dataclass(frozen=True)
class EngineOptions:
    """The engine options one command was given (``with_engine_options``), as one value."""
    engine: str = "local"
    jobs: Optional[int] = None
    master: Optional[str] = None
    remote: Optional[str] = None
    spark_conf: tuple = ()
    split_size: Optional[int] = None
    staging: Optional[str] = None

    def check(self) -> None:
        check_engine_options(self.engine, self.jobs, self.split_size)

    def open(self, scan_option: Optional[bool] = None, own_pool: bool = False):
        """``engine_from_options`` for these options: the operation's ``engine=``."""
        return engine_from_options(self.engine, self.jobs, self.master, self.remote, list(self.spark_conf),
                                   self.staging, self.split_size, scan_option, own_pool)


#: the engine options, in the order --help lists them: (parameter, type, declaration)
ENGINE_PARAMETERS = (("engine", Engine, EngineOpt), ("jobs", Optional[int], JobsOpt),
                     ("master", Optional[str], MasterOpt), ("remote", Optional[str], RemoteOpt),
                     ("spark_conf", Optional[List[str]], SparkConfOpt), ("split_size", Optional[int], SplitOpt),
                     ("staging", Optional[str], StagingOpt))


def with_engine_options(command):
    """Give a command the engine options, declared once here: its ``engine_options`` parameter is
    replaced, in the signature typer reads, by ``ENGINE_PARAMETERS``, and receives what they were
    given as one ``EngineOptions``."""
    signature = inspect.signature(command, eval_str=True)
    params = []
    for param in signature.parameters.values():
        if param.name != "engine_options":
            params.append(param)
            continue
        params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option,
                                     annotation=kind) for name, kind, option in ENGINE_PARAMETERS]
    if len(params) != len(signature.parameters) + len(ENGINE_PARAMETERS) - 1:
        raise TypeError(f"{command.__name__} has no engine_options parameter")

    @functools.wraps(command)
    def run(**kwargs):
        given = {name: kwargs.pop(name) for name, _, _ in ENGINE_PARAMETERS}
        given["spark_conf"] = tuple(given["spark_conf"] or ())
        given["engine"] = getattr(given["engine"], "value", given["engine"])
        return command(engine_options=EngineOptions(**given), **kwargs)
    run.__signature__ = signature.replace(parameters=params)
    run.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
    return run


def check_engine_options(engine: str, jobs: Optional[int], split_size: Optional[int]) -> None:
    """The engine options' own checks (usage errors, exit 2), for every command that takes them."""
    from rmqtool.engines import ENGINES
    check_choice(engine, ENGINES, "--engine")
    if jobs is not None and jobs < 0:
        raise UsageError(f"--jobs must be 0 (one per CPU) or positive, not {jobs}")
    if split_size is not None and split_size <= 0:
        raise UsageError(f"--split-size must be positive, not {split_size}")


def check_choice(value: str, choices: Iterable[str], option: str) -> str:
    if value not in choices:
        raise UsageError(f"{option} must be one of {', '.join(choices)}, not {value!r}")
    return value


_EPOCH_MS = re.compile(r"^-?\d+$")


def parse_time(text: Optional[str], option: str) -> Optional[int]:
    """Epoch milliseconds or ISO-8601 (UTC unless a zone is given) -> epoch ms."""
    if text is None:
        return None
    text = text.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option}: {text!r} is neither epoch milliseconds nor ISO-8601") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return int(value.timestamp() * 1000)


def format_time(ms: Optional[int]) -> str:
    if ms is None:
        return ""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def human_size(n: int | None) -> str:
    """Bytes for people: 1023 B, 1.5 KB, 3.7 MB, 2.1 GB (10^3 steps; machine formats keep the exact count)."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return str(n)


def escape_control(text: str) -> str:
    """Terminal control characters shown as \\xNN, so bodies never drive the terminal; bytes of a
    name that were not UTF-8 as \\xNN too (``topicpath.printable``)."""
    from rmqtool.io.topicpath import printable
    return printable(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def emit_jsonl(rows: Iterable[dict]) -> int:
    n = 0
    write = sys.stdout.write
    for row in rows:
        write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    sys.stdout.flush()
    return n


#: rows per rich table on a terminal: a person sees the first rows at once, whatever follows
TABLE_CHUNK = 100


def emit(rows: Iterable[dict], fmt: str, columns: list[str] | None = None, title: str | None = None) -> int:
    """Render rows as they come: a JSON array, JSON lines, rich tables (on a terminal, in chunks of
    ``TABLE_CHUNK`` rows) or tab-separated lines with a header (table format, stdout not a terminal).
    Memory stays flat whatever the row count. Returns the row count."""
    if fmt == "jsonl":
        return emit_jsonl(rows)
    if fmt == "json":
        return emit_json(rows)
    if fmt == "csv":
        return emit_csv(rows, columns)
    if fmt == "tsv" or not sys.stdout.isatty():
        return emit_tsv(rows, columns, title)
    return _emit_tables(rows, columns, title)


def emit_json(rows: Iterable[dict]) -> int:
    """A JSON array streamed row by row, the same text as ``json.dumps(rows, indent=2)``."""
    import textwrap
    write = sys.stdout.write
    n = 0
    for row in rows:
        write("[\n" if n == 0 else ",\n")
        write(textwrap.indent(json.dumps(row, ensure_ascii=False, indent=2), "  "))
        n += 1
    write("[]\n" if n == 0 else "\n]\n")
    sys.stdout.flush()
    return n


def emit_tsv(rows: Iterable[dict], columns: list[str] | None = None, title: str | None = None) -> int:
    """Tab-separated lines with a header line: what scripts read when a table is piped."""
    write = sys.stdout.write
    n, cols = 0, columns
    for row in rows:
        if cols is None:
            cols = list(row.keys())
        if n == 0:
            write("\t".join(cols) + "\n")
        write("\t".join(_tsv_cell(row.get(c)) for c in cols) + "\n")
        n += 1
    if n == 0 and cols:
        write("\t".join(cols) + "\n")
    sys.stdout.flush()
    return n


def emit_csv(rows: Iterable[dict], columns: list[str] | None = None) -> int:
    """RFC 4180 CSV with a header line (every column of the first row unless ``columns``); nested
    values as JSON, text exactly as it is (quoted as needed)."""
    import csv
    out = csv.writer(sys.stdout, lineterminator="\n")
    n, cols = 0, columns
    for row in rows:
        if cols is None:
            cols = list(row.keys())
        if n == 0:
            out.writerow(cols)
        out.writerow([_cell(row.get(c)) for c in cols])
        n += 1
    if n == 0 and cols:
        out.writerow(cols)
    sys.stdout.flush()
    return n


def _tsv_cell(value) -> str:
    return escape_control(_cell(value))            # tabs and newlines come out as \x09, \x0a


def _emit_tables(rows: Iterable[dict], columns: list[str] | None, title: str | None) -> int:
    from itertools import islice
    from rich.table import Table
    it = iter(rows)
    n, cols = 0, columns
    while True:
        chunk = list(islice(it, TABLE_CHUNK))
        if not chunk and n:
            return n
        cols = cols or (list(chunk[0].keys()) if chunk else [])
        wide = os.environ.get("RMQTOOL_WIDE") == "1"
        cells = [[escape_control(_cell(row.get(c))) for c in cols] for row in chunk]
        table = Table(title=title if n == 0 else None, show_lines=False)
        widths = None if wide else fit_widths(cols, cells, real_console(stdout).width)
        for k, c in enumerate(cols):     # fitted: one line per cell, cut with an ellipsis; --wide: whole cells
            if widths is None:
                table.add_column(c, overflow="fold")
            else:
                table.add_column(_cut(c, widths[k]), width=widths[k], no_wrap=True, overflow="ellipsis")
        for row in cells:
            table.add_row(*(row if widths is None else [_cut(v, w) for v, w in zip(row, widths)]))
        stdout.print(table)
        n += len(chunk)
        if len(chunk) < TABLE_CHUNK:
            return n


def fit_widths(cols: list[str], cells: list[list[str]], width: int) -> list[int]:
    """Column widths that fit a table in ``width`` terminal columns: each column as wide as its widest
    cell, then the widest ones narrowed in turn (never below its header's first 6 characters, 1 at
    least) until the table fits (3 columns of frame and padding per column, plus one)."""
    natural = [max([len(c)] + [len(r[k]) for r in cells]) for k, c in enumerate(cols)]
    floor = [max(1, min(len(c), 6)) for c in cols]
    room = max(width - (3 * len(cols) + 1), sum(floor))
    w = list(natural)
    while sum(w) > room:
        k = max(range(len(w)), key=lambda i: (w[i] - floor[i], w[i]))
        if w[k] <= floor[k]:
            break
        w[k] -= max(1, min(w[k] - floor[k], (sum(w) - room + len(w) - 1) // len(w)))
    return w


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def say_followed_links() -> None:
    """One note per store file this run read through a symbolic link (``fileio.followed_links``)."""
    from rmqtool.io.fileio import followed_links, link_note
    for path, target in followed_links():
        stderr.print(f"note: {escape_control(path)} {escape_control(link_note(path, target))}", markup=False)


def fail(exc: RmqError) -> None:
    say_followed_links()
    stderr.print(f"error: {escape_control(str(exc))}", markup=False)
    raise SystemExit(exc.exit_code)


def _path_argument() -> str:
    """For an OS error that names no file: the first argument after the command's name that is a
    path on disk (the STORE, mostly), else "rmqtool"."""
    for arg in sys.argv[2:]:
        if arg and not arg.startswith("-") and os.path.lexists(arg):
            return arg
    return "rmqtool"


def run_app(application: typer.Typer) -> None:
    """Run typer; RmqError becomes one line and its exit code; nothing else leaks a traceback."""
    from rmqtool.io.fileio import forget_followed_links
    forget_followed_links()                 # notes are per command (the tests run many in one process)
    try:
        result = application(standalone_mode=False)
    except RmqError as exc:
        fail(exc)
    except SystemExit:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":     # click's answer to EPIPE: exit 1
            _quiet_closed_stdout()
            raise SystemExit(0) from None
        raise
    except KeyboardInterrupt:
        stderr.print("interrupted", markup=False)
        raise SystemExit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_closed_stdout()
        raise SystemExit(0)
    except Exception as exc:   # click usage errors and anything unforeseen
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):      # click/typer usage error
            exc.show()
            raise SystemExit(EXIT_BAD_INPUT)
        if exc.__class__.__name__ == "Abort":
            if isinstance(exc.__cause__, KeyboardInterrupt):         # click turns Ctrl-C into Abort
                stderr.print("interrupted", markup=False)
                raise SystemExit(EXIT_INTERRUPTED)
            raise SystemExit(EXIT_BAD_INPUT)
        if os.environ.get("RMQTOOL_TRACEBACK"):       # --traceback: for a bug report, then the one line
            import traceback
            traceback.print_exc()
        missing = missing_extra(exc)
        if missing is not None:              # an optional module this command needs
            fail(missing)
        if isinstance(exc, OSError):
            where = exc.filename if exc.filename is not None else _path_argument()
            stderr.print(f"error: {escape_control(str(where))}: {exc.strerror or exc}", markup=False)
            raise SystemExit(EXIT_BAD_INPUT)
        if isinstance(exc, RecursionError):
            stderr.print("error: input nested too deeply to read", markup=False)
            raise SystemExit(EXIT_BAD_INPUT)
        stderr.print(f"error: internal error {exc.__class__.__name__}: {escape_control(str(exc))} "
                     f"(please report it with the command line)", markup=False)
        raise SystemExit(EXIT_BAD_INPUT)
    if result == EXIT_INTERRUPTED:          # typer turns Ctrl-C into Exit(130), returned here
        stderr.print("interrupted", markup=False)
    else:
        say_followed_links()
    raise SystemExit(result if isinstance(result, int) else 0)
