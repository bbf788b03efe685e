"""Benchmark: does a rebuild and a deep verify stay flat from 1M to 10M messages (issue 38)?

Writes `write --synthetic` stores of 1,000,000 and 10,000,000 messages (default geometry: 1 GiB
CommitLog files, one default IndexFile; the 10M store is about 7 GB) under --dir (never the
repository; reused between runs, refused when the disk has too little room), then runs, each in a fresh
process, `rebuild all STORE --output TMP` and `verify STORE --level deep` --runs times per size. Prints each
command's messages/s and peak RSS (the child's ru_maxrss) at both sizes, min and median, the median
run's ratio to the floor (``crc_floor``: one core CRC-ing the same CommitLog files, measured in this run
for each store), and the 10M / 1M ratios (issue 38's goal: throughput and peak RSS within 10 % of the
1M run).

    python bench/bench_scale.py [--sizes 1000000 10000000] [--dir /tmp/rmqtool-scale] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_memory import ensure_store, peak_rss             # noqa: E402
from crc_floor import crc32_rates                           # noqa: E402

#: bytes of store per message of `write --synthetic`'s default shape (740 MB per 1M), with room
BYTES_PER_MESSAGE = 800


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-scale"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the stores (default: the largest is removed)")
    a = ap.parse_args()
    if ROOT in a.dir.resolve().parents or a.dir.resolve() == ROOT:
        ap.error("put the benchmark stores outside the repository")
    a.dir.mkdir(parents=True, exist_ok=True)
    for n in a.sizes:
        store = a.dir / f"s{n}"
        need = 0 if (store / "bench.json").is_file() else n * BYTES_PER_MESSAGE
        free = shutil.disk_usage(a.dir).free
        if need and free < need * 1.2:
            sys.exit(f"{a.dir}: {free / 1e9:.1f} GB free, a {n:,}-message store needs about {need / 1e9:.1f} GB")
        t = time.perf_counter()
        ensure_store(store, n)
        print(f"store s{n}: {sum(f.stat().st_size for f in (store / 'commitlog').iterdir()) / 1e9:.2f} GB of "
              f"CommitLog files ({time.perf_counter() - t:.0f} s to make or find)", flush=True)
    floor = {n: crc32_rates(sorted((a.dir / f"s{n}" / "commitlog").iterdir()))["floor"] for n in a.sizes}
    commands = {
        "rebuild all --output": lambda s, out: ["rebuild", "all", str(s), "--output", str(out), "-f", "json"],
        "verify --level deep": lambda s, out: ["verify", str(s), "--level", "deep", "-f", "json"],
    }
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {a.runs} runs per size, "
          f"each a fresh process ({time.strftime('%Y-%m-%d %H:%M')})")
    for name, make in commands.items():
        rows = {}
        for n in a.sizes:
            rates, peaks = [], []
            for _ in range(a.runs):
                with tempfile.TemporaryDirectory(prefix="rmqtool-scale-out-", dir=a.dir) as tmp:
                    rss, secs = peak_rss(make(a.dir / f"s{n}", Path(tmp) / "out"), ROOT)
                rates.append(n / secs)
                peaks.append(rss)
            rows[n] = (statistics.median(rates), statistics.median(peaks))
            mb = sum(f.stat().st_size for f in (a.dir / f"s{n}" / "commitlog").iterdir()) / 1e6
            print(f"{name:22} {n:>11,} messages: {min(rates):>11,.0f} / {statistics.median(rates):>11,.0f} msg/s "
                  f"(min / median) = {mb * statistics.median(rates) / n / floor[n]:.2f}x the floor "
                  f"({floor[n]:,.0f} MB/s), peak RSS {min(peaks):6.0f} / {statistics.median(peaks):6.0f} MiB",
                  flush=True)
        lo, hi = min(a.sizes), max(a.sizes)
        if lo != hi:
            print(f"{name:22} {hi:,} / {lo:,}: throughput {rows[hi][0] / rows[lo][0]:.2f}x, "
                  f"peak RSS {rows[hi][1] / rows[lo][1]:.2f}x (goal: both within 10 %)", flush=True)
    if not a.keep and len(a.sizes) > 1:
        shutil.rmtree(a.dir / f"s{max(a.sizes)}", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
