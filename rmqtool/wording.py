"""Counts in messages: ``counted(1, "file")`` is "1 file", ``counted(3, "file")`` "3 files" (never
"1 files" or "file(s)"); times and sizes for people (``format_time``, ``human_size``: the tables' and the
report's one form). Imports nothing of ours, so every layer's messages use it."""
from __future__ import annotations

import functools
import time

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


def format_time(ms: int | None) -> str:
    """Epoch ms as the one ISO-8601 form of every table: UTC, milliseconds, ``Z``."""
    if ms is None:
        return ""
    try:
        ms = int(ms)
        return f"{_utc_second(ms // 1000)}.{ms % 1000:03d}Z"
    except (OverflowError, OSError, ValueError, TypeError):
        return str(ms)


@functools.lru_cache(maxsize=4096)
def _utc_second(seconds: int) -> str:
    """The seconds part of ``format_time`` (cached: a store's times come in runs)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def human_size(n: int | None) -> str:
    """Bytes for people: 1023 B, 1.5 KB, 3.7 MB, 2.1 GB (10^3 steps; machine formats keep the exact count)."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return str(n)
