"""What a message in one of the broker's own topics means, as named fields (issue 18): transaction
half and op messages, delayed (schedule) messages, retry and dead-letter messages, timer messages.
Topic names and properties as upstream 5.3.3 sets them (common/.../topic/TopicValidator.java,
common/.../message/MessageConst.java, MixAll RETRY/DLQ prefixes); a message of any other topic gets
``None`` everywhere."""
from __future__ import annotations

from formats import commitlog as cl
from formats import timer as tf
from rmqtool.broker.queuekinds import parse_java_long

TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_PRODUCER_GROUP = "PGROUP"
#: MessageConst: how often the broker's check has asked the producer about a half message; the
#: half-queue offset a re-put half message stands for (set by renewImmunityHalfMessageInner)
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
#: TransactionalMessageUtil.REMOVE_TAG: an op message's tag; its body holds the half messages' queue offsets
OP_REMOVE_TAG = "d"

SYSTEM_FIELDS = {           # name -> integer?
    "system_kind": False, "real_topic": False, "real_queue_id": True, "consumer_group": False,
    "producer_group": False, "origin_msg_id": False, "delay_level": True, "op_offsets": False,
}
SYSTEM_PREFIXES = (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, cl.SCHEDULE_TOPIC, tf.TIMER_TOPIC, RETRY_PREFIX, DLQ_PREFIX)


def is_system_topic(topic: str) -> bool:
    return topic.startswith(SYSTEM_PREFIXES)


def system_fields(topic: str, props: dict[str, str], body: bytes) -> dict:
    out = dict.fromkeys(SYSTEM_FIELDS)
    real_qid = parse_java_long(props[cl.PROPERTY_REAL_QUEUE_ID]) if cl.PROPERTY_REAL_QUEUE_ID in props else None
    if topic == TRANS_HALF_TOPIC:
        out.update(system_kind="transaction-half", real_topic=props.get(cl.PROPERTY_REAL_TOPIC), real_queue_id=real_qid,
                   producer_group=props.get(PROPERTY_PRODUCER_GROUP))
    elif topic == TRANS_OP_HALF_TOPIC:
        out.update(system_kind="transaction-op",
                   op_offsets=body.decode("utf-8", "replace") if props.get(cl.PROPERTY_TAGS) == OP_REMOVE_TAG else None)
    elif topic == cl.SCHEDULE_TOPIC:
        out.update(system_kind="schedule", real_topic=props.get(cl.PROPERTY_REAL_TOPIC), real_queue_id=real_qid,
                   delay_level=parse_java_long(props[cl.PROPERTY_DELAY_TIME_LEVEL])
                   if cl.PROPERTY_DELAY_TIME_LEVEL in props else None)
    elif topic == tf.TIMER_TOPIC:
        out.update(system_kind="timer", real_topic=props.get(cl.PROPERTY_REAL_TOPIC), real_queue_id=real_qid)
    elif topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
        dlq = topic.startswith(DLQ_PREFIX)
        out.update(system_kind="dlq" if dlq else "retry",
                   consumer_group=topic[len(DLQ_PREFIX if dlq else RETRY_PREFIX):],
                   real_topic=props.get(PROPERTY_RETRY_TOPIC), origin_msg_id=props.get(cl.PROPERTY_ORIGIN_MESSAGE_ID))
    return out
