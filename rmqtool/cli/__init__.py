"""The typer CLI: one module per command group, one error boundary.

Every command module registers itself on ``app``; ``main`` catches ``RmqError`` once,
prints ``error: <path>@<offset>: <what>`` and exits with the error's code.
"""
from __future__ import annotations

import importlib
import sys

from rmqtool.cli.startup import outputs_hold_any_text

# command name -> the module that registers it on ``app``
COMMAND_MODULES = {
    "info": "rmqtool.cli.cmd_info",
    "dump": "rmqtool.cli.cmd_dump",
    "locate": "rmqtool.cli.cmd_locate",
    "query-key": "rmqtool.cli.cmd_query",
    "query-id": "rmqtool.cli.cmd_query",
    "query-queue": "rmqtool.cli.cmd_query",
    "verify": "rmqtool.cli.cmd_verify",
    "write": "rmqtool.cli.cmd_write",
    "rebuild": "rmqtool.cli.cmd_rebuild",
    "export": "rmqtool.cli.cmd_export",
    "convert": "rmqtool.cli.cmd_convert",
    "compare": "rmqtool.cli.cmd_compare",
    "query-timer": "rmqtool.cli.cmd_timer",
    "stats": "rmqtool.cli.cmd_stats",
    "report": "rmqtool.cli.cmd_report",
    "consumers": "rmqtool.cli.cmd_consumers",
    "reset-offsets": "rmqtool.cli.cmd_consumers",
    "query-delayed": "rmqtool.cli.cmd_pending",
    "query-transactions": "rmqtool.cli.cmd_pending",
}


def load_commands(argv: list[str] | None = None) -> None:
    """Import the module of the command being run (all of them for help or an unknown name).

    Importing only what one command needs keeps short commands (query-key on a live
    store) from paying for every other command's imports.
    """
    from rmqtool.cli import common
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("-")]
    wanted = COMMAND_MODULES.get(args[0]) if args else None
    for name in sorted(set(COMMAND_MODULES.values())) if wanted is None else [wanted]:
        importlib.import_module(name)
    if wanted is None or "--help" in (argv if argv is not None else sys.argv[1:]):
        from rmqtool.cli.examples import attach
        attach(common.app)


def __getattr__(name: str):
    """``from rmqtool.cli import app`` gives the app with every command registered."""
    if name == "app":
        from rmqtool.cli import common
        load_commands([])
        return common.app
    raise AttributeError(name)


#: commands that stream GBs through numpy temporaries: they keep freed pages (fileio.tune_allocator)
BULK_COMMANDS = {"verify", "rebuild", "export", "dump", "write", "info", "convert"}


def main() -> None:
    from rmqtool.cli import common
    outputs_hold_any_text()
    load_commands()
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    if args and args[0] in BULK_COMMANDS:
        from rmqtool.io.fileio import tune_allocator
        tune_allocator()
    common.run_app(common.app)
