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
