"""Delay levels: the deliver timestamp the broker stores as tagsCode for SCHEDULE_TOPIC_XXXX."""
from __future__ import annotations

from formats.commitlog import DEFAULT_DELAY_LEVELS

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: upstream uses storeTimestamp + 1000 when the level has no entry in its table
UNKNOWN_LEVEL_DELAY_MS = 1000


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> list[int]:
    """messageDelayLevel string -> delay in ms per level (level 1 first)."""
    levels = []
    for token in spec.split():
        levels.append(int(token[:-1]) * _UNIT_MS[token[-1]])
    return levels


DEFAULT_LEVELS_MS = parse_delay_levels()


def deliver_timestamp(level: int, store_timestamp: int, levels_ms: list[int] = DEFAULT_LEVELS_MS) -> int:
    """computeDeliverTimestamp: level clamped to the table's size."""
    level = min(level, len(levels_ms))
    if 1 <= level <= len(levels_ms):
        return store_timestamp + levels_ms[level - 1]
    return store_timestamp + UNKNOWN_LEVEL_DELAY_MS


def parse_level(text: str) -> int | None:
    """Integer.parseInt semantics for the DELAY property; None when it would throw."""
    t = text.strip() if text is not None else ""
    if not t or t != text:
        return None
    try:
        value = int(t, 10)
    except ValueError:
        return None
    if not -(1 << 31) <= value < (1 << 31):
        return None
    return value
