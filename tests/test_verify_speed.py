"""Fast paths used by deep verify agree with their reference definitions.

Property extraction (matrix rows per power-of-two width) against the upstream-style
parser, span hashing against the scalar Java hash, token splitting, CRC helpers.
"""
from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given, settings, strategies as st

from formats import commitlog as cl
from rmqtool.javahash import java_string_hash
from rmqtool.scan import EXTRACTED_PROPERTIES, extract_properties, span_rows

segment = st.one_of(
    st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "X", "", "TAG", "UNIQ_KEYS"]),
              st.text(alphabet="ab \x01\x02é", max_size=90)).map(lambda kv: f"{kv[0]}\x01{kv[1]}"),
    st.text(alphabet="ab\x01\x02", max_size=6))
record_props = st.tuples(st.lists(segment, max_size=6), st.booleans(), st.binary(max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(record_props, min_size=1, max_size=6), st.binary(max_size=40), st.integers(0, 3))
def test_extract_properties_many_records_equals_parser(records, junk, tail):
    """Adjacent records of mixed widths, junk between them, the last one flush with the buffer end."""
    raws, starts, blob = [], [], b""
    for segments, trailing, extra in records:
        raw = ("\x02".join(segments) + ("\x02" if trailing else "")).encode("utf-8") + extra
        blob += junk[:len(blob) % 7]
        starts.append(len(blob))
        raws.append(raw)
        blob += raw
    blob += b"\x01\x02"[:tail]
    buf = np.frombuffer(blob, np.uint8)
    lens = np.array([len(r) if r else -1 for r in raws], dtype=np.int64)
    out = extract_properties(buf, np.array(starts, dtype=np.int64), lens, pad_to=len(raws) + 1)
    for i, raw in enumerate(raws):
        want = cl.decode_properties(raw) if raw else {}
        for name, key in EXTRACTED_PROPERTIES.items():
            n = int(out[f"{name}_len"][i])
            got = None if n < 0 else buf[int(out[f"{name}_start"][i]):][:n].tobytes().decode("utf-8", "replace")
            assert got == want.get(key), (name, raw)
    assert all(int(out[f"{name}_len"][-1]) == -1 for name in EXTRACTED_PROPERTIES)


def test_span_rows_zero_fills_past_the_end():
    buf = np.arange(10, dtype=np.uint8)
    rows = span_rows(buf, np.array([0, 7, 9]), 4)
    assert rows.tolist() == [[0, 1, 2, 3], [7, 8, 9, 0], [9, 0, 0, 0]]
    assert span_rows(buf, np.array([1]), 16).tolist()[0][:9] == list(range(1, 10))
