"""Counts in messages: ``counted(1, "file")`` is "1 file", ``counted(3, "file")`` "3 files" (never
"1 files" or "file(s)"). Imports nothing of ours, so every layer's messages use it."""
from __future__ import annotations

_ES = ("s", "x", "z", "ch", "sh")


def plural(noun: str) -> str:
    """The plural of an English noun by the regular rules (entry -> entries, match -> matches)."""
    if noun.endswith("y") and noun[-2:-1] not in tuple("aeiou"):
        return noun[:-1] + "ies"
    if noun.endswith(_ES):
        return noun + "es"
    return noun + "s"


def counted(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``many``: an irregular plural)."""
    return f"{n} {noun if n == 1 else many or plural(noun)}"


def agree(n: int, one: str, many: str) -> str:
    """The verb (or any word) that agrees with a count: ``agree(n, "is", "are")``."""
    return one if n == 1 else many
