"""Run fuzz inputs against a target with a time bound per input; classify the outcome.

Input ``i`` of a campaign is fully determined by (master seed, target, i): the seed
file is picked and mutated by ``random.Random(f"{master}:{target}:{i}")``, so any
failure is replayed with ``replay(target, master, i)``.
"""
from __future__ import annotations

import os
import random
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from rmqtool.errors import RmqError

from .mutate import Mutator
from .targets import TARGETS

#: wall-clock bound for one input (inputs are at most ~100 KB; normal runs take milliseconds)
DEFAULT_INPUT_TIMEOUT = 10.0


class HangError(BaseException):
    """Raised by the alarm: a BaseException so that no ``except Exception`` in the code swallows it."""


@dataclass
class Failure:
    target: str
    master: int
    index: int
    kind: str          # exception class name, "hang"
    message: str
    where: str         # last frames of the traceback
    size: int

    def line(self) -> str:
        return (f"{self.target} input {self.index} (master seed {self.master}, {self.size} bytes): "
                f"{self.kind}: {self.message[:200]} at {self.where}")


@dataclass
class Counts:
    target: str
    inputs: int = 0
    ok: int = 0
    refused: int = 0           # at least one step raised RmqError (a one-line error)
    failures: list = field(default_factory=list)
    seconds: float = 0.0

    def merge(self, other: "Counts") -> None:
        self.inputs += other.inputs
        self.ok += other.ok
        self.refused += other.refused
        self.failures += other.failures
        self.seconds = max(self.seconds, other.seconds)


def scratch_dir() -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="rmqfuzz-", dir=base))


def make_input(target: str, master: int, index: int):
    """(seed, mutated bytes) of input ``index``."""
    t = TARGETS[target]
    pool = t.seeds()
    rng = random.Random(f"{master}:{target}:{index}")
    seed = rng.choice(pool)
    mut = Mutator(rng, [s.data for s in pool])
    if t.mutate is not None:
        return seed, t.mutate(rng, seed, mut)
    data = mut.mutate(seed.data, seed.hints)
    if rng.random() < 0.2:                        # stacked mutations reach deeper states
        data = mut.mutate(data, seed.hints)
    return seed, data


def _alarm(signum, frame):
    raise HangError()


def run_input(target: str, seed, data: bytes, scratch: Path, timeout: float) -> tuple[str, str, str]:
    """('ok'|'refused'|'fail', kind, message/where)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        refused = TARGETS[target].run(data, seed, scratch)
        return ("refused" if refused else "ok"), "", ""
    except HangError:
        return "fail", "hang", f"no result within {timeout:.0f} s"
    except RmqError as exc:          # a target's own top-level refusal
        return "refused", type(exc).__name__, str(exc)
    except BaseException as exc:     # noqa: BLE001 - anything else is the bug we hunt
        tb = traceback.extract_tb(exc.__traceback__)
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb[-4:]))
        return "fail", type(exc).__name__, f"{exc}\t{where}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def campaign(target: str, master: int, start: int, count: int, scratch: Path | None = None,
             timeout: float = DEFAULT_INPUT_TIMEOUT, max_failures: int = 50,
             deadline: float | None = None) -> Counts:
    """Inputs ``start .. start+count-1`` of one target (stops early at ``deadline``)."""
    scratch = scratch or scratch_dir()
    counts = Counts(target)
    t0 = time.monotonic()
    for i in range(start, start + count):
        if deadline is not None and time.monotonic() > deadline:
            break
        seed, data = make_input(target, master, i)
        status, kind, msg = run_input(target, seed, data, scratch, timeout)
        counts.inputs += 1
        if status == "ok":
            counts.ok += 1
        elif status == "refused":
            counts.refused += 1
        elif len(counts.failures) < max_failures:
            message, _, where = msg.partition("\t")
            counts.failures.append(Failure(target, master, i, kind, message, where, len(data)))
    counts.seconds = time.monotonic() - t0
    return counts


def replay(target: str, master: int, index: int, scratch: Path | None = None):
    """Re-run one input without catching anything (for debugging a reported failure)."""
    seed, data = make_input(target, master, index)
    return TARGETS[target].run(data, seed, scratch or scratch_dir())
