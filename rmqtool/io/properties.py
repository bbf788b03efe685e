"""Java ``.properties`` files the broker and DLedger keep beside a store (``config/broker.properties``,
a DLedger member's ``checkpoint`` and ``currterm``), read the way ``java.util.Properties.load`` reads
them: ISO-8859-1 text; blank lines and ``#``/``!`` comments skipped; a key ends at the first ``=``,
``:`` or whitespace, and one ``=``/``:`` with the whitespace around it separates it from the value;
the last occurrence of a key wins. (Line continuations and escapes, which these files never hold,
are not interpreted.)"""
from __future__ import annotations

from pathlib import Path

from rmqtool.errors import FileChangedError
from rmqtool.io.fileio import read_file, regular_file_present


def parse_properties(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":"), line.find(" "), line.find("\t")) if i >= 0),
                  default=len(line))
        rest = line[cut:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        values[line[:cut]] = rest.strip()
    return values


def read_properties(path: Path, max_length: int, what: str) -> dict[str, str] | None:
    """The file's settings; None when no file is there (or it vanished since). A FIFO, device or
    dangling link is refused (exit 3), a file past ``max_length`` is an error naming it."""
    if not regular_file_present(path):
        return None
    try:
        text = read_file(path, exact=False, max_length=max_length, what=what).decode("latin-1")
    except FileChangedError:
        return None
    return parse_properties(text)
