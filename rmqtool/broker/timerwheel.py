"""The timer wheel as the broker's enqueue leaves it (``TimerMessageStore.doEnqueue``;
docs/format-timer.md): every timer log unit, in log order, is put into the slot of its time; a
slot that holds another time (or nothing) starts over with this unit as first and last, otherwise
the unit becomes the slot's last; ``num`` counts units, a delete request counting -1."""
from __future__ import annotations

from typing import Iterable

from formats import timer as tf


def wheel_slots(units: Iterable, precision_ms: int, slots_total: int = tf.SLOTS_TOTAL) -> dict[int, tuple]:
    """slot index -> (time / precision, first pos, last pos, num, magic) after enqueuing ``units``
    (objects with ``slot_time_ms``, ``pos`` and ``magic``) in order."""
    slots: dict[int, tuple] = {}
    for u in units:
        t = u.slot_time_ms
        index = tf.slot_index(t, precision_ms, slots_total)
        step = -1 if u.magic & tf.MAGIC_DELETE else 1
        cur = slots.get(index)
        if cur is None or cur[0] != t // precision_ms:
            slots[index] = (t // precision_ms, u.pos, u.pos, step, 0)
        else:
            slots[index] = (cur[0], cur[1], u.pos, cur[3] + step, cur[4])
    return slots
