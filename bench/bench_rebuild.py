"""Benchmark: rebuild ConsumeQueue + IndexFile for a store made by `write --synthetic`.

The store is shaped like ../shared/docs/baselines.md: 1,000,000 messages, 4 topics x 8
queues, 400-600 byte bodies, TagA/TagB, a UNIQ_KEY on every message, key
``bk-(i mod 200000)`` and on odd messages ``order-(i/3)``; 128 MiB commitlog files,
default CQ files and one default-size index file. It lives under /tmp (never the repo)
and is reused between runs.

The broker's rate beside it: with ``RMQTOOL_BROKER_BENCH=CMD`` the command is run once (by the shell, the
store's path in ``RMQTOOL_BENCH_STORE``; e.g. a JVM replaying the store with the broker's own
``DefaultMessageStore`` recovery) and its rate is the last ``<number> msg/s`` (or ``messages/s``) it prints;
otherwise the recorded 228k msg/s. The output says which.

Prints messages/s of `rebuild all` (CQ + index from one pass, built with --output, so the
fsyncs are included but the store is left as it is; glibc's allocator tuned as the CLI does
unless --no-tune-allocator), the CPU time
beside it (user+sys of all processes: the load-independent figure, and the bound it gives
on this many idle CPUs), a same-run machine baseline (zlib.crc32 over the CommitLog bytes), and
the upstream broker's figure from baselines.md (228k msg/s warm) for comparison.

    python bench/bench_rebuild.py [--messages N] [--dir /tmp/rmqtool-bench] [--workers W] [--no-tune-allocator]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from crc_floor import crc32_rates, describe                              # noqa: E402
from rmqtool.io.indexfile import DEFAULT_GEOMETRY                      # noqa: E402
from rmqtool.ops.rebuild import rebuild_all                              # noqa: E402
from rmqtool.io.store import Store                                     # noqa: E402
from rmqtool.ops.writer import Geometry, SyntheticSpec, write_synthetic  # noqa: E402

UPSTREAM_WARM_MSG_S = 228_000
GOAL_MSG_S = 700_000


def ensure_store(path: Path, messages: int) -> None:
    marker = path / "bench.json"
    if marker.is_file() and json.loads(marker.read_text()).get("messages") == messages:
        print(f"reusing {path} ({messages} messages)")
        return
    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    s = write_synthetic(path, SyntheticSpec(messages, topics=4, queues=8, key_cardinality=200_000,
                                            body_min=400, body_max=600, tags=("TagA", "TagB"), seed=1),
                        Geometry(commitlog_file_size=128 << 20))
    print(f"wrote {s.records} messages, {s.bytes / 1e6:.0f} MB of CommitLog, {s.index_entries} index "
          f"entries in {time.perf_counter() - t:.1f} s")
    marker.write_text(json.dumps({"messages": messages}))


#: the broker bench's answer: its last "<number> msg/s" or "messages/s" (commas and decimals allowed)
BROKER_RATE = re.compile(r"([0-9][0-9,]*(?:\.[0-9]+)?)\s*(k|M)?\s*(?:msg|messages)/s")


def broker_rate(store: Path, command: str | None = None) -> tuple[float, str]:
    """(msg/s, where it comes from): measured now by ``RMQTOOL_BROKER_BENCH`` (``command``), or the
    recorded figure when no command is given. A command that fails or prints no rate is an error
    (a recorded figure is never passed off as measured)."""
    command = os.environ.get("RMQTOOL_BROKER_BENCH") if command is None else command
    if not command:
        return float(UPSTREAM_WARM_MSG_S), "recorded (baselines.md, 5.3.3 warm; set RMQTOOL_BROKER_BENCH to measure)"
    res = subprocess.run(command, shell=True, capture_output=True, text=True,
                         env=dict(os.environ, RMQTOOL_BENCH_STORE=str(store)))
    found = BROKER_RATE.findall(res.stdout + res.stderr)
    if res.returncode != 0 or not found:
        sys.exit(f"RMQTOOL_BROKER_BENCH={command!r} exited {res.returncode} and printed "
                 f"{'no msg/s figure' if not found else 'a figure'}: {(res.stderr or res.stdout).strip()[-400:]}")
    number, scale = found[-1]
    rate = float(number.replace(",", "")) * {"": 1, "k": 1e3, "M": 1e6}[scale]
    return rate, f"measured this run by RMQTOOL_BROKER_BENCH ({command})"


def run(path: Path, workers: int | None, check_crc: bool) -> dict:
    out = path.parent / (path.name + "-out")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    store = Store(path)
    import resource
    cpu = lambda: sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,   # noqa: E731
                      resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    c0, t0 = cpu(), time.perf_counter()
    cq, ix = rebuild_all(store, DEFAULT_GEOMETRY, output=out, workers=workers, check_crc=check_crc)
    total = time.perf_counter() - t0
    cpu_s = cpu() - c0
    shutil.rmtree(out, ignore_errors=True)
    return {"records": cq.records, "total_s": total, "cpu_s": cpu_s, "units": cq.units, "entries": ix.entries,
            "index_s": ix.seconds, "cq_s": cq.seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-bench/store"))
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-crc", action="store_true", help="skip the recovery walk's body CRC check")
    ap.add_argument("--no-tune-allocator", action="store_true",
                    help="leave glibc's malloc defaults (the rmqtool CLI tunes them for rebuild)")
    args = ap.parse_args()
    if not args.no_tune_allocator:          # as `rmqtool rebuild all` does at entry
        from rmqtool.io.fileio import tune_allocator
        tune_allocator()
    if ROOT in args.dir.resolve().parents:
        ap.error("put the benchmark store outside the repository")
    args.dir.parent.mkdir(parents=True, exist_ok=True)
    ensure_store(args.dir, args.messages)
    rates = crc32_rates(sorted((args.dir / "commitlog").iterdir()))
    crc = rates["fresh"]
    r = run(args.dir, args.workers, not args.no_crc)
    n = r["records"]
    rate = n / r["total_s"]
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; allocator "
          f"{'defaults' if args.no_tune_allocator else 'tuned as by the CLI (fileio.tune_allocator)'}")
    print(f"baseline: {describe(rates)} (this run)")
    print(f"rebuild all (one pass): {r['total_s']:.2f} s for {n} messages, {r['units']} CQ units, "
          f"{r['entries']} index entries (CQ install {r['cq_s']:.2f} s, index install {r['index_s']:.2f} s)")
    mb = sum(f.stat().st_size for f in (args.dir / "commitlog").iterdir()) / 1e6
    print(f"rmqtool rebuild CQ+index: {rate:,.0f} messages/s, {mb / r['total_s']:.0f} MB/s of CommitLog "
          f"= {mb / r['total_s'] / crc:.2f} x crc32 speed, {mb / r['total_s'] / rates['floor']:.2f} x the floor")
    broker, source = broker_rate(args.dir)
    print(f"upstream broker re-dispatch: {broker:,.0f} messages/s, {source} -> "
          f"ratio {rate / broker:.2f}x (goal {GOAL_MSG_S:,}, 3x the recorded figure)")
    print(f"CPU time (main + workers, user + sys): {r['cpu_s']:.2f} s = {n / r['cpu_s']:,.0f} messages per "
          f"CPU-second; {os.cpu_count()} CPUs -> at most ~{n / r['cpu_s'] * os.cpu_count():,.0f} messages/s idle")


if __name__ == "__main__":
    main()
