"""``python -m rmqtool`` that stops at a known point, for tests that signal a command mid-run.

    python tests/pause_at.py ARGS...      (the same as ``python -m rmqtool ARGS...``)

Every call the command makes to an I/O function of ``os`` (``IO_CALLS``: opens, reads, writes,
syncs, renames, links, unlinks) is counted, in call order, in every thread (a forked worker goes
on from its parent's count). With ``RMQTOOL_TEST_PAUSE_AT=N`` the N-th call does not happen yet:
the process writes ``paused N FUNCTION`` to ``RMQTOOL_TEST_PAUSE_STATE`` and waits there until
the file ``RMQTOOL_TEST_PAUSE_RELEASE`` exists (never, without it), in an interruptible sleep: a
SIGINT raises KeyboardInterrupt where the call would have run, a SIGKILL ends it mid-run. With
``N=0`` nothing pauses and ``calls TOTAL`` is written at exit, the count a test picks N from. So a
signal lands at the same point of the run on a fast machine and on a slow one.
"""
from __future__ import annotations

import os
import threading

IO_CALLS = ("open", "pread", "preadv", "pwrite", "write", "fsync", "fdatasync", "ftruncate", "replace",
            "rename", "link", "unlink", "copy_file_range")


def install(pause_at: int, state: str, release: str | None) -> None:
    import atexit
    import time
    lock = threading.Lock()
    seen = [0]
    paused = [False]
    replace = os.replace

    def say(line: str) -> None:          # whole or not at all: the test acts once the file exists
        with open(state + ".part", "w") as fh:
            fh.write(line)
        replace(state + ".part", state)

    def wrap(name, fn):
        def counted(*args, **kwargs):
            with lock:
                seen[0] += 1
                here = seen[0]
            if here == pause_at:
                paused[0] = True
                say(f"paused {here} {name}\n")
                while release is None or not os.path.exists(release):
                    time.sleep(0.01)
            return fn(*args, **kwargs)
        counted.__name__ = name
        return counted

    for name in IO_CALLS:
        if hasattr(os, name):
            setattr(os, name, wrap(name, getattr(os, name)))

    def record():
        if not paused[0] and not pause_at:
            say(f"calls {seen[0]}\n")
    atexit.register(record)


# --- for the tests ---------------------------------------------------------------------------------
def io_calls(args, state, timeout: float = 600) -> int:
    """How many I/O calls the command ``rmqtool ARGS`` makes (in its main process)."""
    import subprocess
    import sys
    from pathlib import Path
    state = Path(state)
    state.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, __file__, *map(str, args)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=timeout,
                          env=dict(os.environ, RMQTOOL_TEST_PAUSE_AT="0", RMQTOOL_TEST_PAUSE_STATE=str(state)))
    assert proc.returncode == 0, proc.stderr
    kind, total = state.read_text().split()
    assert kind == "calls" and int(total) > 0
    state.unlink()
    return int(total)


def start_paused(args, at: int, state, release=None, hang: float = 300, **popen):
    """Start ``rmqtool ARGS`` and wait until it stopped before its ``at``-th I/O call, or ended:
    (the process, what ``state`` says: "paused AT FUNCTION", or "" if it never stopped there).
    ``hang`` bounds the wait against a hang; it is not a speed check."""
    import subprocess
    import sys
    import time
    from pathlib import Path
    state = Path(state)
    state.unlink(missing_ok=True)
    env = dict(os.environ, RMQTOOL_TEST_PAUSE_AT=str(at), RMQTOOL_TEST_PAUSE_STATE=str(state))
    if release is not None:
        env["RMQTOOL_TEST_PAUSE_RELEASE"] = str(release)
    proc = subprocess.Popen([sys.executable, __file__, *map(str, args)], env=env, **popen)
    deadline = time.monotonic() + hang
    while proc.poll() is None and not state.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    where = state.read_text() if state.exists() else ""
    return proc, where if where.startswith(f"paused {at} ") else ""


def _main() -> None:
    import runpy
    import sys
    install(int(os.environ["RMQTOOL_TEST_PAUSE_AT"]), os.environ["RMQTOOL_TEST_PAUSE_STATE"],
            os.environ.get("RMQTOOL_TEST_PAUSE_RELEASE"))
    sys.argv = ["rmqtool", *sys.argv[1:]]
    runpy.run_module("rmqtool", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
