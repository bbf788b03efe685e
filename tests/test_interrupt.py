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

import pause_at
from conftest import run_cli


def _default_sigint():
    """Ctrl-C as in a terminal: a suite started in the background (``cmd &``) has SIGINT
    ignored, which the child would inherit (and then rightly keep)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("int") / "store"
    # several CommitLog files: rebuild's and verify's workers each get some
    r = run_cli("write", root, "--synthetic", 40_000, "--commitlog-file-size", 1 << 20)
    assert r.code == 0, r.err
    return root


#: a bound against a hang, not a speed check
HANG = 120


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("args", [
    ["dump", "commitlog", "{store}", "-f", "jsonl"],
    ["verify", "{store}", "--level", "deep"],
    ["verify", "{store}", "--level", "deep", "--jobs", "2", "--split-size", "4194304"],
    ["rebuild", "all", "{store}", "--output", "{out}", "--workers", "2"],
], ids=["dump", "verify-threads", "verify-jobs", "rebuild-workers"])
def test_sigint_says_interrupted_and_exits_130(store, tmp_path, args):
    """The command stops halfway through its I/O calls (tests/pause_at.py), SIGINT goes to its
    process group there, then it may go on: the signal lands mid-run on any machine."""
    state, release = tmp_path / "pause-state", tmp_path / "release"
    calls = pause_at.io_calls([a.format(store=store, out=tmp_path / "probe") for a in args], state)
    argv = [a.format(store=store, out=tmp_path / "out") for a in args]
    try:
        p, where = pause_at.start_paused(argv, max(1, calls // 2), state, release, hang=HANG,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                         start_new_session=True, preexec_fn=_default_sigint)
        assert where, f"never stopped before I/O call {calls // 2} of {calls} (exit {p.poll()})"
        os.killpg(p.pid, signal.SIGINT)
    finally:
        release.touch()
    _, err = p.communicate(timeout=HANG)
    assert (p.returncode, err) == (130, "interrupted\n")
    deadline = time.monotonic() + HANG
    while not _gone(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(p.pid), "a process of the command's group is left"


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
