"""Benchmark: the native core against the numpy path, alternating in one run.

Runs bench_rebuild.py, bench_verify.py (--jobs 1) and bench_scan.py as child processes,
``--runs`` times each, alternating RMQTOOL_NATIVE=1 and RMQTOOL_NATIVE=0, and prints each
run's same-run ratio to zlib.crc32, then min / median per path.

    python bench/bench_native.py [--runs 3] [--only rebuild,verify,scan]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHES = {   # name -> (script and arguments, the regexes of the ratios to crc32 with fresh reads and to the floor)
    "rebuild": (["bench_rebuild.py"], (r"= ([0-9.]+) x crc32 speed", r"([0-9.]+) x the floor")),
    "verify": (["bench_verify.py", "--jobs", "1"], (r"= +([0-9.]+)% of zlib.crc32", r"([0-9.]+)% of the floor")),
    "scan": (["bench_scan.py"], (r"ratio scan / crc32 +([0-9.]+)", r"ratio scan / floor +([0-9.]+)")),
}
YARDSTICKS = ("crc32", "floor")   # bench/crc_floor.py


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=",".join(BENCHES))
    args = ap.parse_args()
    for name in args.only.split(","):
        argv, patterns = BENCHES[name]
        ratios = {(flag, y): [] for flag in ("1", "0") for y in YARDSTICKS}
        for run in range(args.runs):
            for flag in ("1", "0"):
                proc = subprocess.run([sys.executable, str(ROOT / "bench" / argv[0]), *argv[1:]],
                                      capture_output=True, text=True, cwd=ROOT,
                                      env=dict(os.environ, RMQTOOL_NATIVE=flag))
                found = [re.search(p, proc.stdout) for p in patterns]
                if proc.returncode or not all(found):
                    print(proc.stdout + proc.stderr)
                    return 1
                for y, m in zip(YARDSTICKS, found):
                    ratios[(flag, y)].append(float(m.group(1)))
                lines = {ln.strip() for ln in proc.stdout.splitlines() if any(re.search(p, ln) for p in patterns)}
                print(f"{name:8} run {run + 1} {'native' if flag == '1' else 'numpy '}  {' | '.join(sorted(lines))}")
        for flag, label in (("1", "native"), ("0", "numpy")):
            for y in YARDSTICKS:
                r = ratios[(flag, y)]
                print(f"{name:8} {label:6} x {y}: min {min(r):.2f}  median {statistics.median(r):.2f}  ({len(r)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
