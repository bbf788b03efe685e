"""Benchmark: a rebuild worker's dispatch per record, the one native loop against the passes it replaced.

Scans each 8 MiB window of a store's first CommitLog file as a rebuild worker does (``FileScan`` with the
native window scan and the body CRC, one reused read buffer), then dispatches the batch and compacts it
(``dispatch_batch(batch).compact()``). Runs alternate between the one loop (``core.dispatch_columns``)
and the earlier path (the span hashes, ``span_groups``, ``index_keys`` and numpy passes; the one loop
switched off by making ``dispatch._dispatch_native`` hand every batch back). Prints the CPU time
(``time.process_time``: the other processes on a shared machine count less than in wall time) per record
of the scan and of the dispatch, min and median over the runs, and the load average. glibc's allocator is
tuned as `rmqtool rebuild` tunes it for its workers (``fileio.tune_allocator``) unless --no-tune-allocator.

    python bench/bench_dispatch.py [--store DIR] [--runs N] [--no-tune-allocator]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmqtool.broker import dispatch as D                   # noqa: E402
from rmqtool.io.fileio import CACHE_WINDOW                 # noqa: E402
from rmqtool.kernels import native                         # noqa: E402
from rmqtool.records.scan import FileScan, ReadBuffer      # noqa: E402


def run(path: Path, buffer: ReadBuffer, one_loop: bool) -> tuple[float, float]:
    """(scan ns, dispatch ns) of CPU per record over the file."""
    real = D._dispatch_native
    if not one_loop:
        D._dispatch_native = lambda *args, **kwargs: None
    try:
        records = scan_s = dispatch_s = 0.0
        batches = iter(FileScan(path, int(path.name), check_crc=True, chunk_size=CACHE_WINDOW, buffer=buffer))
        while True:
            t0 = time.process_time()
            batch = next(batches, None)
            t1 = time.process_time()
            if batch is None:
                break
            D.dispatch_batch(batch).compact()
            t2 = time.process_time()
            scan_s += t1 - t0
            dispatch_s += t2 - t1
            records += len(batch)
    finally:
        D._dispatch_native = real
    return scan_s / records * 1e9, dispatch_s / records * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("/tmp/rmqtool-bench/store"),
                    help="a store made by `write --synthetic` (bench_rebuild.py makes this one)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--no-tune-allocator", action="store_true", help="leave glibc's malloc defaults")
    a = ap.parse_args()
    if not a.no_tune_allocator:
        from rmqtool.io.fileio import tune_allocator
        tune_allocator()
    if native.core is None:
        sys.exit(f"the one loop needs the native core ({native.path})")
    files = sorted((a.store / "commitlog").iterdir())
    if not files:
        sys.exit(f"{a.store}: no CommitLog file")
    buffer = ReadBuffer()
    run(files[0], buffer, True)                            # the page cache and the pools warmed
    got: dict[bool, list] = {False: [], True: []}
    loads = []
    for _ in range(a.runs):
        for one_loop in (False, True):
            got[one_loop].append(run(files[0], buffer, one_loop))
            loads.append(os.getloadavg()[0])
    print(f"{files[0]}: {a.runs} alternating runs, load average {min(loads):.1f}-{max(loads):.1f} on "
          f"{os.cpu_count()} CPUs, allocator {'defaults' if a.no_tune_allocator else 'tuned'}; CPU per record, "
          "min / median")
    for one_loop, name in ((False, "earlier passes"), (True, "one loop")):
        scan = [s for s, _ in got[one_loop]]
        disp = [d for _, d in got[one_loop]]
        print(f"  {name:15} dispatch {min(disp):6.1f} / {statistics.median(disp):6.1f} ns   "
              f"scan {min(scan):6.1f} / {statistics.median(scan):6.1f} ns")
    ratio = statistics.median(d for _, d in got[True]) / statistics.median(d for _, d in got[False])
    print(f"  one loop / earlier passes (dispatch, medians): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
