"""Named CommitLog corruptions of the reference store copies, shared by engine-equality tests."""
from __future__ import annotations

import os
import struct

from conftest import load_answers
from formats import commitlog as cl

FILE_SIZE = 98304
HEAD = cl.MESSAGE_HEAD_OFFSETS


def patch(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def clfile(root, base: int):
    return root / "commitlog" / f"{base:020d}"


def messages_in_file(name: str, index: int) -> list[dict]:
    lo, hi = index * FILE_SIZE, (index + 1) * FILE_SIZE
    return [m for m in load_answers(name)["messages"] if lo <= m["phyOffset"] < hi]


def corrupt(root, case: str) -> str:
    """Apply ``case`` to the store copy at ``root`` (a copy of ``basic``, or ``crashed`` for
    torn-tail); returns the store name the case applies to."""
    answers = load_answers("basic")
    if case == "body-flip":
        m = next(m for m in messages_in_file("basic", 5) if m["bodyLength"] > 20)
        path = clfile(root, 5 * FILE_SIZE)
        at = m["phyOffset"] - 5 * FILE_SIZE + cl.body_position(m["sysFlag"]) + 7
        patch(path, at, bytes([open(path, "rb").read()[at] ^ 0x10]))
    elif case == "bad-magic":
        msgs = messages_in_file("basic", 3)
        patch(clfile(root, 3 * FILE_SIZE), msgs[len(msgs) // 2]["phyOffset"] - 3 * FILE_SIZE + HEAD["magic"],
               struct.pack(">I", 0x12345678))
    elif case == "total-size":
        m = messages_in_file("basic", 2)[10]
        patch(clfile(root, 2 * FILE_SIZE), m["phyOffset"] - 2 * FILE_SIZE + HEAD["total_size"],
               struct.pack(">i", 10 ** 9))
    elif case == "phy-offset":
        m = messages_in_file("basic", 4)[3]
        patch(clfile(root, 4 * FILE_SIZE), m["phyOffset"] - 4 * FILE_SIZE + HEAD["physical_offset"],
               struct.pack(">q", m["phyOffset"] + 1))
    elif case == "blank-size":
        f = answers["commitlog"]["files"][1]
        patch(clfile(root, f["fromOffset"]), f["blankMagicAt"] - f["fromOffset"],
               struct.pack(">i", f["blankLength"] - 4))
    elif case == "after-blank":
        f = next(f for f in answers["commitlog"]["files"] if f["blankLength"] and f["blankLength"] > 200)
        patch(clfile(root, f["fromOffset"]), f["blankMagicAt"] - f["fromOffset"] + 100, b"\xab" * 16)
    elif case == "missing-file":
        os.remove(clfile(root, 5 * FILE_SIZE))
    elif case == "short-file":
        os.truncate(clfile(root, 7 * FILE_SIZE), FILE_SIZE - 1000)
    elif case == "zeroed-middle":
        m = messages_in_file("basic", 6)[5]
        patch(clfile(root, 6 * FILE_SIZE), m["phyOffset"] - 6 * FILE_SIZE, bytes(3000))
    elif case == "torn-tail":
        last = load_answers("crashed")["messages"][-1]
        base = last["phyOffset"] // FILE_SIZE * FILE_SIZE
        patch(clfile(root, base), last["phyOffset"] - base + 60, bytes(last["size"] - 60))
        return "crashed"
    else:
        raise ValueError(case)
    return "basic"


CASES = ("body-flip", "bad-magic", "total-size", "phy-offset", "blank-size", "after-blank",
         "missing-file", "short-file", "zeroed-middle", "torn-tail")


def _dledger_entry(i: int) -> dict:
    return load_answers("dledger")["dledger"]["entries"][i]


def _dledger_data(root, pos: int):
    base = pos // FILE_SIZE * FILE_SIZE
    return root / "dledger-n0" / "data" / f"{base:020d}", pos - base


def _entry_field(root, i: int, field: str, fmt: str, value: int) -> None:
    from formats import dledger as dl
    path, at = _dledger_data(root, _dledger_entry(i)["pos"])
    patch(path, at + dl.ENTRY_HEADER_OFFSETS[field], struct.pack(fmt, value))


def corrupt_dledger(root, case: str) -> None:
    """Apply ``case`` to a copy of the DLedger reference store (``conftest.dledger_copy``)."""
    from formats import dledger as dl
    if case == "entry-magic":
        _entry_field(root, 150, "magic", ">i", 7)
    elif case == "entry-pos":
        _entry_field(root, 160, "pos", ">q", 12345)
    elif case == "entry-size":
        _entry_field(root, 170, "size", ">i", 20)
    elif case == "body-length":
        _entry_field(root, 180, "body_length", ">i", 5)
    elif case == "index-gap":
        _entry_field(root, 200, "index", ">q", 7777)
    elif case == "term-falls":
        _entry_field(root, 299, "term", ">q", 5)
    elif case == "index-unit":
        offset = dict(zip(dl.INDEX_UNIT_DTYPE.names, (dl.INDEX_UNIT_DTYPE.fields[n][1] for n in dl.INDEX_UNIT_DTYPE.names)))
        patch(root / "dledger-n0" / "index" / f"{0:020d}", 250 * dl.INDEX_UNIT_SIZE + offset["pos"],
              struct.pack(">q", 12345))
    elif case == "zeroed-entry":
        path, at = _dledger_data(root, _dledger_entry(190)["pos"])
        patch(path, at, bytes(dl.ENTRY_HEADER_SIZE))
    elif case == "short-data-file":
        path, at = _dledger_data(root, _dledger_entry(390)["pos"])
        os.truncate(path, at + 30)
    else:
        raise ValueError(case)


DLEDGER_CASES = ("entry-magic", "entry-pos", "entry-size", "body-length", "index-gap", "term-falls",
                 "index-unit", "zeroed-entry", "short-data-file")
