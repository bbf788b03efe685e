"""Hypothesis strategies: structurally valid pieces (built from formats/) with hostile field values.

Length fields are drawn independently of the bytes they describe, so a record may claim a
body of 2^31-1 bytes while carrying five.
"""
from __future__ import annotations

from hypothesis import strategies as st

from formats import checkpoint as ck
from formats import commitlog as cl
from formats import consumequeue as cq
from formats import indexfile as ix

INT32 = st.one_of(st.sampled_from([0, 1, -1, 2, 20, 0x7FFF, (1 << 31) - 1, -(1 << 31)]),
                  st.integers(-(1 << 31), (1 << 31) - 1))
INT64 = st.one_of(st.sampled_from([0, 1, -1, (1 << 63) - 1, -(1 << 63), (1 << 31) - 1]),
                  st.integers(-(1 << 63), (1 << 63) - 1))
SMALL = st.integers(0, 300)


def _near(value: int):
    return st.one_of(st.just(value), st.integers(value - 3, value + 3), INT32)


@st.composite
def message_record(draw) -> bytes:
    """One MESSAGE assembled from MessageHead/HostV4|V6/MessageTail with drawn length fields."""
    magic = draw(st.sampled_from(list(cl.MESSAGE_MAGICS) + [cl.BLANK_MAGIC, 0, 0xDEADBEEF]))
    sys_flag = draw(st.one_of(st.sampled_from([0, cl.BORNHOST_V6_FLAG, cl.STOREHOST_V6_FLAG,
                                               cl.COMPRESSED_FLAG | (2 << 8), cl.TRANSACTION_ROLLBACK_TYPE]),
                              INT32))
    body = draw(st.binary(max_size=64))
    topic = draw(st.binary(max_size=40))
    props = draw(st.one_of(st.binary(max_size=60),
                           st.builds(cl.encode_properties, st.dictionaries(
                               st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "DELAY", "x"]),
                               st.text(max_size=12), max_size=4))))
    v2 = magic == cl.MESSAGE_MAGIC_V2
    true_total = cl.message_length(magic, sys_flag, len(body), len(topic), len(props))
    total = draw(_near(true_total))
    body_len = draw(_near(len(body)))
    topic_len = draw(_near(len(topic)))
    props_len = draw(_near(len(props)))
    head = cl.MessageHead.build(dict(total_size=total, magic=magic, body_crc=draw(INT32), queue_id=draw(INT32),
                                     flag=0, queue_offset=draw(INT64), physical_offset=draw(INT64),
                                     sys_flag=sys_flag, born_timestamp=draw(INT64)))

    def host(v6):
        return (cl.HostV6 if v6 else cl.HostV4).build(dict(address=bytes(16 if v6 else 4), port=1))
    tail = cl.MessageTail.build(dict(reconsume_times=0, prepared_transaction_offset=draw(INT64),
                                     body_length=body_len))
    tl = (cl.TopicLengthV2 if v2 else cl.TopicLengthV1)
    tl_bytes = tl.build(max(min(topic_len, 0x7FFF if v2 else 0x7F), -0x8000 if v2 else -0x80))
    plen = cl.PropertiesLength.build(max(min(props_len, 0x7FFF), -0x8000))
    return (head + host(sys_flag & cl.BORNHOST_V6_FLAG) + cl.StoreTimestamp.build(draw(INT64))
            + host(sys_flag & cl.STOREHOST_V6_FLAG) + tail + body + tl_bytes + topic + plen + props)


@st.composite
def commitlog_file(draw) -> bytes:
    """Valid-looking records (some hostile) end to end, then a BLANK, zeros or garbage."""
    records = draw(st.lists(message_record(), min_size=1, max_size=6))
    out = b"".join(records)
    tail = draw(st.sampled_from(["blank", "zero", "garbage", "none"]))
    if tail == "blank":
        out += cl.Blank.build(dict(total_size=draw(_near(256)))) + bytes(248)
    elif tail == "zero":
        out += bytes(draw(SMALL))
    elif tail == "garbage":
        out += draw(st.binary(max_size=200))
    return out


@st.composite
def consumequeue_units(draw) -> bytes:
    units = draw(st.lists(st.tuples(INT64, INT32, INT64), max_size=90))
    out = b"".join(cq.ConsumeQueueUnit.build(dict(commitlog_offset=o, size=s, tags_code=t)) for o, s, t in units)
    return out + draw(st.binary(max_size=draw(st.sampled_from([0, 0, 7, 19]))))


@st.composite
def index_file(draw, slots: int, entries: int) -> bytes:
    """Header, slot area and entries of the given geometry with drawn (often absurd) values."""
    header = ix.IndexHeader.build(dict(
        begin_timestamp=draw(INT64), end_timestamp=draw(INT64), begin_phy_offset=draw(INT64),
        end_phy_offset=draw(INT64), hash_slot_count=draw(INT32),
        index_count=draw(st.one_of(st.integers(-2, entries + 2), INT32))))
    slot_values = draw(st.lists(st.one_of(st.integers(-2, entries + 2), INT32), min_size=slots, max_size=slots))
    slot_bytes = b"".join(ix.IndexSlot.build(v) for v in slot_values)
    n = draw(st.integers(0, min(entries, 40)))
    ent = b"".join(ix.IndexEntry.build(dict(
        key_hash=draw(st.one_of(st.integers(0, 12), INT32)), phy_offset=draw(INT64),
        time_diff=draw(st.one_of(st.integers(-1, 5), INT32)),
        prev_index=draw(st.one_of(st.integers(-1, entries + 1), INT32)))) for _ in range(n))
    full = ix.index_file_size(slots, entries)
    data = header + slot_bytes + ent
    cut = draw(st.sampled_from(["full", "full", "short", "long"]))
    if cut == "full":
        return data + bytes(max(full - len(data), 0))
    if cut == "short":
        return data[:draw(st.integers(0, len(data)))]
    return data + bytes(max(full - len(data), 0)) + draw(st.binary(min_size=1, max_size=40))


@st.composite
def checkpoint_file(draw) -> bytes:
    body = ck.Checkpoint.build(dict(physic_msg_timestamp=draw(INT64), logics_msg_timestamp=draw(INT64),
                                    index_msg_timestamp=draw(INT64), master_flushed_offset=draw(INT64),
                                    confirm_phy_offset=draw(INT64)))
    size = draw(st.sampled_from([ck.CHECKPOINT_FILE_SIZE, 0, 8, 24, 39, 40, 5000]))
    data = body + bytes(max(size - len(body), 0))
    return data[:size] + (draw(st.binary(max_size=16)) if size > 40 else b"")


# --- the simplified article layout -----------------------------------------------------------------
@st.composite
def simplified_record(draw, position: int) -> bytes:
    """One commitLog.txt record from RecordHead/RecordTail with msgTotalLen and bodySize drawn near
    (or far from) the truth."""
    from formats import simplified as sf
    body = draw(st.binary(max_size=80))
    true_total = sf.article_total_len(len(body))
    total = draw(st.one_of(st.just(true_total), st.integers(true_total - 60, true_total + 60), INT64))
    body_size = draw(st.one_of(st.just(len(body)), st.integers(len(body) - 3, len(body) + 3), INT64))
    head = sf.RecordHead.build(dict(msg_total_len=total, msg_id=draw(st.binary(min_size=64, max_size=64)),
                                    topic=b"T".ljust(64, b"\0"), queue_offset=draw(INT64), body_size=body_size))
    tail = sf.RecordTail.build(dict(transaction_id=bytes(64),
                                    commit_log_offset=draw(st.one_of(st.just(position), INT64))))
    return head + body + tail + bytes(sf.ARTICLE_GAP_SIZE)


@st.composite
def simplified_commitlog(draw) -> bytes:
    out = b""
    for _ in range(draw(st.integers(1, 6))):
        out += draw(simplified_record(len(out)))
    return out + draw(st.one_of(st.binary(max_size=300), st.integers(0, 600).map(bytes)))


@st.composite
def simplified_consumequeue(draw) -> bytes:
    from formats import simplified as sf
    units = draw(st.lists(st.tuples(st.one_of(st.sampled_from([0, 338, 676]), INT64), INT32, INT64), max_size=60))
    out = b"".join(sf.ConsumerQueueUnit.build(dict(commit_log_offset=o, msg_length=n, tag_code=t))
                   for o, n, t in units)
    return out + draw(st.binary(max_size=draw(st.sampled_from([0, 0, 7, 19, 40]))))


@st.composite
def simplified_index(draw) -> bytes:
    from formats import simplified as sf
    header = sf.IndexHeader.build(dict(
        begin_timestamp=draw(INT64), end_timestamp=draw(INT64), begin_phy_offset=draw(INT64),
        end_phy_offset=draw(INT64), hash_slot_count=draw(INT32), index_count=draw(st.one_of(st.integers(-2, 45), INT32))))
    slots = b"".join(sf.IndexSlot.build(v) for v in draw(st.lists(st.one_of(st.integers(-2, 45), INT32),
                                                                  min_size=sf.HASH_SLOTS, max_size=sf.HASH_SLOTS)))
    ent = b"".join(sf.IndexEntry.build(dict(key_hash=draw(INT32), phy_offset=draw(st.one_of(st.sampled_from(
        [0, 338, 676, 2834]), INT64)), time_diff=draw(st.one_of(st.integers(-1, 5), INT32)),
        prev_index=draw(st.one_of(st.just(0), INT32)))) for _ in range(draw(st.integers(0, 40))))
    data = header + slots + ent
    cut = draw(st.sampled_from(["full", "short", "as-is"]))
    if cut == "full":
        return data + bytes(sf.entry_position(40) - len(data) if len(data) < sf.entry_position(40) else 0)
    if cut == "short":
        return data[:draw(st.integers(0, len(data)))]
    return data
