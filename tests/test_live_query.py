"""query-key on a store that another process is appending to, like a running broker.

The appender writes records the way the broker does: each record in two pieces (so a
reader can see it half written), rolling the CommitLog file with a BLANK and a new
zero-filled file; then, as the dispatcher would, the index keys in upstream's putKey
order (entry, slot, header counts, end offset), starting a new index file whose header
counts are still 0 when the current one fills up. After each record is complete and
indexed it logs the offset. Every query must succeed and return every logged record.
Queries run freely beside it, and at fixed checkpoints the appender waits, its file
half rolled and its index partly filled, until a query (one through the CLI) has run:
those queries are mid-append on any machine.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import load_answers
from formats import commitlog as cl
from formats.indexfile import (INDEX_HEADER_OFFSETS, INDEX_HEADER_SIZE, entry_position,
                               index_file_size, slot_position)
from rmqtool.records.encode import Host, MessageFields, encode, encode_blank
from rmqtool.kernels.javahash import index_key_hash
from rmqtool.ops.query.bykey import query_key
from rmqtool.io.store import Store

KEY = "key-0000"
TOPIC = "TopicTest"
SLOTS, ENTRIES = 61, 350          # the reference stores' index geometry
CL_FILE = 98304


def _pw(fd, data: bytes, pos: int) -> None:
    os.pwrite(fd, data, pos)


def _index_header(fd) -> list[int]:
    return list(struct.unpack(">qqqqii", os.pread(fd, INDEX_HEADER_SIZE, 0)))


def _put_key(fd, key: str, phy: int, ts: int) -> bool:
    """upstream IndexFile.putKey, field by field in its write order; False when full."""
    begin_ts, _, _, _, slots_used, count = _index_header(fd)
    count = max(count, 1)
    if count >= ENTRIES:
        return False
    h = index_key_hash(key)
    slot_pos = slot_position(SLOTS, h % SLOTS)
    slot_value = struct.unpack(">i", os.pread(fd, 4, slot_pos))[0]
    if slot_value <= 0 or slot_value > count:
        slot_value = 0
    diff = 0 if begin_ts <= 0 else max(0, min((ts - begin_ts) // 1000, 2**31 - 1))
    _pw(fd, struct.pack(">iqii", h, phy, diff, slot_value), entry_position(SLOTS, count))
    _pw(fd, struct.pack(">i", count), slot_pos)
    if count <= 1:
        _pw(fd, struct.pack(">q", phy), INDEX_HEADER_OFFSETS["begin_phy_offset"])
        _pw(fd, struct.pack(">q", ts), INDEX_HEADER_OFFSETS["begin_timestamp"])
    if slot_value == 0:
        _pw(fd, struct.pack(">i", slots_used + 1), INDEX_HEADER_OFFSETS["hash_slot_count"])
    _pw(fd, struct.pack(">i", count + 1), INDEX_HEADER_OFFSETS["index_count"])
    _pw(fd, struct.pack(">q", phy), INDEX_HEADER_OFFSETS["end_phy_offset"])
    _pw(fd, struct.pack(">q", ts), INDEX_HEADER_OFFSETS["end_timestamp"])
    return True


def appender(root: str, log: str, count: int, start_phy: int, conn=None, checkpoints=()) -> None:
    """Append ``count`` records; after the record numbers in ``checkpoints`` are logged, send the
    number logged on ``conn`` and wait for the reply (the test queries meanwhile)."""
    root = Path(root)
    cldir, ixdir = root / "commitlog", root / "index"
    phy = start_phy
    seg = phy - phy % CL_FILE
    cfd = os.open(cldir / f"{seg:020d}", os.O_RDWR)
    ixname = sorted(os.listdir(ixdir))[-1]
    ifd = os.open(ixdir / ixname, os.O_RDWR)
    serial = 0
    with open(log, "a", buffering=1) as out:
        for n in range(count):
            uniq = f"LIVE{n:028X}"
            ts = int(time.time() * 1000)
            props = cl.encode_properties({cl.PROPERTY_KEYS: f"live {KEY} x{n}",
                                          cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq})
            fields = MessageFields(TOPIC, body=os.urandom(150 + n % 300), properties=props, queue_id=1,
                                   queue_offset=10_000 + n, sys_flag=0, born_timestamp=ts,
                                   born_host=Host(bytes([10, 0, 0, 9]), 5000), store_timestamp=ts,
                                   store_host=Host(bytes([192, 168, 1, 10]), 10911))
            rec_len = len(encode(fields))
            pos = phy - seg
            if pos + rec_len + cl.END_FILE_MIN_BLANK_LENGTH > CL_FILE:     # roll over like the broker
                _pw(cfd, encode_blank(CL_FILE - pos), pos)
                os.close(cfd)
                seg += CL_FILE
                phy, pos = seg, 0
                path = cldir / f"{seg:020d}"
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                os.ftruncate(fd, CL_FILE)
                cfd = fd
            fields.phy_offset = phy
            data = encode(fields)
            half = len(data) // 2
            _pw(cfd, data[:half], pos)          # a reader may now see a torn record
            time.sleep(0.0005)
            _pw(cfd, data[half:], pos + half)
            for key in (uniq, "live", KEY, f"x{n}"):
                while not _put_key(ifd, f"{TOPIC}#{key}", phy, ts):
                    end_phy, end_ts = _index_header(ifd)[3], _index_header(ifd)[1]
                    os.close(ifd)
                    serial += 1
                    name = f"99990101000000{serial:03d}"
                    ifd = os.open(ixdir / name, os.O_RDWR | os.O_CREAT, 0o644)
                    os.ftruncate(ifd, index_file_size(SLOTS, ENTRIES))
                    _pw(ifd, struct.pack(">qq", end_ts, end_ts), 0)              # seeded times
                    _pw(ifd, struct.pack(">qq", end_phy, end_phy), 16)           # counts stay 0
            out.write(f"{phy}\n")
            phy += len(data)
            time.sleep(0.008)
            if n + 1 in checkpoints:
                conn.send(n + 1)
                conn.recv()
    os.close(cfd)
    os.close(ifd)


def _logged(log: Path) -> set[int]:
    text = log.read_text() if log.exists() else ""
    lines = text.split("\n")[:-1]          # only complete lines
    return {int(x) for x in lines}


def _query_while_appending(store_copy, tmp_path, count: int, min_rounds: int):
    root = store_copy("basic")
    answers = load_answers("basic")
    original = {m["phyOffset"] for m in answers["messages"]
                if m["topic"] == TOPIC and (KEY in cl.split_keys(m.get("keys")) or m.get("uniqKey") == KEY)}
    start_phy = answers["commitlog"]["maxPhyOffset"]
    log = tmp_path / "appended.log"
    ctx = mp.get_context("fork")
    checkpoints = (count // 4, count // 2, 3 * count // 4)
    here, there = ctx.Pipe()
    writer = ctx.Process(target=appender, args=(str(root), str(log), count, start_phy, there, checkpoints))
    writer.start()
    rounds = cli_rounds = 0
    during = []                                          # records logged at each checkpoint's query
    try:
        deadline = time.time() + 60 + count / 10          # a bound against hangs, not a speed check
        while (writer.is_alive() or rounds < min_rounds) and time.time() < deadline:
            paused = here.recv() if here.poll() else None
            before = _logged(log)
            if paused is not None:                        # the appender waits for this query
                assert len(before) == paused
                during.append(paused)
            if rounds % 5 == 2 or paused == checkpoints[0]:
                p = subprocess.run([sys.executable, "-m", "rmqtool", "query-key", str(root), KEY,
                                    "--topic", TOPIC, "--format", "jsonl"],
                                   capture_output=True, text=True)
                assert p.returncode == 0 and "error" not in p.stderr, p.stderr
                got = [int(line.split('"phy_offset":')[1].split(",")[0]) for line in p.stdout.splitlines()]
                cli_rounds += 1
            else:
                got = [h.phy_offset for h in query_key(Store(root), KEY, TOPIC).hits]
            assert len(got) == len(set(got))
            missing = (original | before) - set(got)
            assert not missing, (rounds, sorted(missing)[:5])
            rounds += 1
            if paused is not None:
                here.send("go")
    finally:
        here.close()                                      # an appender still waiting then ends
        writer.join(120)
    assert writer.exitcode == 0
    assert during == list(checkpoints) and cli_rounds >= 1, (during, cli_rounds)
    print(f"{rounds} queries ({cli_rounds} through the CLI, {len(during)} at checkpoints mid-append) while "
          f"{count} records were appended")
    final = _logged(log)
    assert len(final) == count
    res = query_key(Store(root), KEY, TOPIC)
    assert {h.phy_offset for h in res.hits} == original | final
    return root, res, final


def test_query_key_while_a_writer_appends(store_copy, tmp_path):
    """Short variant for every run: a few hundred records, a new index file, the CLI in the loop."""
    root, res, final = _query_while_appending(store_copy, tmp_path, count=400, min_rounds=3)
    assert len(list((root / "index").glob("9999*"))) >= 1           # a new index file was started
    assert any(h.indexed for h in res.hits if h.phy_offset in final)


@pytest.mark.slow
def test_query_key_while_a_writer_appends_long(store_copy, tmp_path):
    root, res, final = _query_while_appending(store_copy, tmp_path, count=1200, min_rounds=10)
    assert len(list((root / "index").glob("9999*"))) >= 2           # new index files were started
    assert any(h.indexed for h in res.hits if h.phy_offset in final)
