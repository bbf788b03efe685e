"""Counts in messages: ``count(1, "file")`` is "1 file", ``count(3, "file")`` "3 files" (never
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


def count(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``many``: an irregular plural)."""
    return f"{n} {noun if n == 1 else many or plural(noun)}"
