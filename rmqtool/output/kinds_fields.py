"""The record fields of the 5.x store kinds, read from a record's properties (one place for the
row form and its Arrow form): the inner batch of a BatchCQ message, the light queues a
multi-dispatch message names, a timer message's due time. docs/format-lmq-batchcq.md,
docs/format-timer.md."""
from __future__ import annotations

from formats import commitlog as cl
from formats import timer as tf
from rmqtool.broker.queuekinds import PROPERTY_INNER_MULTI_DISPATCH, parse_java_long

#: field name -> (property, integer?)
KIND_FIELDS = {
    "inner_num": (cl.PROPERTY_INNER_NUM, True),
    "inner_base": (cl.PROPERTY_INNER_BASE, True),
    "lmq_queues": (PROPERTY_INNER_MULTI_DISPATCH, False),
    "timer_out_ms": (tf.PROPERTY_TIMER_OUT_MS, True),
}


def kind_fields(props: dict[str, str]) -> dict:
    """The fields for one record's properties (None where the property is absent or, for the
    integer ones, not a number Java would parse)."""
    out = {}
    for name, (prop, integer) in KIND_FIELDS.items():
        value = props.get(prop)
        out[name] = (parse_java_long(value) if integer else value) if value is not None else None
    return out
