"""Rows of several kinds (``stats``, ``verify``, ``info``, ``rebuild all``): ``--kind``, one CSV/TSV
section per kind, one object as field/value rows; and where a command's sentences for people go."""
from __future__ import annotations

import sys
from typing import Iterable, Optional

from rmqtool.cli.common import check_choice, emit, stderr, stdout
from rmqtool.cli.render import stdout_is_terminal


def prose():
    """Where a command's sentences for people go in table mode (summaries, forecasts, the line
    before a table): the terminal when stdout is one, else stderr, so that stdout piped or
    redirected (table mode there prints tab-separated rows) holds only rows."""
    return stdout if stdout_is_terminal() else stderr


def field_rows(obj: dict, prefix: str = "") -> list[dict]:
    """One object as ``{"field", "value"}`` rows for a vertical table, nested objects' fields named
    with dots (``record.topic``); lists stay one value."""
    rows = []
    for k, v in obj.items():
        if isinstance(v, dict) and v:
            rows += field_rows(v, f"{prefix}{k}.")
        else:
            rows.append({"field": f"{prefix}{k}", "value": v})
    return rows


def check_kind(kind: Optional[str], kinds: Iterable[str]) -> Optional[str]:
    """``--kind``: one of the row kinds a command prints (None: all of them)."""
    return None if kind is None else check_choice(kind, tuple(kinds), "--kind")


def emit_kinds(rows: Iterable[dict], fmt: str, kinds: Iterable[str], key: str = "kind") -> int:
    """Rows of several kinds (each names its kind in ``key``) in a machine format: a JSON array or
    JSON lines in the order given; CSV/TSV one section per kind in the order of ``kinds``, each
    with its own header naming every field its rows have (a row without one gets an empty cell).
    Sections are parted by an empty line; kinds with no rows print nothing. Returns the row count."""
    if fmt in ("json", "jsonl"):
        return emit(rows, fmt)
    groups: dict = {k: [] for k in kinds}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    n = 0
    for group in groups.values():
        if group:
            if n:
                sys.stdout.write("\n")
            columns = list(dict.fromkeys(c for row in group for c in row))
            n += emit([{c: row.get(c) for c in columns} for row in group], fmt, columns)
    return n
