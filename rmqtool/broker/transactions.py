"""What the broker does with each transaction type (format.md §4.1): which records get a
ConsumeQueue unit and which are indexed. One home for both rules, used by dispatch, write,
verify and the queries; works on an int or a numpy array alike (no numpy import here).
"""
from __future__ import annotations

from formats import commitlog as cl


def goes_to_consumequeue(tx):
    """The dispatcher's rule: NOT_TYPE and COMMIT_TYPE records get a ConsumeQueue unit
    (prepared and rollback halves of a transaction do not). ``tx``: the transaction type
    (``sys_flag & TRANSACTION_MASK``), an int or an array."""
    return (tx == cl.TRANSACTION_NOT_TYPE) | (tx == cl.TRANSACTION_COMMIT_TYPE)


def goes_to_index(tx):
    """The index service's rule: every record but a ROLLBACK is indexed."""
    return tx != cl.TRANSACTION_ROLLBACK_TYPE


# --- 5.x transactions: the half and op queues (docs/format-pending.md) --------------------------

#: MixAll.CID_SYS_RMQ_TRANS (TransactionalMessageUtil.buildConsumerGroup): the group whose committed
#: offsets on the half and op queues say how far the broker's transaction check has gone
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: TransactionalMessageUtil.OFFSET_SEPARATOR: between the half-queue offsets of an op message's body
OP_OFFSET_SEPARATOR = ","


def op_half_offsets(text: str | None) -> list[int]:
    """The half-queue offsets one op message names (``TransactionalMessageServiceImpl.fillOpRemoveMap``):
    its body (UTF-8) split on ``,`` as ``String.split`` does (trailing empty strings dropped), each
    read with ``Long.parseLong``, -1 where that throws. ``text``: ``system_fields``' ``op_offsets``,
    None for an op message without the ``d`` tag (the broker logs it and it names nothing)."""
    from rmqtool.broker.queuekinds import java_split, parse_java_long
    if text is None:
        return []
    out = []
    for part in java_split(text, OP_OFFSET_SEPARATOR):
        value = parse_java_long(part)
        out.append(-1 if value is None else value)
    return out
