"""Encoder: every record of upstream's reference stores re-encoded byte for byte, the fast
path equal to the construct declaration, BLANK and version rules."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from conftest import reference_store
from formats import commitlog as cl
from rmqtool.records.encode import (Host, MessageFields, encode, encode_blank, encode_reference,
                            java_length, magic_for, needs_blank, record_length)
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.io.store import Store


def fields_of(batch: RecordBatch, i: int) -> MessageFields:
    c = batch.columns
    born, store = batch.host("born", i), batch.host("store", i)
    return MessageFields(
        topic=batch.span("topic", i).decode("utf-8"), body=batch.body(i),
        properties=batch.span("props", i) or b"", queue_id=int(c["queue_id"][i]),
        flag=int(c["flag"][i]), queue_offset=int(c["queue_offset"][i]),
        phy_offset=int(c["stored_phy_offset"][i]), sys_flag=int(c["sys_flag"][i]),
        born_timestamp=int(c["born_timestamp"][i]), born_host=Host(*born),
        store_timestamp=int(c["store_timestamp"][i]), store_host=Host(*store),
        reconsume_times=int(c["reconsume_times"][i]),
        prepared_transaction_offset=int(c["prepared_transaction_offset"][i]))


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_every_reference_record_reencodes_identically(name):
    n = 0
    for batch in walk_store(Store(reference_store(name)), stop_at_break=True):
        if not isinstance(batch, RecordBatch):
            continue
        for i in range(len(batch)):
            start = int(batch.position[i] - batch.buf_base)
            raw = batch.buf[start:start + int(batch.size[i])].tobytes()
            f = fields_of(batch, i)
            assert encode(f) == raw, int(batch.phy_offset[i])
            if i % 7 == 0:
                assert encode_reference(f) == raw
            n += 1
    assert n > 600


hosts = st.one_of(st.builds(Host, st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
                  st.builds(Host, st.binary(min_size=16, max_size=16), st.integers(0, 65535)))


@settings(max_examples=150, deadline=None)
@given(topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=140).filter(
           lambda t: len(t.encode()) <= 127 or java_length(t) > 127),
       body=st.binary(max_size=300), props=st.binary(max_size=200),
       ints=st.tuples(*(st.integers(-2**31, 2**31 - 1) for _ in range(4))),
       longs=st.tuples(*(st.integers(-2**63, 2**63 - 1) for _ in range(5))), born=hosts, store=hosts)
def test_fast_path_equals_construct(topic, body, props, ints, longs, born, store):
    f = MessageFields(topic, body, props, ints[0], ints[1], longs[0], longs[1], ints[2], longs[2], born,
                      longs[3], store, ints[3], longs[4])
    raw = encode(f)
    assert raw == encode_reference(f)
    assert len(raw) == record_length(f)
    parsed = cl.Message.parse(raw)
    assert parsed.body == body and parsed.topic == topic.encode()
    assert bool(parsed.sys_flag & cl.BORNHOST_V6_FLAG) == born.v6


def test_version_by_java_chars_and_crc_vector():
    assert magic_for("x" * 127) == cl.MESSAGE_MAGIC_V1
    assert magic_for("x" * 128) == cl.MESSAGE_MAGIC_V2
    assert magic_for("\U0001F600" * 64) == cl.MESSAGE_MAGIC_V2      # 128 UTF-16 units
    f = MessageFields("TopicTest", b"Hello RocketMQ")
    parsed = cl.Message.parse(encode(f))
    assert parsed.body_crc == 1774740973
    assert record_length(MessageFields("TopicTest", b"x" * 11)) == 111
    assert MessageFields("T", b"").body == b"" and cl.Message.parse(encode(MessageFields("T"))).body_crc == 0


def test_blank_rule():
    assert encode_blank(1151) == (1151).to_bytes(4, "big") + cl.BLANK_MAGIC.to_bytes(4, "big")
    assert needs_blank(100, 107) and not needs_blank(100, 108)


def test_host_parse():
    assert Host.parse("192.168.1.10:10911") == Host(bytes([192, 168, 1, 10]), 10911)
    h = Host.parse("[fd00:0:0:0:0:0:0:2]:8080")
    assert h.v6 and h.port == 8080 and h.address[-1] == 2
