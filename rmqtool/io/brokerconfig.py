"""The broker's bookkeeping in ``config/`` as its ``ConfigManager`` loads it (docs/format-config.md).

``load_config`` follows upstream ``ConfigManager.load``/``loadBak``: the main file; its ``.bak``
when the main is missing, empty (0 bytes) or does not decode; the load fails (the broker does not
start) when the main did not decode and the ``.bak`` does not either; a missing or empty ``.bak``
loads nothing and succeeds. Every file is read with ``formats.fastjson`` (never a strict JSON
parser: fastjson writes unquoted integer keys) and no further than ``MAX_CONFIG_SIZE``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from formats.fastjson import FastjsonError, parse
from rmqtool.errors import CorruptDataError, FileChangedError, RmqError
from rmqtool.io.fileio import read_file, regular_file_present

CONSUMER_OFFSET = "consumerOffset.json"          # ConsumerOffsetManager
LMQ_CONSUMER_OFFSET = "lmqConsumerOffset.json"   # LmqConsumerOffsetManager (5.x)
DELAY_OFFSET = "delayOffset.json"                # ScheduleMessageService
SUBSCRIPTION_GROUP = "subscriptionGroup.json"    # SubscriptionGroupManager
BAK = ".bak"
#: ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR: offsetTable keys are ``topic@group``
TOPIC_GROUP_SEPARATOR = "@"


@dataclass
class ConfigLoad:
    """What the broker's ``ConfigManager.load`` takes from ``config/NAME``."""
    name: str
    source: str | None = None          # the file whose content is loaded (NAME or NAME.bak); None: nothing
    data: object = None                # its parsed content (checked by the reader's ``shape``)
    ok: bool = True                    # ConfigManager.load's result: False stops the broker's start
    problems: list = field(default_factory=list)    # RmqError of each file that did not decode
    ignored: str | None = None         # why the broker does not load this file at all (it was not read)

    @property
    def fell_back(self) -> bool:
        return self.source is not None and self.source.endswith(BAK)

    def error(self) -> RmqError | None:
        """The first problem (the main file's), for a command that cannot go on without this file."""
        return self.problems[0] if self.problems else None

    def says(self) -> str | None:
        """One line on how the broker loads this file, when it is not simply the main file."""
        if self.ignored:
            return f"{self.name}: not loaded: {self.ignored}"
        if not self.problems and not self.fell_back:
            return None
        if not self.ok:
            return f"{self.name}: neither it nor {self.name}{BAK} decodes: the broker refuses to start"
        why = f" ({self.problems[0]})" if self.problems else " (the main file is missing or empty)"
        if self.source is None:
            return f"{self.name}: nothing loaded{why}; the broker starts with an empty table"
        return f"{self.name}: the broker loads {self.source}{why}"


def read_text(path) -> str | None:
    """``MixAll.file2String``: the file as UTF-8 text, None when absent (bounded read)."""
    from rmqtool.io.store import MAX_CONFIG_SIZE
    if not regular_file_present(path):
        return None
    try:
        raw = read_file(path, max_length=MAX_CONFIG_SIZE, what="config file")
    except FileChangedError:
        return None
    return raw.decode("utf-8", errors="replace")


def parse_file(path, text: str, shape=None):
    """``text`` of ``path`` parsed; a file that does not parse, or is not the ``shape`` its reader
    needs, raises ``CorruptDataError`` named ``<file>:<line>:<col>``."""
    try:
        value = parse(text)
    except FastjsonError as exc:
        raise CorruptDataError(exc.message, path=f"{path}:{exc.line}:{exc.col}") from None
    if shape is not None and value is not None:
        problem = shape(value)
        if problem:
            raise CorruptDataError(problem, path=f"{path}:1:1")
    return value


def load_config(config_dir, name: str, shape=None) -> ConfigLoad:
    """``config/NAME`` as ConfigManager.load takes it (module docstring)."""
    out = ConfigLoad(name)
    main = config_dir / name
    bak = config_dir / (name + BAK)
    text = read_text(main)
    if text:
        try:
            out.data, out.source = parse_file(main, text, shape), name
            return out
        except RmqError as exc:
            out.problems.append(exc)
    text = read_text(bak)
    if text:
        try:
            out.data, out.source = parse_file(bak, text, shape), name + BAK
        except RmqError as exc:
            out.problems.append(exc)
            out.ok = False
    return out


# --- the shapes each manager's decode needs -------------------------------------------------------

def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_key(k) -> bool:
    """A map key fastjson wrote for a Java int or long: unquoted (an int here) or a quoted number."""
    return _is_int(k) or (isinstance(k, str) and k.lstrip("-").isdigit())


def _offset_table(value) -> tuple[dict | None, str | None]:
    """``(offsetTable, None)`` of a manager's decoded file, ``(None, None)`` without one, or the problem."""
    if not isinstance(value, dict):
        return None, "not an object"
    table = value.get("offsetTable")
    if table is not None and not isinstance(table, dict):
        return None, "offsetTable is not an object"
    return table, None


def offset_table_shape(value) -> str | None:
    """ConsumerOffsetManager: ``offsetTable`` maps ``topic@group`` to {queueId: offset}."""
    table, problem = _offset_table(value)
    for key, queues in (table or {}).items():
        if not isinstance(queues, dict):
            return f"offsetTable[{key!r}] is not an object"
        for q, off in queues.items():
            if not _int_key(q) or not _is_int(off):
                return f"offsetTable[{key!r}] holds {q!r}: {off!r}, not a queue id and an offset"
    return problem


def delay_table_shape(value) -> str | None:
    """ScheduleMessageService: ``offsetTable`` maps delay level to offset."""
    table, problem = _offset_table(value)
    for level, off in (table or {}).items():
        if not _int_key(level) or not _is_int(off):
            return f"offsetTable holds {level!r}: {off!r}, not a delay level and an offset"
    return problem


def object_shape(value) -> str | None:
    return None if isinstance(value, dict) else "not an object"


@dataclass
class CommittedOffset:
    group: str
    topic: str
    queue_id: int
    offset: int
    source: str             # the file it was loaded from


def lmq_offset_table_shape(value) -> str | None:
    """LmqConsumerOffsetManager: ConsumerOffsetManager's ``offsetTable`` and ``lmqOffsetTable``, which
    maps ``topic@group`` (an ``%LMQ%`` group) to one offset."""
    problem = offset_table_shape(value)
    if problem or not isinstance(value, dict):
        return problem
    table = value.get("lmqOffsetTable")
    if table is None:
        return None
    if not isinstance(table, dict):
        return "lmqOffsetTable is not an object"
    for key, off in table.items():
        if not _is_int(off):
            return f"lmqOffsetTable[{key!r}] is {off!r}, not an offset"
    return None


def lmq_broker(config_dir) -> bool:
    """The store's broker ran with ``enableLmq``: its ``lmqConsumerOffset.json`` (or the ``.bak``)
    exists. Such a broker's offsets manager is LmqConsumerOffsetManager, whose file is that one
    (BrokerController: ``enableLmq ? new LmqConsumerOffsetManager``); consumerOffset.json is not read."""
    return any(regular_file_present(config_dir / (LMQ_CONSUMER_OFFSET + ext)) for ext in ("", BAK))


def _split_key(key) -> tuple[str, str] | None:
    topic, sep, group = str(key).partition(TOPIC_GROUP_SEPARATOR)
    return (topic, group) if sep else None       # the broker splits on '@' and skips keys it cannot split


def committed_offsets(config_dir) -> tuple[list[CommittedOffset], list[ConfigLoad]]:
    """Every (group, topic, queue, offset) the broker loads, in the file's order, and how each of
    ``consumerOffset.json`` and ``lmqConsumerOffset.json`` was loaded (in that order). A broker with
    ``enableLmq`` (``lmq_broker``) loads ``lmqConsumerOffset.json`` only, as LmqConsumerOffsetManager
    decodes it: its ``offsetTable`` ({queue id: offset} per ``topic@group``) and its
    ``lmqOffsetTable`` (one offset per ``topic@group`` of an ``%LMQ%`` group: queue 0); any other
    broker ``consumerOffset.json`` only (ConsumerOffsetManager)."""
    rows: list[CommittedOffset] = []
    if lmq_broker(config_dir):
        skipped = ConfigLoad(CONSUMER_OFFSET, ignored=f"the broker ran with enableLmq (the store has "
                                                      f"{LMQ_CONSUMER_OFFSET}), whose offsets are in that file")
        if not regular_file_present(config_dir / CONSUMER_OFFSET):
            skipped.ignored = None
        load = load_config(config_dir, LMQ_CONSUMER_OFFSET, lmq_offset_table_shape)
        loads = [skipped, load]
    else:
        load = load_config(config_dir, CONSUMER_OFFSET, offset_table_shape)
        loads = [load, ConfigLoad(LMQ_CONSUMER_OFFSET)]
    data = load.data if isinstance(load.data, dict) else {}
    for key, queues in (data.get("offsetTable") or {}).items():
        split = _split_key(key)
        if split is not None:
            rows.extend(CommittedOffset(split[1], split[0], int(q), int(off), load.source or load.name)
                        for q, off in queues.items())
    for key, off in (data.get("lmqOffsetTable") or {}).items():
        split = _split_key(key)
        if split is not None:
            rows.append(CommittedOffset(split[1], split[0], 0, int(off), load.source or load.name))
    return rows, loads


def delay_offsets(config_dir) -> tuple[dict[int, int], ConfigLoad]:
    """{delay level: offset} as ScheduleMessageService's ConfigManager.load takes it (before its
    ``correctDelayOffset`` clamps each to the schedule queue: ``ops.pending.schedule_levels``)."""
    load = load_config(config_dir, DELAY_OFFSET, delay_table_shape)
    table = (load.data or {}).get("offsetTable") or {} if isinstance(load.data, dict) else {}
    return {int(k): int(v) for k, v in table.items()}, load


def subscription_groups(config_dir) -> tuple[dict[str, dict], ConfigLoad]:
    """``subscriptionGroupTable``: group name -> its SubscriptionGroupConfig fields."""
    load = load_config(config_dir, SUBSCRIPTION_GROUP, object_shape)
    table = (load.data or {}).get("subscriptionGroupTable") or {} if isinstance(load.data, dict) else {}
    return {str(k): v for k, v in table.items() if isinstance(v, dict)}, load

