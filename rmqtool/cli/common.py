"""Shared CLI pieces: the app, common options, the error boundary (output rendering and times: cli/render.py)."""
from __future__ import annotations

import functools
import inspect
import json
import os
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
# the renderer (cli/render.py), importable from here as the command modules always did
from rmqtool.cli.render import (TABLE_CHUNK, LazyConsole, emit, emit_csv, emit_json, emit_jsonl,  # noqa: F401
                                emit_tsv, escape_control, fit_columns, format_time, human_size, note, parse_time,
                                real_console, say_error, stderr, stdout, with_iso)

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


def _set_quiet(value: bool) -> None:
    if value:
        os.environ["RMQTOOL_QUIET"] = "1"            # read by the stderr console (render.LazyConsole)


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
                                    help="tables show every column, long cells wrapping; without it a table "
                                         "fits the terminal: columns that do not fit are left out (a note names "
                                         "them), or each row becomes a field: value record"),
          quiet: bool = typer.Option(False, "--quiet", callback=_set_quiet, is_eager=True,
                                     help="no notes, progress or summaries on stderr (errors still print)"),
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
        note("--idle-io: this system offers no idle I/O class; reading at normal priority")


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
    check_engine_options(jobs, split_size)
    if engine == "local" and jobs is not None:
        from rmqtool.engines import default_jobs
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
    from rmqtool.engines import get_engine
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
        check_engine_options(self.jobs, self.split_size)

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


def check_engine_options(jobs: Optional[int], split_size: Optional[int]) -> None:
    """The engine options' own checks (usage errors, exit 2), for every command that takes them
    (--engine is a choice click checks; ``engines.get_engine`` names the engines it knows)."""
    if jobs is not None and jobs < 0:
        raise UsageError(f"--jobs must be 0 (one per CPU) or positive, not {jobs}")
    if split_size is not None and split_size <= 0:
        raise UsageError(f"--split-size must be positive, not {split_size}")


def check_choice(value: str, choices: Iterable[str], option: str) -> str:
    if value not in choices:
        raise UsageError(f"{option} must be one of {', '.join(choices)}, not {value!r}")
    return value


def say_followed_links() -> None:
    """One note per store file this run read through a symbolic link (``fileio.followed_links``)."""
    from rmqtool.io.fileio import followed_links, link_note
    for path, target in followed_links():
        note(f"{path} {link_note(path, target)}")


def say_loads(name: str, loads, fleet: bool) -> None:
    """How the broker loads each config file (``brokerconfig.ConfigLoad``), when it is not simply the
    main file; a file it cannot load ends the command with that file's error."""
    for load in loads:
        line = load.says()
        if line:
            note(f"{name}: {line}" if fleet else line)
        if not load.ok:
            raise load.error()


def _json_format_asked(argv: list[str]) -> bool:
    """Whether the command line asks for ``-f json`` or ``-f jsonl`` (``--format json``, ``-fjson``,
    ``--format=jsonl``): its errors are then also one JSON object on stderr. ``export``'s --format is
    the format of the files it writes, not of what it prints (a key, topic or path named export is
    not that command: the command is the first argument naming one registered on ``app``)."""
    commands = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    if next((arg for arg in argv if arg in commands), None) == "export":
        return False
    for k, arg in enumerate(argv):
        if arg in ("-f", "--format"):
            value = argv[k + 1] if k + 1 < len(argv) else ""
        elif arg.startswith("--format="):
            value = arg[len("--format="):]
        elif arg.startswith("-f") and not arg.startswith("--"):
            value = arg[2:].lstrip("=")
        else:
            continue
        if value in ("json", "jsonl"):
            return True
    return False


def report_error(message: str, code: int, path=None, offset: int | None = None) -> None:
    """An error as the user sees it: ``error: [path[@offset]: ]message``, the last line on stderr
    (even under --quiet), and before it, under ``-f json|jsonl``, one JSON object:
    ``{"error": message, "file": path or null, "offset": n or null, "exit": code}``."""
    if _json_format_asked(sys.argv[1:]):
        say_error(json.dumps({"error": message, "file": None if path is None else str(path), "offset": offset,
                              "exit": code}, ensure_ascii=False))
    where = "" if path is None else (f"{path}: " if offset is None else f"{path}@{offset}: ")
    say_error(f"error: {escape_control(where + message)}")


def fail(exc: RmqError) -> None:
    say_followed_links()
    report_error(exc.message, exc.exit_code, exc.path, exc.offset)
    raise SystemExit(exc.exit_code)


def _usage_error(exc) -> None:
    """A click/typer usage error as one line naming the command's help, exit 2."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "rmqtool"
    message = " ".join(exc.format_message().split())
    report_error(f"{message} ({where} --help)", EXIT_BAD_INPUT)
    raise SystemExit(EXIT_BAD_INPUT)


def _interrupted() -> None:
    say_error("interrupted")                # Ctrl-C: not an error of the input, so no error line or object
    raise SystemExit(EXIT_INTERRUPTED)


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
    stdout.reset()                          # --color, --quiet and the width are per command too
    stderr.reset()
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
        _interrupted()
    except BrokenPipeError:
        _quiet_closed_stdout()
        raise SystemExit(0)
    except Exception as exc:   # click usage errors and anything unforeseen
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):      # click/typer usage error
            if exc.__class__.__name__ == "NoArgsIsHelpError":        # a group without a command: its help
                exc.show()
                raise SystemExit(EXIT_BAD_INPUT)
            _usage_error(exc)
        if exc.__class__.__name__ == "Abort":
            if isinstance(exc.__cause__, KeyboardInterrupt):         # click turns Ctrl-C into Abort
                _interrupted()
            raise SystemExit(EXIT_BAD_INPUT)
        if os.environ.get("RMQTOOL_TRACEBACK"):       # --traceback: for a bug report, then the one line
            import traceback
            traceback.print_exc()
        missing = missing_extra(exc)
        if missing is not None:              # an optional module this command needs
            fail(missing)
        if isinstance(exc, OSError):
            where = exc.filename if exc.filename is not None else _path_argument()
            report_error(str(exc.strerror or exc), EXIT_BAD_INPUT, where)
            raise SystemExit(EXIT_BAD_INPUT)
        if isinstance(exc, RecursionError):
            report_error("input nested too deeply to read", EXIT_BAD_INPUT)
            raise SystemExit(EXIT_BAD_INPUT)
        report_error(f"internal error {exc.__class__.__name__}: {exc} (please report it with the command line)",
                     EXIT_BAD_INPUT)
        raise SystemExit(EXIT_BAD_INPUT)
    if result == EXIT_INTERRUPTED:          # typer turns Ctrl-C into Exit(130), returned here
        say_error("interrupted")
    else:
        say_followed_links()
    raise SystemExit(result if isinstance(result, int) else 0)
