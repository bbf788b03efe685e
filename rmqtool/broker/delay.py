"""Delay levels: the deliver timestamp the broker stores as tagsCode for SCHEDULE_TOPIC_XXXX."""
from __future__ import annotations

from formats import commitlog as cl
from formats.commitlog import DEFAULT_DELAY_LEVELS
from rmqtool.io.properties import read_properties
from rmqtool.io.store import MAX_CONFIG_SIZE
from rmqtool.kernels.javastring import tags_code

#: the broker's own settings file in the store's ``config/`` (upstream ``BrokerPathConfigHelper``:
#: ``<store root>/config/broker.properties`` unless the broker is started with another path)
BROKER_PROPERTIES = "broker.properties"
DELAY_LEVEL_SETTING = "messageDelayLevel"

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


def store_delay_levels(store) -> list[int]:
    """The delay table of the broker that wrote ``store``: ``messageDelayLevel`` of its
    ``config/broker.properties`` when the file sets it, else the default table. A value the
    broker could not parse (it then refuses to start) counts as the default table."""
    settings = read_properties(store.config_dir / BROKER_PROPERTIES, MAX_CONFIG_SIZE, "config file") or {}
    spec = settings.get(DELAY_LEVEL_SETTING)
    try:
        levels = parse_delay_levels(spec) if spec else []
    except (ValueError, KeyError, IndexError):
        levels = []
    return levels or list(DEFAULT_LEVELS_MS)


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


def tags_code_of(topic: str, props: dict, store_timestamp: int,
                 delay_levels_ms: list[int] = DEFAULT_LEVELS_MS) -> int:
    """``dispatch.record_tags_codes`` for one decoded record (its topic, properties and store time): the
    row form dump, export and the per-unit checks of light queues and BatchConsumeQueues use.
    ``tests/test_one_rule.py`` proves it equal to the batch rule on every reference record, with
    the default delay table and another one."""
    if topic == cl.SCHEDULE_TOPIC and cl.PROPERTY_DELAY_TIME_LEVEL in props:
        level = parse_level(props[cl.PROPERTY_DELAY_TIME_LEVEL])
        if level is not None and level > 0:
            return deliver_timestamp(level, store_timestamp, delay_levels_ms)
    return tags_code(props.get(cl.PROPERTY_TAGS))
