"""Reads that skip the holes of sparse files give what reading every byte gives."""
from __future__ import annotations

import os

import numpy as np
import pytest

from formats.consumequeue import CQ_UNIT_DTYPE, CQ_UNIT_SIZE
from rmqtool.io.consumequeue import read_unit_file
from rmqtool.io.fileio import first_nonzero


def test_first_nonzero_skips_holes_and_finds_data_after_them(tmp_path):
    path = tmp_path / "sparse"
    with open(path, "wb") as fh:
        fh.write(b"\x01" + bytes(4095))
        fh.truncate(64 << 20)             # a hole to the end
    assert first_nonzero(path, 1) is None
    with open(path, "r+b") as fh:
        fh.seek(40 << 20)
        fh.write(b"\x00\x00\x07")          # data after the hole
    assert first_nonzero(path, 1) == (40 << 20) + 2
    assert first_nonzero(path, 0) == 0
    assert first_nonzero(path, 1, hi=40 << 20) is None
    assert os.path.getsize(path) == 64 << 20


def _units(*pairs) -> bytes:
    units = np.zeros(len(pairs), CQ_UNIT_DTYPE)
    for i, (offset, size) in enumerate(pairs):
        units[i]["commitlog_offset"], units[i]["size"], units[i]["tags_code"] = offset, size, 7
    return units.tobytes()


@pytest.mark.parametrize("layout", ["tail-hole", "gap-then-data", "full", "empty", "short"])
def test_read_unit_file_equals_the_whole_file_up_to_the_zero_tail(tmp_path, layout):
    """The units read (data runs and one zero unit for the hole after them) lead to the same
    logical end and the same units after it as the whole file read byte by byte."""
    from rmqtool.io.consumequeue import logical_end
    path = tmp_path / "00000000000000000000"
    file_size = 60_000 * CQ_UNIT_SIZE
    with open(path, "wb") as fh:
        if layout != "empty":
            fh.write(_units((100, 50), (150, 60)))
        if layout == "gap-then-data":
            fh.seek(40_000 * CQ_UNIT_SIZE)
            fh.write(_units((900, 70)))
        if layout == "full":
            fh.write(_units(*[(1000 + i, 1) for i in range(60_000 - 2)]))
        fh.truncate(file_size + (7 if layout == "short" else 0))
    units, size = read_unit_file(path)
    whole = np.frombuffer(path.read_bytes()[:size // CQ_UNIT_SIZE * CQ_UNIT_SIZE], CQ_UNIT_DTYPE)
    assert size == os.path.getsize(path)
    assert len(units) <= len(whole) and units.tobytes() == whole[:len(units)].tobytes()
    end = logical_end(units)
    assert end == logical_end(whole)
    assert int(np.count_nonzero(units["size"][end:] > 0)) == int(np.count_nonzero(whole["size"][end:] > 0))
    if layout == "tail-hole":
        assert len(units) * CQ_UNIT_SIZE <= 8192        # the hole was not read (one filesystem block of data)
