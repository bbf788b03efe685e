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
BENCHES = {   # name -> (script and arguments, the line holding the ratio, the regex of the ratio)
    "rebuild": (["bench_rebuild.py"], r"= ([0-9.]+) x crc32 speed"),
    "verify": (["bench_verify.py", "--jobs", "1"], r"= +([0-9.]+)% of zlib.crc32"),
    "scan": (["bench_scan.py"], r"ratio scan / crc32 +([0-9.]+)"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=",".join(BENCHES))
    args = ap.parse_args()
    for name in args.only.split(","):
        argv, pattern = BENCHES[name]
        ratios = {"1": [], "0": []}
        for run in range(args.runs):
            for flag in ("1", "0"):
                proc = subprocess.run([sys.executable, str(ROOT / "bench" / argv[0]), *argv[1:]],
                                      capture_output=True, text=True, cwd=ROOT,
                                      env=dict(os.environ, RMQTOOL_NATIVE=flag))
                m = re.search(pattern, proc.stdout)
                if proc.returncode or not m:
                    print(proc.stdout + proc.stderr)
                    return 1
                ratios[flag].append(float(m.group(1)))
                line = next(ln for ln in proc.stdout.splitlines() if re.search(pattern, ln))
                print(f"{name:8} run {run + 1} {'native' if flag == '1' else 'numpy '}  {line.strip()}")
        for flag, label in (("1", "native"), ("0", "numpy")):
            r = ratios[flag]
            print(f"{name:8} {label:6} x crc32: min {min(r):.2f}  median {statistics.median(r):.2f}  ({len(r)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
