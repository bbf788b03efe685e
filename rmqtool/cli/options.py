"""The option vocabulary: every option that more than one command takes is spelled here once (its
names and metavar; each command gives its own help line), every closed set of values is an Enum
(``--help`` lists it, shell completion completes it), and the command classes that render the
vocabulary: usage lines and metavars that say what is wanted, commands in the order of work
(inspect, query, check, repair, export), global options accepted after the command, and the old
spellings still accepted (hidden from ``--help``).

Light on purpose: typer and the standard library only (every command imports it at start-up).
"""
from __future__ import annotations

import copy
import enum
import re
import sys
from typing import Optional

import typer
from typer.core import TyperCommand, TyperGroup


class Choice(str, enum.Enum):
    """A closed set of values. A member is its value everywhere a string is (``fmt == "table"``,
    f-strings, JSON, dict keys), so code that compares strings keeps working."""
    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


class Format(Choice):
    """How a command prints its rows (every command that prints rows takes all five)."""
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    tsv = "tsv"


class Body(Choice):
    raw = "raw"
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


class ExportFormat(Choice):
    """The format of the files ``export`` writes (not of what it prints)."""
    parquet = "parquet"
    jsonl = "jsonl"


class ExportBody(Choice):
    raw = "raw"
    text = "text"
    none = "none"


class Engine(Choice):
    local = "local"
    spark = "spark"


class Level(Choice):
    shallow = "shallow"
    deep = "deep"


class FailOn(Choice):
    error = "error"
    warning = "warning"


class Layout(Choice):
    auto = "auto"
    rocketmq = "rocketmq"
    simplified = "simplified"


class WriteLayout(Choice):
    auto = "auto"
    rocketmq = "rocketmq"
    dledger = "dledger"
    simplified = "simplified"


class Color(Choice):
    auto = "auto"
    always = "always"
    never = "never"


class Boundary(Choice):
    lower = "lower"
    upper = "upper"


class Bucket(Choice):
    minute = "minute"
    hour = "hour"
    day = "day"


class ConvertTarget(Choice):
    commitlog = "commitlog"


#: what ``verify --only`` takes (repeat it or comma-separate: completed, not a click Choice)
CHECK_KINDS = ("commitlog", "consumequeue", "index", "checkpoint")


# --- one spelling per concept --------------------------------------------------------------------

#: concept -> (option names, metavar): the one spelling of each value-taking option more than one
#: command takes; ``option(concept, ...)`` declares it with the command's own help line
SPELLINGS = {
    "limit": (("--limit", "-n"), "N"),
    "topic": (("--topic", "-t"), "TOPIC"),
    "queue": (("--queue", "-q"), "ID"),
    "group": (("--group", "-g"), "GROUP"),
    "output": (("--output", "-o"), "DIR"),
    "begin": (("--begin",), "TIME"),
    "end": (("--end",), "TIME"),
    "from_offset": (("--from-offset",), "OFFSET"),
    "to_offset": (("--to-offset",), "OFFSET"),
    "cq_file_size": (("--cq-file-size",), "BYTES"),
    "bcq_file_size": (("--bcq-file-size",), "BYTES"),
    "commitlog_file_size": (("--commitlog-file-size",), "BYTES"),
    "timer_precision_ms": (("--timer-precision-ms",), "MS"),
}


def option(concept: str, default=None, *, help: str, metavar: str | None = None, **kw):
    """The option of ``concept`` (``SPELLINGS``) with this command's help line; ``metavar`` only where
    the value is of another kind than the usual one (``-o FILE`` for a command that writes a file)."""
    names, usual = SPELLINGS[concept]
    return typer.Option(default, *names, metavar=metavar or usual, help=help, **kw)


FormatOpt = typer.Option(Format.table, "--format", "-f",
                         help="how to print the rows (csv/tsv: a header line, nested values as JSON)")
BodyOpt = typer.Option(Body.none, "--body", help="how to show message bodies (raw: base64 of the stored bytes)")
LayoutOpt = typer.Option(Layout.auto, "--layout",
                         help="the store's layout (simplified: the article's *.txt files; auto: found from the files)")
CommitlogDirsOpt = typer.Option(None, "--commitlog-dirs", metavar="DIR[,DIR...]",
                                help="comma-separated commitlog directories (storePathCommitLog)")
IndexSlotsOpt = typer.Option(None, "--index-slots", metavar="N", help="maxHashSlotNum (default 5,000,000 or inferred)")
IndexEntriesOpt = typer.Option(None, "--index-entries", metavar="N",
                               help="maxIndexNum (default 20,000,000 or inferred)")
MaxReadRateOpt = typer.Option(None, "--max-read-rate", metavar="MB/S",
                              help="read store files at most this many MB/s (10^6 bytes; per process: --jobs N "
                                   "reads up to N times it), to spare a live broker's disk")
IdleIoOpt = typer.Option(False, "--idle-io", help="use the idle I/O class (Linux ioprio; a no-op elsewhere): the "
                         "disk serves rmqtool only when nobody else asks")


def _mirror_s3a(values: Optional[list]):
    """--spark-conf spark.hadoop.fs.s3a.* also reach this process's own reads (explicit
    --storage-option values win)."""
    if values:
        from rmqtool.io import storage
        mirrored = storage.parse_options((), values)
        if mirrored:
            storage.set_options({**mirrored, **storage.options()})
    return values


# where a command that walks a CommitLog runs (verify, export, stats, report, query-key/query-id --scan,
# rebuild): the same on every such command (``common.with_engine_options`` gives them to a command)
EngineOpt = typer.Option(Engine.local, "--engine", help="where the CommitLog walk runs")
#: the one rule of --jobs
JobsOpt = typer.Option(None, "--jobs", "-j", metavar="N", show_default="auto",
                       help="worker processes on this machine (0: one per CPU); auto: the fastest way that needs "
                            "no extra module, which is one process per CPU (at most 8) for rebuild and this one "
                            "process for every other command")
MasterOpt = typer.Option(None, "--master", metavar="URL",
                         help="Spark master (default local[*]; ignored under spark-submit)")
RemoteOpt = typer.Option(None, "--remote", metavar="URL",
                         help="Spark Connect URL, e.g. sc://host:15002 (or SPARK_REMOTE)")
SparkConfOpt = typer.Option(None, "--spark-conf", metavar="KEY=VALUE", callback=_mirror_s3a,
                            help="Spark setting (repeatable; spark.hadoop.fs.s3a.* also apply to this "
                                 "process's reads of s3:// stores)")
SplitOpt = typer.Option(None, "--split-size", metavar="BYTES",
                        help="bytes of CommitLog per engine task (default 128 MiB; with --jobs N or --engine spark)")
StagingOpt = typer.Option(None, "--staging", metavar="DIR|URI",
                          help="where tasks leave their results for this process (default: a temporary "
                          "directory when the tasks run on this machine; a cluster needs a location its "
                          "executors and this process share)")


# --- command classes -----------------------------------------------------------------------------

#: the top-level commands in the order of work: inspect, query, check, repair, export
COMMAND_ORDER = ("info", "stats", "consumers", "dump", "locate", "query-key", "query-id", "query-queue",
                 "query-timer", "query-delayed", "query-transactions", "verify", "compare", "report", "rebuild",
                 "reset-offsets", "write", "convert", "export")

#: old spellings still accepted, hidden from --help: command path -> {old: (canonical, note or None)};
#: ``*`` for every command that takes the canonical option
OLD_SPELLINGS = {
    "*": {"--workers": ("--jobs", None)},
    "query-key": {"--max": ("--limit", None)},
    "query-queue": {"--count": ("--limit", None)},
    "export": {"--to": ("--output", None)},
    "convert": {"--to": ("--into", "note: convert --to is now --into (--to will be removed)")},
}


def _no_type_metavar(param, ctx=None) -> str:
    """An argument's value type adds nothing to its name in --help (``STORE``, not ``STORE <str>``)."""
    return ""


_RST_LITERAL = re.compile(r"``(.+?)``")


def plain(text: str | None) -> str | None:
    """Help text as a person reads it: RST literals (two backticks each side) without their markup."""
    return text if not text else _RST_LITERAL.sub(r"\1", text)


def _argument_name(param) -> str:
    name = param.metavar or param.name.upper()
    if param.nargs != 1 and "..." not in name:
        name += "..."
    return name if param.required else f"[{name}]"


def _given(args: list[str], param) -> str | None:
    """The value ``args`` give ``param`` (its last occurrence), for an error that quotes it."""
    value = None
    for i, arg in enumerate(args):
        name, eq, rest = arg.partition("=")
        if name in param.opts + param.secondary_opts:
            value = rest if eq else (args[i + 1] if i + 1 < len(args) else None)
    return value


def parse_choices(parse, ctx, args: list[str]) -> list[str]:
    """``parse(ctx, args)``, with a value outside a choice reported as every other usage error is:
    one line naming the option and its choices (exit 2)."""
    try:
        return parse(ctx, list(args))          # click consumes the list it is given
    except Exception as exc:
        param = getattr(exc, "param", None)
        if type(exc).__name__ != "BadParameter" or param is None or not hasattr(param.type, "choices"):
            raise
        from rmqtool.errors import UsageError
        given = _given(args, param)
        raise UsageError(f"{param.opts[0]} must be one of {', '.join(map(str, param.type.choices))}"
                         + ("" if given is None else f", not {given!r}")) from None


class Command(TyperCommand):
    """A command as --help and the reference show it: ``Usage: rmqtool query-key [OPTIONS] STORE... KEY``,
    arguments by their metavar alone, hidden (old) positional forms left out; old option spellings
    (``OLD_SPELLINGS``) rewritten to the canonical ones before click reads them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = plain(self.help)
        for param in self.params:
            if getattr(param, "help", None):
                param.help = plain(param.help)
            if param.param_type_name == "argument":
                quiet = copy.copy(param.type)
                quiet.get_metavar = _no_type_metavar
                param.type = quiet

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_argument_name(p) for p in self.get_params(ctx)
                         if p.param_type_name == "argument" and not p.hidden]

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        names, c = [], ctx
        while c.parent is not None:
            names.append(c.info_name)
            c = c.parent
        return parse_choices(super().parse_args, ctx, self.canonical_args(" ".join(reversed(names)), args))

    def canonical_args(self, path: str, args: list[str]) -> list[str]:
        """``args`` with the old spellings this command accepts replaced by their canonical names
        (``--max 5`` -> ``--limit 5``, ``--to=x`` -> ``--output=x``); a deprecation note on stderr."""
        takes = {o for p in self.params for o in p.opts + p.secondary_opts}
        old = {k: v for k, v in OLD_SPELLINGS.get("*", {}).items() if v[0] in takes}
        old.update(OLD_SPELLINGS.get(path, {}))
        if not old:
            return args
        out = []
        for i, arg in enumerate(args):
            if arg == "--":
                return out + args[i:]
            name, eq, value = arg.partition("=")
            if name in old and name not in takes:
                canonical, note = old[name]
                if note:
                    print(note, file=sys.stderr)
                arg = canonical + eq + value
            out.append(arg)
        return out


#: the group's options that belong where they are given (``info --help`` is the help of info)
NOT_GLOBAL = ("help", "install_completion", "show_completion")


class Group(TyperGroup):
    """A command group whose commands are listed in ``COMMAND_ORDER`` (others after them, in the order
    they were added), and which takes its own (global) options after the command name too:
    ``rmqtool info STORE --wide`` is ``rmqtool --wide info STORE``."""

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        rank = {n: i for i, n in enumerate(COMMAND_ORDER)}
        return sorted(names, key=lambda n: (rank.get(n, len(rank)), names.index(n)))

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if ctx.parent is None:
            args = self.global_options_first(ctx, args)
        return parse_choices(super().parse_args, ctx, args)

    def global_options_first(self, ctx, args: list[str]) -> list[str]:
        """Move this group's own options found after the command name (and the value each takes) in
        front of it, unless the command itself takes an option of that name."""
        own = {o: p for p in self.get_params(ctx) if p.param_type_name == "option" and p.name not in NOT_GLOBAL
               for o in p.opts + p.secondary_opts}
        i = 0
        while i < len(args) and args[i].startswith("-") and args[i] != "--":     # global options before it
            p = own.get(args[i].partition("=")[0])
            i += 1 if p is None or p.is_flag or "=" in args[i] else 2
        if i >= len(args) or args[i] == "--":
            return args
        leaf, j = self.commands.get(args[i]), i + 1
        while isinstance(leaf, TyperGroup) and j < len(args) and args[j] in leaf.commands:
            leaf, j = leaf.commands[args[j]], j + 1
        taken = {o for p in getattr(leaf, "params", ()) for o in p.opts + p.secondary_opts}
        moved, rest, k = [], list(args[i + 1:j]), j
        while k < len(args):
            arg = args[k]
            if arg == "--":
                rest += args[k:]
                break
            name = arg.partition("=")[0]
            p = own.get(name)
            if p is None or name in taken:
                rest.append(arg)
                k += 1
                continue
            width = 1 if p.is_flag or "=" in arg else 2
            moved += args[k:k + width]
            k += width
        return args[:i] + moved + [args[i]] + rest


class App(typer.Typer):
    """A typer app whose commands are ``Command`` s and whose groups are ``Group`` s."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("cls", Group)
        super().__init__(*args, **kwargs)

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)
