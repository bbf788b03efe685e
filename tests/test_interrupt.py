"""Ctrl-C: the command says `interrupted`, exits 130, and leaves no worker process behind;
an OS error is one line naming the path (exit 2), not an internal error."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_cli


def _default_sigint():
    """Ctrl-C as in a terminal: a suite started in the background (``cmd &``) has SIGINT
    ignored, which the child would inherit (and then rightly keep)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("int") / "store"
    # large enough that each command still runs well after 0.4 s (the native rebuild does 120,000
    # messages in about that; a signal landing while the interpreter shuts down kills it with -2)
    r = run_cli("write", root, "--synthetic", 480_000, "--commitlog-file-size", 16 << 20)
    assert r.code == 0, r.err
    return root


def _wait_until_sigint_is_caught(pid: int, timeout: float = 10) -> None:
    """Until the process has a SIGINT handler (``SigCgt`` in /proc/PID/status), or it ended: a signal
    before the interpreter installs its handler kills it outright, which is not what is tested."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as fh:
                caught = next((int(line.split()[1], 16) for line in fh if line.startswith("SigCgt:")), 0)
        except OSError:
            return
        if caught & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.01)


@pytest.mark.parametrize("args", [
    ["dump", "commitlog", "{store}", "-f", "jsonl"],
    ["verify", "{store}", "--level", "deep"],
    ["verify", "{store}", "--level", "deep", "--jobs", "2", "--split-size", "4194304"],
    ["rebuild", "all", "{store}", "--output", "{out}", "--workers", "2"],
], ids=["dump", "verify-threads", "verify-jobs", "rebuild-workers"])
def test_sigint_says_interrupted_and_exits_130(store, tmp_path, args):
    argv = [a.format(store=store, out=tmp_path / "out") for a in args]
    p = subprocess.Popen([sys.executable, "-m", "rmqtool", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=_default_sigint)
    _wait_until_sigint_is_caught(p.pid)     # Python's handler installed (a loaded machine starts slowly)
    time.sleep(0.4)                        # well inside each run (each takes seconds here)
    if p.poll() is not None:
        pytest.skip(f"finished before the signal on this machine (exit {p.returncode})")
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert (p.returncode, err) == (130, "interrupted\n")
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(p.pid, 0)                # no process of its group is left


def test_os_error_is_one_line_naming_the_path(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    r = run_cli("write", target / "store", "--synthetic", 1)          # a path below a regular file
    assert r.code == 2 and "internal error" not in r.err, r.err
    assert r.err.count("\n") == 1 and str(target) in r.err


def test_ctrl_c_while_the_command_loads_is_interrupted_too(tmp_path):
    """Ctrl-C that lands while the CLI's modules are still importing (a loaded machine, a slow
    disk) ends the same way: 'interrupted', exit 130, no traceback. A stand-in typer package
    raises KeyboardInterrupt at import, where the signal would."""
    (tmp_path / "typer").mkdir()
    (tmp_path / "typer" / "__init__.py").write_text("raise KeyboardInterrupt\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "rmqtool", "info", str(tmp_path)], capture_output=True,
                       text=True, env=env, timeout=60)
    assert (p.returncode, p.stderr) == (130, "interrupted\n")


def test_ctrl_c_inside_an_eval_while_loading_still_exits_130(tmp_path):
    """The interrupt lands inside an ``eval`` of a string (typer evaluates the commands'
    annotations so while the CLI loads): CPython remembers that and, once finished, would kill the
    process with SIGINT (-2) instead of returning 130, which a loaded CI machine once showed."""
    (tmp_path / "typer").mkdir()
    (tmp_path / "typer" / "__init__.py").write_text(
        "eval('(_ for _ in ()).throw(KeyboardInterrupt)')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    for argv in ([sys.executable, "-m", "rmqtool"], [shutil.which("rmqtool") or ""]):
        if not argv[0]:
            continue
        p = subprocess.run([*argv, "info", str(tmp_path)], capture_output=True, text=True, env=env,
                           timeout=60)
        assert (p.returncode, p.stderr) == (130, "interrupted\n"), argv


@pytest.mark.parametrize("preset,expected", [(None, "1"), ("3", "3")])
def test_the_command_starts_numpy_without_blas_threads(monkeypatch, preset, expected):
    """rmqtool makes no BLAS call: the command asks OpenBLAS for one thread before numpy loads
    (its start-up spin cost every command 0.1 s of CPU on two CPUs); a user's own value is kept."""
    import rmqtool.__main__ as entry
    import rmqtool.cli
    if preset is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset)
    seen = []
    monkeypatch.setattr(rmqtool.cli, "main", lambda: seen.append(os.environ.get("OPENBLAS_NUM_THREADS")))
    entry.run()
    assert seen == [expected]


def _interrupted_before_ignoring():
    """A worker initializer that a Ctrl-C reaches before it has run (as when the terminal's SIGINT
    lands while the pool is forking): the signal is sent to this worker, then ignored."""
    from rmqtool.engines.interrupts import ignore_interrupts
    os.kill(os.getpid(), signal.SIGINT)
    ignore_interrupts()


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler for the test's duration (a test runner's worker may ignore SIGINT
    or handle it itself; workers forked meanwhile inherit it)."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set from the main thread only")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def test_workers_forked_with_ctrl_c_held_survive_one_during_their_start(python_sigint):
    """Workers are forked with SIGINT blocked: one that arrives before the initializer ignores it stays
    pending and is discarded, never a KeyboardInterrupt traceback in the worker (without the block,
    each worker dies in its initializer and the pool never runs a task)."""
    import multiprocessing as mp
    from rmqtool.engines.interrupts import interrupts_held
    ctx = mp.get_context("fork")
    with interrupts_held():
        pool = ctx.Pool(2, initializer=_interrupted_before_ignoring)
    try:
        assert pool.map_async(abs, [-1, -2, -3]).get(timeout=20) == [1, 2, 3]
    finally:
        pool.terminate()
        pool.join()


def test_a_ctrl_c_held_while_forking_reaches_the_parent_after(python_sigint):
    import threading
    from rmqtool.engines.interrupts import interrupts_held
    reached = False
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            reached = True                 # held: not raised inside the block
        time.sleep(0.1)                    # (raised by now: on unblocking, at the latest here)
    assert reached
