"""formats/: numpy dtypes equal the construct declarations; codecs behave like upstream."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from formats import checkpoint, commitlog as cl, consumequeue, indexfile
from formats.derive import field_offsets, numpy_dtype
from rmqtool.kernels import javahash

FIXED = [
    (consumequeue.ConsumeQueueUnit, consumequeue.CQ_UNIT_DTYPE, 20),
    (consumequeue.BatchConsumeQueueUnit, consumequeue.BCQ_UNIT_DTYPE, 46),
    (indexfile.IndexHeader, indexfile.INDEX_HEADER_DTYPE, 40),
    (indexfile.IndexEntry, indexfile.INDEX_ENTRY_DTYPE, 20),
    (checkpoint.Checkpoint, checkpoint.CHECKPOINT_DTYPE, 40),
    (cl.MessageHead, cl.MESSAGE_HEAD_DTYPE, 48),
]


@pytest.mark.parametrize("struct,dtype,size", FIXED)
def test_dtype_size_matches_declaration(struct, dtype, size):
    assert struct.sizeof() == dtype.itemsize == size
    assert list(field_offsets(struct).values()) == [dtype.fields[n][1] for n in dtype.names]


def _value_strategy(dtype_field):
    kind, size = dtype_field.kind, dtype_field.itemsize
    lo, hi = (0, 2 ** (8 * size) - 1) if kind == "u" else (-(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1)
    return st.integers(lo, hi)


@pytest.mark.parametrize("struct,dtype,size", FIXED)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_dtype_reads_what_construct_builds(struct, dtype, size, data):
    values = {n: data.draw(_value_strategy(dtype.fields[n][0])) for n in dtype.names}
    raw = struct.build(values)
    rec = np.frombuffer(raw, dtype)[0]
    assert {n: int(rec[n]) for n in dtype.names} == values
    assert numpy_dtype(struct) == dtype


def test_format_md_test_vectors():
    assert cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 11, 9, 0) == 111
    assert javahash.tags_code("TagA") == 2598919
    assert javahash.tags_code("TagA||TagB") == 1789476431
    assert javahash.java_string_hash("TopicTest#KEY1") == -1656969516
    assert javahash.index_key_hash("TopicTest#KEY1") == 1656969516
    assert javahash.index_key_hash("TopicTest#KEY1") % 5_000_000 == 1969516
    assert javahash.index_key_hash("polygenelubricants") == 0
    assert cl.crc32_property_digits(123) == "3210000000"
    assert javahash.tags_code(None) == javahash.tags_code("") == 0


def test_hash_over_utf16_surrogates():
    # U+1F600 is two UTF-16 code units: 0xD83D 0xDE00
    assert javahash.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    assert javahash.java_bytes_hash(b"\xff") == javahash.java_string_hash("\ufffd")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60), max_size=20))
def test_vectorized_hash_equals_scalar(strings):
    blob = "".join(strings).encode("ascii")
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    got = javahash.hash_spans(np.frombuffer(blob, np.uint8), starts, lengths)
    assert [int(x) for x in got] == [javahash.java_string_hash(s) for s in strings]


@given(st.text(max_size=30), st.text(max_size=30))
def test_combine_hash(a, b):
    ha, hb = javahash.java_string_hash(a), javahash.java_string_hash(b)
    units = len(javahash.utf16_units(b))
    assert int(javahash.combine_hash(np.array([ha]), np.array([hb]), np.array([units]))[0]) == \
        javahash.java_string_hash(a + b)


def test_properties_codec_upstream_rules():
    assert cl.decode_properties(b"A\x011\x02A\x012\x02") == {"A": "2"}          # last wins
    assert cl.decode_properties(b"A\x01\x02\x01x\x02ab\x02") == {}             # empty value/key, short
    assert cl.decode_properties(b"K\x01v\x01w\x02") == {"K": "v\x01w"}          # value may hold 0x01
    assert cl.decode_properties(b"K\x01v") == {"K": "v"}                        # no trailing 0x02
    assert cl.decode_properties(b"K\x01\xffv\x02") == {"K": "\ufffdv"}          # UTF-8 replacement
    assert cl.decode_properties(b"") == {}
    assert cl.split_keys("  a  b ") == ["a", "b"]


_prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                     min_size=1, max_size=12)


@given(st.dictionaries(_prop_text, _prop_text, max_size=10))
def test_properties_round_trip(props):
    assert cl.decode_properties(cl.encode_properties(props)) == props


def _declared():
    """Every layout declared at module level in formats/ (formats.declare objects)."""
    import importlib
    import pkgutil
    import formats
    from formats import declare
    out = []
    for info in pkgutil.iter_modules(formats.__path__):
        module = importlib.import_module(f"formats.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, declare.Struct):
                out.append(pytest.param(value, id=f"{info.name}.{name}"))
    return out


def _fixed_size(struct) -> int | None:
    try:
        return struct.construct.sizeof()
    except Exception:           # variable length: construct's SizeofError
        return None


@pytest.mark.parametrize("struct", _declared())
def test_declaration_equals_the_construct_built_from_it(struct):
    """formats/declare.py records the declaration and builds construct from it on first use: the
    sizes and offsets worked out without construct equal construct's own, field by field."""
    import construct as cs
    built = struct.construct
    assert isinstance(built, cs.Struct)
    assert [getattr(sc, "name", None) for sc in struct.subcons] == [sc.name for sc in built.subcons]
    size = _fixed_size(struct)
    if size is None:
        return
    assert struct.sizeof() == size
    assert field_offsets(struct) == field_offsets(built)
    for mine, theirs in zip(struct.subcons, built.subcons):
        assert mine.sizeof() == theirs.sizeof()


def _integer_fields_only(struct) -> bool:
    from formats.declare import FormatField
    from formats.derive import leaf_field
    return all(isinstance(leaf_field(sc), FormatField) for sc in struct.subcons)


@pytest.mark.parametrize("struct", [p for p in _declared() if _integer_fields_only(p.values[0])])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_struct_formats_pack_what_construct_builds(struct, data):
    """``derive.struct_of`` (the ``struct`` path the readers use) reads and writes the bytes that
    construct parses and builds, for any field values."""
    from formats.derive import struct_of
    fmt = struct_of(struct)
    raw = data.draw(st.binary(min_size=fmt.size, max_size=fmt.size))
    parsed = struct.parse(raw)
    values = tuple(parsed[sc.name] for sc in struct.subcons)
    assert fmt.unpack(raw) == values
    assert struct.build(dict(zip([sc.name for sc in struct.subcons], values))) == fmt.pack(*values) == raw


def test_reading_a_record_does_not_import_construct():
    """A command that reads records with ``struct`` never imports construct: the layouts it
    uses are derived from the declarations alone."""
    import subprocess
    import sys
    code = ("import sys, formats.commitlog, formats.consumequeue, formats.indexfile, formats.checkpoint, "
            "formats.dledger, formats.timer, formats.rocksdb_cq, formats.simplified, formats.consumequeue_ext; "
            "import rmqtool.records.single, rmqtool.ops.query.bykey; print('construct' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
