"""Where a DLedger-mode store keeps its commit log (docs/format-dledger.md).

With ``enableDLegerCommitLog=true`` there is no ``commitlog/``: the broker's DLedger member
``<selfId>`` keeps its entries in ``<store>/dledger-<selfId>/data/``, each entry a header of
``formats.dledger.EntryHeader`` followed by one MESSAGE record. The ConsumeQueues, IndexFiles
and checkpoint stay in the store root and hold the records' offsets in those data files.
"""
from __future__ import annotations

import os
from pathlib import Path

from formats.dledger import MEMBER_DIR_PREFIX

DATA_DIR = "data"
INDEX_DIR = "index"


def members(root: Path) -> list[Path]:
    """The DLedger member directories (``dledger-<selfId>/`` holding ``data/``) of a store root."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [root / n for n in names
            if n.startswith(MEMBER_DIR_PREFIX) and (root / n / DATA_DIR).is_dir()
            and not (root / n).is_symlink()]


def is_entry_file(path: Path | str) -> bool:
    """A file of a DLedger member's ``data/`` directory: its records sit inside entries."""
    p = Path(path)
    return p.parent.name == DATA_DIR and p.parent.parent.name.startswith(MEMBER_DIR_PREFIX)


def read_properties(path: Path) -> dict[str, str] | None:
    """A DLedger ``checkpoint``/``currterm`` file (Java properties text: ``key=value`` lines,
    ``#`` comments); None when the file is missing."""
    try:
        text = path.read_text(encoding="latin-1")
    except FileNotFoundError:
        return None
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def committed_index(member: Path) -> int | None:
    """The member's committed entry index from its ``checkpoint`` (None: no checkpoint or no value)."""
    values = read_properties(member / "checkpoint")
    try:
        return int(values["committedIndex"]) if values else None
    except (KeyError, ValueError):
        return None
