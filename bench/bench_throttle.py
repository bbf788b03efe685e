"""--max-read-rate: how fast a throttled verify reads, beside the same verify unthrottled (same run).

    python bench/bench_throttle.py [--store DIR] [--rate 50]

Builds (once) a store of about 1 GiB with ``write --synthetic`` under /tmp, then times
``verify --level shallow`` without and with ``--max-read-rate RATE`` and prints the bytes of the
bytes every read call of the process returned (/proc/self/io) over each wall time (MB = 10^6 bytes), and whether the two reports are equal.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


CHILD = """
import runpy, sys
sys.argv = ["rmqtool", "verify", *sys.argv[1:], "-f", "json"]
try:
    runpy.run_module("rmqtool", run_name="__main__")
except SystemExit:
    pass
finally:
    io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    sys.stderr.write("RCHAR " + io["rchar"].strip() + "\\n")
"""


def run(args: list[str]) -> tuple[float, dict, int]:
    """Wall time, report and bytes read by every read call of the process (/proc/self/io rchar)."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True)
    wall = time.perf_counter() - t
    rep = json.loads(p.stdout)
    rep["summary"].pop("reread_after_replace", None)
    rchar = int(next(line.split()[1] for line in p.stderr.splitlines() if line.startswith("RCHAR")))
    return wall, rep, rchar


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="/tmp/rmqtool-bench-throttle")
    ap.add_argument("--rate", type=float, default=50.0)
    args = ap.parse_args()
    store = Path(args.store)
    if not (store / "commitlog").is_dir():
        subprocess.run([sys.executable, "-m", "rmqtool", "write", str(store), "--synthetic", "1000000",
                        "--body-size", "900-1100"], check=True, capture_output=True)
    free, base, read_free = run([str(store)])
    slow, throttled, read_slow = run([str(store), "--max-read-rate", str(args.rate)])
    print(f"commitlog data walked: {base['summary']['commitlog']['bytes'] / 1e6:.0f} MB; all reads of the process "
          f"(/proc/self/io rchar): {read_free / 1e6:.0f} MB unthrottled, {read_slow / 1e6:.0f} MB throttled")
    print(f"unthrottled verify: {free:6.1f} s  {read_free / 1e6 / free:7.1f} MB/s")
    print(f"--max-read-rate {args.rate:g}: {slow:6.1f} s  {read_slow / 1e6 / slow:7.1f} MB/s (limit {args.rate:g})")
    print(f"same report: {base == throttled}")


if __name__ == "__main__":
    main()
