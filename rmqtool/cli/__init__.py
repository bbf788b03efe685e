"""The typer CLI: one module per command group, one error boundary.

Every command module registers itself on ``app``; ``main`` catches ``RmqError`` once,
prints ``error: <path>@<offset>: <what>`` and exits with the error's code.
"""
from __future__ import annotations

import importlib
import os
import sys

from rmqtool.cli.common import app, run_app

# one module per command group; each adds its commands to ``app`` on import
COMMAND_MODULES = (
    "rmqtool.cli.cmd_info",
    "rmqtool.cli.cmd_dump",
    "rmqtool.cli.cmd_locate",
    "rmqtool.cli.cmd_query",
    "rmqtool.cli.cmd_verify",
    "rmqtool.cli.cmd_write",
    "rmqtool.cli.cmd_rebuild",
    "rmqtool.cli.cmd_export",
)

for _name in COMMAND_MODULES:
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError as exc:   # a command group still being built in this checkout
        if exc.name != _name:
            raise


def main() -> None:
    run_app(app)
