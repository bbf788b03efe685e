"""The 5.x queue kinds beside the plain ConsumeQueue, as the broker fills them
(docs/format-lmq-batchcq.md):

- **Light queues** (``%LMQ%…``): a message whose properties name queues in
  ``INNER_MULTI_DISPATCH`` and their offsets in ``INNER_MULTI_QUEUE_OFFSET`` gets, after its own
  ConsumeQueue unit, one unit in each named queue at the named offset (multi-dispatch).
- **BatchConsumeQueue** topics (topic attribute ``queue.type=BatchCQ``): one 46-byte unit per
  record in ``batchconsumequeue/<topic>/<queue>/``, carrying the inner batch's base offset and
  size (``INNER_BASE``, ``INNER_NUM``), instead of a ConsumeQueue unit.

No numpy here: these are per-record rules over a record's topic, queue and properties map.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from formats import commitlog as cl

PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
#: MixAll.LMQ_DISPATCH_SEPARATOR
LMQ_DISPATCH_SEPARATOR = ","
RETRY_TOPIC_PREFIX = "%RETRY%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

_JAVA_LONG = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SHORT_MIN, _SHORT_MAX = -(1 << 15), (1 << 15) - 1


@dataclass(frozen=True)
class QueueKinds:
    """How the broker that wrote a store dispatches: multi-dispatch and LMQ switches
    (``enableMultiDispatch``, ``enableLmq``) and the topics whose queue type is BatchCQ."""
    multi_dispatch: bool = False
    lmq: bool = False
    batch_cq_topics: frozenset = field(default_factory=frozenset)
    source: str = "defaults"          # where the settings came from (said by ``info``)


def parse_java_long(text: str, lo: int = _LONG_MIN, hi: int = _LONG_MAX) -> int | None:
    """``Long.parseLong`` (or ``Short.parseShort`` with its bounds): None where Java throws."""
    if not _JAVA_LONG.match(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _blank(text: str | None) -> bool:
    """``StringUtils.isBlank``: null, empty or only whitespace."""
    return text is None or not text.strip()


def java_split(text: str, sep: str) -> list[str]:
    """``String.split`` with a one-character literal: trailing empty strings removed."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def multi_dispatch_applies(kinds: QueueKinds, topic: str) -> bool:
    """``MultiDispatchUtils.isNeedHandleMultiDispatch``: not for retry, system or schedule topics."""
    return (kinds.multi_dispatch and not topic.startswith(RETRY_TOPIC_PREFIX)
            and not topic.startswith(SYSTEM_TOPIC_PREFIX) and topic != cl.SCHEDULE_TOPIC)


def lmq_units(kinds: QueueKinds, topic: str, queue_id: int, props: dict[str, str]) -> list[tuple[str, int, int]]:
    """(queue topic, queue id, queue offset) of every light-queue unit the broker adds for a
    record of ``topic``/``queue_id`` with these properties (``ConsumeQueue.multiDispatchLmqQueue``):
    nothing unless both properties are set and name as many offsets as queues; a name holding a
    path separator is skipped; an ``%LMQ%`` queue is queue 0 with ``enableLmq``, any other the
    record's own queue id; an offset Java cannot parse ends the list there (the broker's
    dispatch of that record throws)."""
    if not multi_dispatch_applies(kinds, topic):
        return []
    names, offsets = props.get(PROPERTY_INNER_MULTI_DISPATCH), props.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET)
    if _blank(names) or _blank(offsets):
        return []
    queues, queue_offsets = java_split(names, LMQ_DISPATCH_SEPARATOR), java_split(offsets, LMQ_DISPATCH_SEPARATOR)
    if len(queues) != len(queue_offsets):
        return []
    out = []
    for name, text in zip(queues, queue_offsets):
        if "/" in name:
            continue
        offset = parse_java_long(text)
        if offset is None:
            break
        qid = 0 if kinds.lmq and name.startswith(cl.LMQ_TOPIC_PREFIX) else queue_id
        out.append((name, qid, offset))
    return out


def batch_position(props: dict[str, str], queue_offset: int) -> tuple[int, int] | None:
    """(msgBaseOffset, batchSize) of a BatchConsumeQueue unit (``CommitLog.setBatchSizeIfNeeded``):
    ``INNER_BASE`` and ``INNER_NUM`` when both are there, else the record's queue offset and 1;
    None when the broker's parse throws (no unit is written)."""
    if cl.PROPERTY_INNER_NUM in props and cl.PROPERTY_INNER_BASE in props:
        base = parse_java_long(props[cl.PROPERTY_INNER_BASE])
        num = parse_java_long(props[cl.PROPERTY_INNER_NUM], _SHORT_MIN, _SHORT_MAX)
        if base is None or num is None:
            return None
        return base, num
    return queue_offset, 1


def goes_to_batch_queue(base: int, num: int) -> bool:
    """``BatchConsumeQueue.putMessagePositionInfoWrapper`` drops a negative base or size."""
    return base >= 0 and num >= 0


#: TopicAttributes.QUEUE_TYPE_ATTRIBUTE and its BatchCQ value
QUEUE_TYPE_ATTRIBUTE = "queue.type"
BATCH_CQ = "BatchCQ"


def topics_json_batch_topics(topics_json) -> set[str]:
    """Topics whose ``config/topics.json`` entry has the attribute ``queue.type=BatchCQ``
    (``QueueTypeUtils.getCQType``)."""
    table = topics_json.get("topicConfigTable") if isinstance(topics_json, dict) else None
    out = set()
    if not isinstance(table, dict):        # a damaged or foreign file names no BatchCQ topic
        return out
    for name, conf in table.items():
        attrs = conf.get("attributes") if isinstance(conf, dict) else None
        if isinstance(attrs, dict) and attrs.get(QUEUE_TYPE_ATTRIBUTE) == BATCH_CQ:
            out.add(name)
    return out


def detect(store, multi_dispatch: bool | None = None) -> QueueKinds:
    """How the broker that wrote ``store`` dispatched, from what it left: light queues under
    ``consumequeue/`` mean multi-dispatch and LMQ were on (``multi_dispatch`` overrides);
    BatchCQ topics are those with ``batchconsumequeue/`` queues or the BatchCQ attribute in
    ``config/topics.json``."""
    lmq_seen = any(ref.topic.startswith(cl.LMQ_TOPIC_PREFIX) for ref in store.queues())
    batch = {ref.topic for ref in store.queues(batch=True)}
    batch |= topics_json_batch_topics(store.config().get("topics.json"))
    sources = []
    if multi_dispatch is None:
        multi_dispatch = lmq_seen
        if lmq_seen:
            sources.append("multi-dispatch: %LMQ% queues under consumequeue/")
    else:
        sources.append(f"multi-dispatch: {'on' if multi_dispatch else 'off'} (--multi-dispatch)")
    if batch:
        sources.append("BatchCQ topics: batchconsumequeue/ and config/topics.json")
    return QueueKinds(multi_dispatch, multi_dispatch, frozenset(batch), "; ".join(sources) or "defaults")
