"""The one reader of Java ``.properties`` files (``io/properties``): the broker's settings and a
DLedger member's checkpoint/currterm are read by it."""
from __future__ import annotations

from hypothesis import given, strategies as st

from rmqtool.io.properties import parse_properties

KEYS = st.text(st.sampled_from("abcXYZ019._-"), min_size=1, max_size=12)
VALUES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=20).filter(
    lambda v: v[:1] not in ("=", ":"))     # a value starting so would lose it as the separator, as in Java
SEPARATORS = st.sampled_from(["=", ":", " = ", " : ", " ", "\t", "= "])


@given(st.lists(st.tuples(KEYS, SEPARATORS, VALUES), max_size=8), st.booleans())
def test_what_is_written_is_read_back(entries, comments):
    lines = []
    for key, sep, value in entries:
        if comments:
            lines.append("# " + key)
        lines.append(f"{key}{sep}{value}")
    expected = {}
    for key, sep, value in entries:      # the last occurrence wins
        expected[key] = value
    assert parse_properties("\n".join(lines)) == expected


def test_both_readers_are_the_one_parser(tmp_path):
    from rmqtool.broker.delay import store_delay_levels
    from rmqtool.io.dledger_layout import read_properties

    class _Store:
        config_dir = tmp_path
    (tmp_path / "broker.properties").write_text("messageDelayLevel : 1s 2m\n")
    assert store_delay_levels(_Store()) == [1000, 120_000]
    (tmp_path / "checkpoint").write_text("#x\ncommittedIndex=41\nterm:3\n")
    assert read_properties(tmp_path / "checkpoint") == {"committedIndex": "41", "term": "3"}
