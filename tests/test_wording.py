"""Counts in messages agree with their number: "1 file", "3 files", never "1 files" or "file(s)".
``rmqtool.wording.counted`` is the one helper; the source check below finds an f-string that puts
a number straight before a plural noun, or writes "(s)"."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import run_cli
from rmqtool.wording import agree, counted, plural

ROOT = Path(__file__).resolve().parent.parent
NOUNS = ("files", "records", "messages", "units", "entries", "queues", "stores", "tasks", "findings",
         "directories", "topics", "hits", "errors", "warnings", "ranges", "slots", "bodies")
#: not counts: a geometry's sizes ("5000000 slots x 20000000 entries", "61 slots (" of the article's
#: index), a rate ("messages/s"), a verb ("stores PHYSICALOFFSET")
SIZES = re.compile(r"^ (slots x|slots \(|entries\b|messages/s|stores PHYSICALOFFSET)")
_PLURAL_AFTER = re.compile(rf"^ ({'|'.join(NOUNS)})\b")


def test_counted_agrees_with_the_number():
    assert counted(1, "file") == "1 file" and counted(0, "file") == "0 files" and counted(2, "file") == "2 files"
    assert counted(1, "entry") == "1 entry" and counted(7, "entry") == "7 entries"
    assert counted(2, "directory") == "2 directories" and counted(3, "match") == "3 matches"
    assert counted(2, "key", "keys") == "2 keys" and plural("day") == "days"
    assert agree(1, "is", "are") == "is" and agree(4, "is", "are") == "are"


def _offenders() -> list[str]:
    out = []
    for path in sorted((ROOT / "rmqtool").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.JoinedStr):
                continue
            parts = node.values
            for k, part in enumerate(parts):
                if not isinstance(part, ast.Constant) or not isinstance(part.value, str):
                    continue
                where = f"{path.relative_to(ROOT)}:{part.lineno}"
                if "(s)" in part.value:
                    out.append(f"{where}: {part.value!r}")
                after_number = k > 0 and isinstance(parts[k - 1], ast.FormattedValue) and parts[k - 1].format_spec is None
                if after_number and _PLURAL_AFTER.match(part.value) and not SIZES.match(part.value):
                    out.append(f"{where}: {{{ast.unparse(parts[k - 1].value)}}}{part.value[:20]!r}")
    return out


def test_no_message_puts_a_count_before_a_fixed_plural():
    assert _offenders() == []


def test_one_file_is_singular(tmp_path):
    """`write --synthetic 1` writes one record into one file of each kind: the summary says so."""
    res = run_cli("write", tmp_path / "w", "--synthetic", 1)
    assert res.code == 0, res.err
    assert "wrote 1 record (" in res.out and " in 1 commitlog file\n" in res.out, res.out
    assert "1 unit in 1 file write;" in res.out and " in 1 file\n" in res.out, res.out
    assert "1 records" not in res.out and "1 files" not in res.out
