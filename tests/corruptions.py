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
