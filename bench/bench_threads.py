"""Threads or processes for the per-file walk (issue 14, point 4): the rebuild bench store's files
walked, CRC-checked and dispatched sequentially, by 2 threads, and by 2 processes (best of 3 each).
The native loops release the GIL; the per-window Python/numpy work holds it. Results are only counted
(a real rebuild also ships the dispatch results from processes, which threads need not).

    python bench/bench_threads.py [--dir /tmp/rmqtool-bench]    (make the store with bench_rebuild.py)
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmqtool.broker.dispatch import DispatchConfig, dispatch_batch  # noqa: E402
from rmqtool.io.store import Store  # noqa: E402
from rmqtool.records.scan import FileScan  # noqa: E402


def walk_file(seg) -> int:
    records = 0
    for batch in FileScan(str(seg[0]), seg[1], check_crc=True):
        dispatch_batch(batch, DispatchConfig())
        records += len(batch)
    return records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/rmqtool-bench")
    args = ap.parse_args()
    segs = [(f.path, f.start) for f in Store(Path(args.dir)).commitlog.files]
    runs = {"sequential": lambda: sum(map(walk_file, segs)),
            "2 threads": lambda: sum(ThreadPoolExecutor(2).map(walk_file, segs)),
            "2 processes": lambda: sum(ProcessPoolExecutor(2).map(walk_file, segs))}
    best = {}
    for name, run in runs.items():
        best[name] = 1e9
        for _ in range(3):
            t = time.perf_counter()
            records = run()
            best[name] = min(best[name], time.perf_counter() - t)
        print(f"{name:12} {records:,} records in {len(segs)} files: best of 3 {best[name]:.2f} s")
    print(f"speed-up over sequential: threads {best['sequential'] / best['2 threads']:.2f}x, "
          f"processes {best['sequential'] / best['2 processes']:.2f}x")


if __name__ == "__main__":
    main()
