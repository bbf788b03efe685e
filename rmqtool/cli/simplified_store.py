"""What `query-key`, `verify` and `write` do for a simplified store: run, render, return the exit code."""
from __future__ import annotations

import json
import sys
from typing import Iterable

from rmqtool.cli.common import emit, escape_control, note
from rmqtool.cli.rows import emit_kinds, prose
from rmqtool.errors import EXIT_FINDINGS, EXIT_OK
from rmqtool.wording import counted


def query_key(store, key: str, fmt: str, body: str) -> int:
    """Records whose msgId is ``key``; notes (an overwritten slot, the index convention) on stderr."""
    from rmqtool.simplified.ops import QUERY_COLUMNS, query_msg_id
    rows, notes = query_msg_id(store, key, "text" if body == "none" and fmt == "table" else body)
    for n in dict.fromkeys(notes):
        note(n)
    emit(rows, fmt, QUERY_COLUMNS if fmt == "table" else None, title=f"messages with msgId {key!r}")
    return EXIT_OK if rows else EXIT_FINDINGS


def verify(store, fmt: str, fail_on: str = "error", limit: int | None = 1000, kind: str | None = None) -> int:
    """Findings of ``simplified.verify``; exit 1 when any reaches ``fail_on``. Rows name their kind in
    ``type`` (finding, summary), as verify's on a broker store."""
    from rmqtool.simplified.verify import verify as run
    findings, summary = run(store, limit)
    bad = summary["errors"] + (summary["warnings"] if fail_on == "warning" else 0)
    code = EXIT_FINDINGS if bad else EXIT_OK
    rows = [f.as_dict() for f in findings]
    if fmt == "json" and kind is None:
        sys.stdout.write(json.dumps({"store": str(store), "layout": "simplified", "findings": rows,
                                     "summary": summary, "exit_code": code}, ensure_ascii=False, indent=2) + "\n")
    elif fmt != "table" or kind is not None:
        lines = [{"type": "finding", **r} for r in rows] + [{"type": "summary", **summary, "exit_code": code}]
        lines = [x for x in lines if kind in (None, x["type"])]
        if fmt == "table":
            emit(lines, "table", title=kind)
        else:
            emit_kinds(lines, fmt, ("finding", "summary"), key="type")
    else:
        if rows:
            emit(rows, "table", ["severity", "check", "file", "offset", "message"], title="findings")
        out = prose()
        out.print(f"verify {escape_control(str(store))} (simplified layout): {counted(summary['records'], 'record')}, "
                     f"{counted(summary['errors'], 'error')}, {counted(summary['warnings'], 'warning')}, findings "
                     f"{summary['findings']}", markup=False)
        out.print(f"exit code {code}", markup=False)
    return code


def write(store, rows: Iterable[tuple[str, dict]] | None, synthetic: int | None, seed: int, fmt: str) -> int:
    """Write the three files from JSONL rows (``(where, row)``: errors name the row's file and
    line) or from the article's random generator."""
    from rmqtool.simplified.writer import article_messages, write_store
    wheres: list[str] = []

    def messages_of(pairs):
        for where, row in pairs:
            wheres.append(where)
            yield row
    messages = article_messages(synthetic, seed) if synthetic is not None else messages_of(rows)
    written = write_store(store, messages,
                          label=lambda n: wheres[n] if n < len(wheres) else f"message {n}")
    if fmt != "table":
        emit([{"store": str(store), "layout": "simplified", "records": len(written), "messages": written}], fmt)
    else:
        emit(written, "table", ["position", "size", "msg_id", "topic", "queue_offset", "body_size",
                                "index_phy_offset"], title=f"wrote {counted(len(written), 'record')} to {store}")
    return EXIT_OK
