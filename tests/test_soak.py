"""Soak: `write` appends at a steady rate while query-key, query-id, dump and verify loop.

Every message whose write returned must be found by every later reader run; no reader
run may fail; and the readers never write: the store's bytes are hashed when a write
returns and again just before the next write starts, while only readers ran. A fixed number
of writes, and between two writes every reader completes a run started after the first: the
same interleaving on a fast machine and a slow one.
"""
from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import run_cli

GEOMETRY = ["--commitlog-file-size", 1 << 16, "--cq-file-size", 800, "--index-slots", 61, "--index-entries", 350]
BATCH = 12
#: a bound against a hung reader or writer, not a speed check
HANG = 600


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def store_hash(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def uniq(i: int) -> str:
    return f"0A00{i:052X}"


def rows(start: int, count: int) -> str:
    return "".join(json.dumps({"topic": f"Soak{i % 3}", "body": f"message {i} " + "x" * (i % 300),
                               "properties": {"KEYS": f"soak-{i} common", "UNIQ_KEY": uniq(i)},
                               "queue_id": i % 4}) + "\n"
                   for i in range(start, start + count))


class Soak:
    def __init__(self, root: Path, tmp: Path, writes: int):
        self.root, self.tmp, self.wanted = root, tmp, writes
        self.acked: list[int] = []          # message numbers whose write returned
        self.lock = threading.Condition()
        self.errors: list[str] = []
        self.reader_runs = 0
        self.writes = 0
        self.done_after: dict[int, int] = {}    # reader -> the writes done when its last finished run started
        self.stop = threading.Event()

    def fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)
            self.lock.notify_all()
        self.stop.set()

    def _readers_caught_up(self) -> None:
        """Until every reader has finished a run that started after the last write."""
        with self.lock:
            ok = self.lock.wait_for(lambda: self.stop.is_set() or min(self.done_after.values()) >= self.writes,
                                    timeout=HANG)
        if not ok:
            self.fail(f"no reader run finished within {HANG} s after write {self.writes}")

    # --- the writer -----------------------------------------------------------------------------
    def writer(self) -> None:
        n = len(self.acked)
        src = self.tmp / "batch.jsonl"
        while self.writes < self.wanted and not self.stop.is_set():
            self._readers_caught_up()
            if self.stop.is_set():
                break
            before = store_hash(self.root)
            if self.writes and before != self.after:
                changed = sorted(k for k in set(before) | set(self.after) if before.get(k) != self.after.get(k))
                return self.fail(f"the store changed while only readers ran: {changed[:5]}")
            src.write_text(rows(n, BATCH))
            res = _cli("write", self.root, "--from", src, *GEOMETRY)
            if res.returncode != 0:
                return self.fail(f"write exit {res.returncode}: {res.stderr[-500:]}")
            self.after = store_hash(self.root)
            with self.lock:
                self.acked.extend(range(n, n + BATCH))
                self.writes += 1
            n += BATCH
        self._readers_caught_up()
        self.stop.set()

    # --- the readers --------------------------------------------------------------------------------
    def reader(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            with self.lock:
                known = list(self.acked)
                started_after = self.writes
            i = rng.choice(known)
            kind = rng.choice(("query-key", "query-id", "dump", "verify"))
            if kind == "query-key":
                res = _cli("query-key", self.root, f"soak-{i}", "-f", "jsonl")
                hits = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
                ok = res.returncode == 0 and any(h.get("uniq_key") == uniq(i) for h in hits)
            elif kind == "query-id":
                res = _cli("query-id", self.root, uniq(i), "-f", "jsonl")
                hits = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
                ok = res.returncode == 0 and any(f"soak-{i}" in (h.get("keys") or "") for h in hits)
            elif kind == "dump":
                res = _cli("dump", "commitlog", self.root, "-f", "jsonl")
                seen = {json.loads(x).get("uniq_key") for x in res.stdout.splitlines() if x.startswith("{")}
                missing = [j for j in known if uniq(j) not in seen]
                ok = res.returncode == 0 and not missing
            else:
                res = _cli("verify", self.root, "-f", "jsonl")
                ok = res.returncode in (0, 1) and not any(ln.startswith("error:") for ln in res.stderr.splitlines())
                if res.returncode == 1:        # findings while a write is in flight may only be warnings
                    summary = [json.loads(x) for x in res.stdout.splitlines() if '"type":"summary"' in x]
                    ok = ok and summary and summary[0]["findings"]["error"] == 0
            if "Traceback" in res.stderr or "internal error" in res.stderr:
                ok = False
            with self.lock:
                self.reader_runs += 1
                self.done_after[seed] = started_after
                self.lock.notify_all()
            if not ok:
                errors = [x for x in res.stdout.splitlines() if '"severity":"error"' in x]
                return self.fail(f"{kind} for message {i} (acknowledged): exit {res.returncode}\n"
                                 + "\n".join(errors[:5]) + f"\n{res.stdout[-800:]}\n{res.stderr[-800:]}")

    def run(self, readers: int = 2) -> None:
        src = self.tmp / "first.jsonl"
        src.write_text(rows(0, BATCH))
        assert run_cli("write", self.root, "--from", src, *GEOMETRY).code == 0
        self.acked.extend(range(BATCH))
        self.after = store_hash(self.root)
        self.done_after = dict.fromkeys(range(readers), -1)
        threads = [threading.Thread(target=self.writer)]
        threads += [threading.Thread(target=self.reader, args=(k,)) for k in range(readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=HANG * (self.wanted + 2))
        assert not self.errors, "\n".join(self.errors)
        assert not any(t.is_alive() for t in threads), "a reader or the writer never ended"


def _soak(tmp_path, writes):
    soak = Soak(tmp_path / "store", tmp_path, writes)
    soak.run()
    assert (soak.writes, len(soak.acked)) == (writes, BATCH * (writes + 1)), (soak.writes, len(soak.acked))
    # at rest, everything acknowledged is there and the store verifies clean
    res = run_cli("verify", tmp_path / "store", "--level", "deep", "-f", "jsonl")
    assert res.code == 0, res.out[-2000:]
    dumped = {r.get("uniq_key") for r in run_cli("dump", "commitlog", tmp_path / "store", "-f", "jsonl").jsonl()}
    assert {uniq(i) for i in soak.acked} <= dumped
    return soak


def test_soak_short(tmp_path):
    _soak(tmp_path, writes=5)


@pytest.mark.slow
def test_soak_long(tmp_path):
    _soak(tmp_path, writes=300)
