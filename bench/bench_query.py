"""query-key benchmark: whole-process time on a store with three default-size index files.

Builds (once, reused) under --dir a store with one default 1 GiB CommitLog file (sparse)
holding --records messages (topic BenchTopic, KEYS "order-<i % 50000> k<i>", a UNIQ_KEY
each) and three index files of the default geometry (5,000,000 slots x 20,000,000
entries = 420,000,040 bytes). The real keys are dispatched with the dispatch core
(``rmqtool.broker.dispatch.extend_index_image``: upstream's putKey chains); with --fill (default)
each file is then filled to its last entry with random-hash keys pointing at its records,
so chains are as long as on a full broker index. Then, in the same run, it times
(median of --runs) bare ``python -c pass`` beside whole-process ``python -m rmqtool
query-key`` in several forms, and one in-process query.
Usage: python bench/bench_query.py [--records 300000] [--runs 9] [--no-fill] [--dir ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPIC = "BenchTopic"
CL_FILE = 1 << 30
ORDERS = 50_000
T0 = 1_780_000_000_000


def build(root: Path, records: int, fill: bool) -> None:
    import numpy as np

    from formats import commitlog as cl
    from formats.indexfile import DEFAULT_HASH_SLOTS, DEFAULT_INDEX_ENTRIES
    from rmqtool.broker.dispatch import empty_index_image, extend_index_image
    from rmqtool.records.encode import Host, MessageFields, encode
    from rmqtool.kernels.javahash import index_key_hash

    (root / "commitlog").mkdir(parents=True)
    (root / "consumequeue" / TOPIC / "0").mkdir(parents=True)
    (root / "index").mkdir()
    born, store_host = Host(bytes([10, 0, 0, 7]), 40000), Host(bytes([192, 168, 0, 1]), 10911)
    phys, stamps, chunks, pos = [], [], [], 0
    for i in range(records):
        ts = T0 + i * 3                                  # ~1 s of messages per 333 records
        uniq = f"0A000007{i:024X}"
        props = cl.encode_properties({cl.PROPERTY_KEYS: f"order-{i % ORDERS} k{i}",
                                      cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq,
                                      cl.PROPERTY_TAGS: "TagA"})
        data = encode(MessageFields(TOPIC, body=b"x" * 120, properties=props, queue_offset=i,
                                    phy_offset=pos, born_timestamp=ts, born_host=born,
                                    store_timestamp=ts, store_host=store_host))
        chunks.append(data)
        phys.append(pos)
        stamps.append(ts)
        pos += len(data)
    with open(root / "commitlog" / f"{0:020d}", "wb") as fh:
        fh.write(b"".join(chunks))
        fh.truncate(CL_FILE)
    phys, stamps = np.array(phys), np.array(stamps)
    rng = np.random.default_rng(7)
    thirds = np.array_split(np.arange(records), 3)
    seed_phy = seed_ts = 0
    for n, part in enumerate(thirds):
        keys, kphy, kts = [], [], []
        for i in part.tolist():               # UNIQ_KEY first, then KEYS tokens (IndexService order)
            for k in (f"0A000007{i:024X}", f"order-{i % ORDERS}", f"k{i}"):
                keys.append(index_key_hash(f"{TOPIC}#{k}"))
                kphy.append(phys[i])
                kts.append(stamps[i])
        image = empty_index_image(DEFAULT_HASH_SLOTS, DEFAULT_INDEX_ENTRIES, seed_phy, seed_ts)
        image = extend_index_image(image, np.array(keys), np.array(kphy), np.array(kts))
        if fill:
            room = DEFAULT_INDEX_ENTRIES - int(image.header["index_count"][0])
            pick = rng.integers(part[0], part[-1] + 1, room)
            image = extend_index_image(image, rng.integers(0, 2**31 - 1, room), phys[np.sort(pick)],
                                       np.full(room, stamps[part[-1]]))
        name = f"2026010100000{n}000"
        fd = os.open(root / "index" / name, os.O_RDWR | os.O_CREAT, 0o644)
        image.write_to(fd)
        os.close(fd)
        seed_phy, seed_ts = int(image.header["end_phy_offset"][0]), int(image.header["end_timestamp"][0])
        print(f"  index file {name}: {int(image.header['index_count'][0]) - 1:,} entries", flush=True)


def median_run(cmd: list[str], runs: int) -> tuple[float, subprocess.CompletedProcess]:
    times, last = [], None
    for _ in range(runs):
        t = time.perf_counter()
        last = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times), last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/rmqtool-bench-query")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--no-fill", action="store_true")
    args = ap.parse_args()
    root = Path(args.dir)
    if not (root / "index").is_dir():
        print(f"building {root} ({args.records:,} records, 3 index files) ...", flush=True)
        t = time.perf_counter()
        build(root, args.records, not args.no_fill)
        print(f"  built in {time.perf_counter() - t:.0f} s")
    sizes = [p.stat().st_size for p in sorted((root / "index").iterdir())]
    print(f"index files: {len(sizes)} x {sizes[0]:,} bytes")
    py = sys.executable
    base, _ = median_run([py, "-c", "pass"], args.runs)
    print(f"{'python -c pass':58s} {base * 1000:8.1f} ms   1.00x")
    for label, code in (("python -c 'import numpy'  (for scale; query-key avoids it)", "import numpy"),
                        ("python -c 'import <query-key library path>'",
                         "import rmqtool.io.store, rmqtool.output.schema, rmqtool.ops.query.bykey"),
                        ("python -c 'import rmqtool.cli'  (every command module)", "import rmqtool.cli")):
        t, _ = median_run([py, "-c", code], args.runs)
        print(f"{label:58s} {t * 1000:8.1f} ms {t / base:6.2f}x")
    key = "order-4711"
    from rmqtool.ops.query.bykey import query_key
    from rmqtool.io.store import Store
    query_key(Store(root), key, TOPIC)                 # warm the page cache like the runs below
    t = time.perf_counter()
    res = query_key(Store(root), key, TOPIC)
    inproc = time.perf_counter() - t
    print(f"{'in-process query_key (no interpreter start)':58s} {inproc * 1000:8.1f} ms  "
          f"({len(res.hits)} matches, {res.scanned_bytes:,} un-indexed bytes scanned)")
    goal = 3 * base + inproc
    print(f"{'goal (issue 14): 3 x python -c pass + in-process query':58s} {goal * 1000:8.1f} ms")
    cases = [
        ("query-key --topic (table)", ["query-key", str(root), key, "--topic", TOPIC]),
        ("query-key --topic --format jsonl", ["query-key", str(root), key, "--topic", TOPIC, "-f", "jsonl"]),
        ("query-key (every topic) --format jsonl", ["query-key", str(root), key, "-f", "jsonl"]),
        ("query-key --raw --max 64 --format jsonl", ["query-key", str(root), key, "--topic", TOPIC,
                                                     "--raw", "--max", "64", "-f", "jsonl"]),
    ]
    for label, argv in cases:
        t, p = median_run([py, "-m", "rmqtool", *argv], args.runs)
        rows = len(p.stdout.splitlines()) if "jsonl" in argv else "-"
        print(f"{'rmqtool ' + label:58s} {t * 1000:8.1f} ms {t / base:6.2f}x  {t / goal:5.2f} of goal"
              f"  (exit {p.returncode}, rows {rows})")

if __name__ == "__main__":
    main()
