"""The long fuzz campaign: N mutated inputs per parser, spread over worker processes.

    python bench/fuzz.py --per-parser 1000000 --jobs 2
    python bench/fuzz.py --per-parser 5000 --parsers index,checkpoint --seed 7
    python bench/fuzz.py --per-parser 1000000 --jobs 1 --parsers simplified-commitlog,simplified-index
    python bench/fuzz.py --per-parser 500000 --start 500000 --jobs 1 --parsers simplified-commitlog

Each worker runs a contiguous slice of input numbers with a wall-clock bound per input
and an address-space limit (RLIMIT_AS: any attempt to allocate what a corrupt length
field claims fails as MemoryError, which counts as a failure). Prints inputs, clean
results, refusals (one-line RmqError) and failures per parser with inputs/s; a failure
line names (parser, master seed, input number) for ``tests/fuzz/harness.replay``.
Exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fuzz.harness import Counts, campaign, scratch_dir  # noqa: E402
from fuzz.targets import TARGETS  # noqa: E402

#: address space a worker may use beyond what it holds after start-up
MEMORY_HEADROOM = 1 << 30


def _limit_memory() -> None:
    with open("/proc/self/statm") as fh:
        vsz = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vsz + MEMORY_HEADROOM, resource.RLIM_INFINITY))


def _worker(args) -> Counts:
    target, master, start, count, timeout, deadline = args
    import shutil
    _limit_memory()
    scratch = scratch_dir()
    try:
        return campaign(target, master, start, count, scratch, timeout, deadline=deadline)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(parsers, per_parser: int, jobs: int, master: int, timeout: float, slice_size: int,
        max_seconds: float | None, out=sys.stdout, progress: float | None = None,
        first: int = 0) -> dict[str, Counts]:
    results = {}
    width = max(map(len, parsers), default=13)
    ctx = mp.get_context("fork")
    with ctx.Pool(jobs, maxtasksperchild=20) as pool:
        for name in parsers:
            TARGETS[name].seeds()            # load seeds before forking
            t0 = time.monotonic()
            deadline = None if max_seconds is None else time.time() + max_seconds
            tasks = [(name, master, first + s, min(slice_size, per_parser - s), timeout,
                      None if deadline is None else deadline - time.time() + time.monotonic())
                     for s in range(0, per_parser, slice_size)]
            total = Counts(name)
            shown = time.monotonic()
            for part in pool.imap_unordered(_worker, tasks):
                total.merge(part)
                if progress and time.monotonic() - shown >= progress and total.inputs < per_parser:
                    shown = time.monotonic()
                    print(f"  ... {name} {total.inputs:,d}/{per_parser:,d} inputs, {total.refused:,d} refused, "
                          f"{len(total.failures)} failures, {total.inputs / (shown - t0):.0f} inputs/s",
                          file=out, flush=True)
            wall = time.monotonic() - t0
            results[name] = total
            rate = total.inputs / wall if wall else 0.0
            print(f"{name:{width}s} inputs={total.inputs:>9,d} clean={total.ok:>9,d} refused={total.refused:>9,d} "
                  f"failures={len(total.failures):>4d}  {wall:8.1f} s  {rate:8.0f} inputs/s", file=out, flush=True)
            for f in total.failures[:20]:
                print("    FAIL " + f.line(), file=out, flush=True)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-parser", type=int, default=1_000_000)
    ap.add_argument("--parsers", default=",".join(TARGETS), help=f"comma list of {', '.join(TARGETS)}")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1, help="master seed (input i is replayable from it)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds allowed per input")
    ap.add_argument("--slice", type=int, default=2000, help="inputs per worker task")
    ap.add_argument("--start", type=int, default=0,
                    help="first input number (split one campaign over several runs: --start 500000)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop each parser's campaign after this long (counts say how far it got)")
    ap.add_argument("--progress", type=float, default=None, metavar="SECONDS",
                    help="print a running count of the current parser at most this often")
    a = ap.parse_args(argv)
    parsers = [p for p in a.parsers.split(",") if p]
    unknown = [p for p in parsers if p not in TARGETS]
    if unknown:
        ap.error(f"unknown parser(s) {unknown}; known: {list(TARGETS)}")
    results = run(parsers, a.per_parser, a.jobs, a.seed, a.timeout, a.slice, a.max_seconds, progress=a.progress,
                  first=a.start)
    return 1 if any(r.failures for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
