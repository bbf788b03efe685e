"""Deep verify benchmark: MB/s of `verify --level deep` beside zlib.crc32 over the same bytes.

Builds a store of ~1 KB messages under /tmp with the synthetic writer (`rmqtool write
--synthetic`'s library path; reused if present: CommitLog, ConsumeQueues, IndexFiles,
checkpoint), warms the page cache, then measures in one run:
  - zlib.crc32 over every commitlog byte (the baseline),
  - deep verify of the whole store (walk, CRCs, CQ and index cross-checks, forecast).
Usage: python bench/bench_verify.py [--gib 1.0] [--dir /tmp/rmqtool-bench-verify] [--jobs 2]
``--jobs N`` also times the same verify through the local engine's N-process pool (the CLI's
``verify --jobs N``), still against crc32 on one core.
Run it 3 times on an otherwise idle machine and quote min/median of the ratio (the first run builds the store).
The baselines (bench/crc_floor.py): crc32 with fresh 64 MiB reads, and the floor (1 MiB reads into one buffer).
glibc's allocator is tuned first as `rmqtool verify` does at entry (``rmqtool.io.fileio.tune_allocator``),
unless --no-tune-allocator.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crc_floor import crc32_rates, describe  # noqa: E402
from rmqtool.io.store import Store  # noqa: E402
from rmqtool.ops.verify import VerifyOptions, verify  # noqa: E402

MESSAGE_BYTES = 1024


def ensure_store(root: Path, gib: float) -> Store:
    files = sorted((root / "commitlog").glob("[0-9]" * 20)) if (root / "commitlog").is_dir() else []
    have = sum(f.stat().st_size for f in files)
    if have < gib * (1 << 30) or not (root / "checkpoint").is_file():
        from rmqtool.ops.writer import Geometry, SyntheticSpec, write_synthetic
        messages = int(gib * (1 << 30) / MESSAGE_BYTES) + 1000
        t = time.perf_counter()
        write_synthetic(root, SyntheticSpec(count=messages, topics=8, queues=4, body_min=700, body_max=900),
                        Geometry(commitlog_file_size=1 << 30))
        print(f"generated {messages} messages in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return Store(root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/tmp/rmqtool-bench-verify")
    ap.add_argument("--jobs", type=int, default=2,
                    help="also time `verify --jobs N` (the local engine's process pool; 0 or 1: skip)")
    ap.add_argument("--no-tune-allocator", action="store_true",
                    help="leave glibc's malloc defaults (the rmqtool CLI tunes them for verify)")
    args = ap.parse_args()
    if not args.no_tune_allocator:          # as `rmqtool verify` does at entry
        from rmqtool.io.fileio import tune_allocator
        tune_allocator()
    store = ensure_store(Path(args.dir), args.gib)
    nbytes = sum(seg.size for seg in store.commitlog.files)
    rates = crc32_rates([seg.path for seg in store.commitlog.files])
    crc_s, reused_s = nbytes / 1e6 / rates["fresh"], nbytes / 1e6 / rates["floor"]
    t = time.perf_counter()
    report = verify(Store(args.dir), VerifyOptions(level="deep"))
    verify_s = time.perf_counter() - t
    s = report.summary
    mb = nbytes / 1e6
    print(f"store            {args.dir}: {len(store.commitlog.files)} commitlog file(s), {mb:.0f} MB, "
          f"{s['commitlog']['records']} records, {s['consumequeue']['units']} CQ units, "
          f"{s['index']['entries']} index entries")
    print(f"findings         {s['findings']}")
    print(f"baseline         {describe(rates)}")
    print(f"verify --deep    {mb / verify_s:8.1f} MB/s ({verify_s:.2f} s)  = "
          f"{100 * crc_s / verify_s:.0f}% of zlib.crc32, {100 * reused_s / verify_s:.0f}% of the floor (goal >= 60%)")
    if args.jobs > 1:
        from rmqtool.engines import get_engine
        t = time.perf_counter()
        with get_engine("local", jobs=args.jobs) as eng:
            pooled = verify(Store(args.dir), VerifyOptions(level="deep"), engine=eng)
        pool_s = time.perf_counter() - t
        same = pooled.as_dict() == report.as_dict()
        print(f"verify --deep --jobs {args.jobs} {mb / pool_s:8.1f} MB/s ({pool_s:.2f} s)  = "
              f"{100 * crc_s / pool_s:.0f}% of zlib.crc32 on one core ({len(eng.tasks)} tasks; "
              f"report {'identical' if same else 'DIFFERENT'})")


if __name__ == "__main__":
    main()
