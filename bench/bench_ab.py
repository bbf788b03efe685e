"""Two checkouts of rmqtool, alternated in one run: whole-process time of the same commands.

    python bench/bench_ab.py BASE_CHECKOUT [--head CHECKOUT] [--store DIR] [--messages N] [--runs R]

Each run executes, for each side in turn (base, head, base, head, ...), ``python -m rmqtool`` with
that checkout first on ``PYTHONPATH``: ``rebuild all STORE --output TMP`` and ``verify STORE --level
deep``. Alternating in one run keeps the VM's drift out of the ratio. Prints each side's median and
minimum wall time and the head/base ratio of the medians, the same for the CPU time of the whole process
tree (user + sys of the command and its workers), and the load average before and after. The store is made with ``write --synthetic`` when
``--store`` does not exist yet. A base checkout: ``git worktree add /tmp/wt-base REV`` (copy the
built ``rmqtool/kernels/_native*.so`` into it so both sides run the same core).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _cpu() -> float:
    """User + sys seconds of the children waited for so far (a command's workers are its children)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(checkout: Path, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``python -m rmqtool ARGS`` with ``checkout`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cpu, start = _cpu(), time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if res.returncode not in (0, 1):
        sys.exit(f"{checkout}: rmqtool {' '.join(map(str, args))} exited {res.returncode}: {res.stderr.strip()}")
    return took, _cpu() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("--head", type=Path, default=HERE)
    ap.add_argument("--store", type=Path, default=Path("/tmp/rmqtool-bench-ab"))
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=8)
    a = ap.parse_args()
    if not a.store.exists():
        _run(a.head, "write", a.store, "--synthetic", a.messages)
    out = Path(tempfile.mkdtemp(prefix="rmqtool-ab-"))
    commands = {"rebuild all --output": lambda: ("rebuild", "all", a.store, "--output", out / "rebuilt"),
                "verify --level deep": lambda: ("verify", a.store, "--level", "deep")}
    times: dict = {(side, name): [] for side in ("base", "head") for name in commands}
    load = os.getloadavg()
    try:
        for _ in range(a.runs):
            for side, checkout in (("base", a.base), ("head", a.head)):
                for name, args in commands.items():
                    shutil.rmtree(out / "rebuilt", ignore_errors=True)
                    times[(side, name)].append(_run(checkout, *args()))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"store {a.store}, {a.runs} alternating runs; base {a.base}, head {a.head}; load average "
          f"{load[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    for name in commands:
        for k, what in enumerate(("wall", "CPU")):
            b = [t[k] for t in times[("base", name)]]
            h = [t[k] for t in times[("head", name)]]
            print(f"{name:22} {what:4} base median {statistics.median(b):.3f} s (min {min(b):.3f})  "
                  f"head median {statistics.median(h):.3f} s (min {min(h):.3f})  "
                  f"head/base {statistics.median(h) / statistics.median(b):.3f}")


if __name__ == "__main__":
    main()
