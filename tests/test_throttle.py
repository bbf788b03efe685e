"""--max-read-rate and --idle-io: the throttle's arithmetic with an injected clock, and the same
report from a throttled run (no timed assertions: bench/README.md has the measured rate)."""
from __future__ import annotations

import json

from conftest import reference_store, run_cli
from rmqtool.io.throttle import Throttle


def test_the_average_rate_never_exceeds_the_limit():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    t = Throttle(1000.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        t.consume(500)                           # 500 bytes read instantly each time
    assert abs(now[0] - 5.0) < 1e-9              # 5000 bytes at 1000 B/s: 5 s from the first read
    now[0] += 100                                # idle for a while: no sleep owed
    t.consume(100)
    assert len(slept) == 10
    assert Throttle(None).rate is None and Throttle(0).rate is None


def test_a_throttled_verify_gives_the_same_report():
    root = reference_store("basic")
    a = json.loads(run_cli("verify", root, "--level", "deep", "-f", "json").out)
    b = json.loads(run_cli("verify", root, "--level", "deep", "-f", "json", "--max-read-rate", "200",
                           "--idle-io").out)
    for r in (a, b):
        r["summary"].pop("reread_after_replace", None)
    assert a == b
    assert run_cli("verify", root, "--max-read-rate", "0").code == 2
    assert run_cli("stats", root, "--max-read-rate", "500", "-f", "json").code == 0
