"""Every command speaks csv and tsv (issue 18): a header line (one per row kind, issue 35) and rows
that parse back, from the one shared renderer; the exit code is the same as with a table."""
from __future__ import annotations

import csv
import io

import pytest

from conftest import reference_store, run_cli
from test_cli_surface import csv_sections

BASIC = str(reference_store("basic"))
COMMANDS = {
    "info": ["info", BASIC],
    "dump-commitlog": ["dump", "commitlog", BASIC, "--limit", "20", "--body", "text"],
    "dump-consumequeue": ["dump", "consumequeue", BASIC, "--limit", "20"],
    "dump-index": ["dump", "index", BASIC, "--limit", "20"],
    "dump-checkpoint": ["dump", "checkpoint", BASIC],
    "locate": ["locate", BASIC, "98310"],
    "query-key": ["query-key", BASIC, "key-0011"],
    "query-id": ["query-id", BASIC, "C0A8010A00002A9F00000000000005C2"],
    "query-queue": ["query-queue", BASIC, "TopicTest", "1", "--offset", "3", "--count", "3"],
    "verify": ["verify", str(reference_store("crashed"))],
    "compare": ["compare", BASIC, BASIC],
    "compare-queues": ["compare", BASIC, BASIC, "--queues"],
}


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_writes_parseable_rows(name, fmt):
    args = COMMANDS[name]
    table = run_cli(*args)
    r = run_cli(*args, "-f", fmt)
    assert r.code == table.code, r.err
    assert "Traceback" not in r.err
    sections = csv_sections(r.out, "," if fmt == "csv" else "\t")     # several kinds: a section each
    assert sections and all(len(row) == len(header) for header, rows in sections for row in rows), r.out[:500]
    assert sum(len(rows) for _, rows in sections) >= 1


def test_csv_keeps_text_exact_and_tsv_escapes_controls(tmp_path):
    r = run_cli("dump", "commitlog", BASIC, "--limit", "50", "--body", "text", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(r.out, newline="")))
    import json
    want = [json.loads(line) for line in run_cli("dump", "commitlog", BASIC, "--limit", "50", "--body", "text",
                                                  "-f", "jsonl").out.split("\n") if line]
    assert [row["body"] for row in rows] == [w["body"] or "" for w in want]
    t = run_cli("dump", "commitlog", BASIC, "--limit", "50", "--body", "text", "-f", "tsv")
    lines = [line for line in t.out.split("\n") if line]
    assert len(lines) == 51 and all(line.count("\t") == lines[0].count("\t") for line in lines)
