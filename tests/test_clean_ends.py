"""Clean ends: a killed rebuild leaves no worker behind and no traceback; a Ctrl-C at any instant,
even as the output ends, exits 130 with "interrupted" or 0 with the whole output (never death by
SIGINT); a live process holding the store's files refuses a write even when its ``lock`` is gone.

The loops are bounded by a count; every assertion is on an outcome (exit status, what a process
printed, which processes are left), never on how long something took."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_cli
from test_interrupt import _default_sigint

ROOT = Path(__file__).resolve().parent.parent
IS_LINUX = sys.platform.startswith("linux")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env




@pytest.fixture(scope="module")
def busy_store(tmp_path_factory):
    """Several CommitLog files of 8 MiB: `rebuild all --workers 2` keeps both workers busy."""
    root = tmp_path_factory.mktemp("ends") / "store"
    r = run_cli("write", root, "--synthetic", 150_000, "--commitlog-file-size", 8 << 20)
    assert r.code == 0, r.err
    return root


# --- B7: SIGKILL of the main process ----------------------------------------------------------

def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _kill_loop(store: str, out: str, kills: int) -> dict:
    """Run in a separate process that is a child subreaper: workers orphaned by the SIGKILL of
    `rebuild all`'s main process are re-parented here, so their ends are seen (reaped, with how
    each ended) and none can hide as init's child. Returns what each kill left."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    runs = []
    for i in range(kills):
        errfile = Path(out) / f"stderr-{i}"
        with open(errfile, "w") as err:
            main = subprocess.Popen([sys.executable, "-m", "rmqtool", "rebuild", "all", store, "--yes",
                                     "--workers", "2", "--output", str(Path(out) / f"build-{i}")],
                                    stdout=subprocess.DEVNULL, stderr=err, env=_env())
        workers: list[int] = []
        for _ in range(2000):                           # until both workers are forked (or it ended)
            workers = _children(main.pid)
            if len(workers) >= 2 or main.poll() is not None:
                break
            time.sleep(0.005)
        time.sleep(0.03 * (i % 6))                      # land at varied points of the tasks
        if main.poll() is not None:
            runs.append({"skipped": "finished before the kill"})
            continue
        workers = _children(main.pid)
        os.kill(main.pid, signal.SIGKILL)
        main.wait()
        ends, left = {}, set(workers)
        for _ in range(200):                            # at most ~20 s for the orphans to end
            for pid in list(left):
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:              # reaped already, or never re-parented here
                    done, status = pid, None
                if done:
                    ends[pid] = None if status is None else (
                        -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
                    left.discard(pid)
            if not left:
                break
            time.sleep(0.1)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        runs.append({"workers": len(workers), "ends": list(ends.values()), "survivors": len(left),
                     "stderr": errfile.read_text()})
    return {"runs": runs}


@pytest.mark.skipif(not IS_LINUX, reason="needs /proc and a child subreaper (Linux)")
def test_sigkill_of_rebuild_leaves_no_worker_and_no_traceback(busy_store, tmp_path):
    p = subprocess.run([sys.executable, __file__, "kill-loop", str(busy_store), str(tmp_path), "8"],
                       capture_output=True, text=True, timeout=600, env=_env())
    assert p.returncode == 0, p.stderr
    runs = json.loads(p.stdout)["runs"]
    killed = [r for r in runs if "skipped" not in r]
    assert killed, "every rebuild finished before it could be killed"
    for r in killed:
        assert r["survivors"] == 0, r                   # no orphan outlives the bounded wait
        assert "Traceback" not in r["stderr"] and "Error" not in r["stderr"], r["stderr"]
        # a worker is killed with its parent, or had ended by itself quietly
        assert all(code in (None, 0, -signal.SIGKILL) for code in r["ends"]), r


def test_a_worker_whose_parent_died_before_it_started_exits_at_once():
    """The race: the parent is gone before the worker arms the death signal (it would wait for
    a parent that never comes back); the initializer's check of getppid() ends it, quietly."""
    code = (
        "import os, sys, time\n"
        "from rmqtool.engines import interrupts\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.close(w)\n"
        "    inner = os.fork()\n"
        "    if inner == 0:\n"
        "        os.read(r, 1)\n"                      # until the parent below has ended
        "        while os.getppid() == interrupts._forked_by[0]: time.sleep(0.01)\n"
        "        interrupts.start_worker()\n"
        "        print('still running', flush=True)\n"
        "        os._exit(5)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "os.close(r); os.close(w)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=_env())
    assert p.returncode == 0 and "still running" not in p.stdout and p.stderr == "", (p.stdout, p.stderr)


# --- B11: Ctrl-C at any instant, including after the output ----------------------------------

def _sigint_disposition(pid: int) -> str | None:
    """How process ``pid`` takes SIGINT now: caught (a handler), ignored, default; None once gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except (OSError, ValueError):
        return None
    bit = 1 << (signal.SIGINT - 1)
    if int(fields["SigIgn"], 16) & bit:
        return "ignored"
    return "caught" if int(fields["SigCgt"], 16) & bit else "default"


def _interrupt_at(argv: list[str], out: Path, when) -> tuple[int, str, str]:
    """Run ``rmqtool ARGV`` (stdout into ``out``), send one SIGINT when ``when(pid)`` says so (it
    polls; it returns once the moment has come or the process has ended), return rc, stdout, stderr."""
    with open(out, "w") as fh:
        p = subprocess.Popen([sys.executable, "-m", "rmqtool", *argv], stdout=fh, stderr=subprocess.PIPE,
                             text=True, env=_env(), preexec_fn=_default_sigint)
        try:
            when(p)
            try:
                os.kill(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return p.returncode, out.read_text(), err


def _loaded(pid: int, name: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return name in fh.read()
    except OSError:
        return True                                     # ended: nothing left to wait for


def _after_start(delay: float):
    """Once the command's own code runs (the CLI's imports load ``_datetime``: before that, Python
    is still importing ``site``, where a Ctrl-C is Python's own traceback, not rmqtool's), then
    ``delay`` seconds later."""
    def when(p):
        while p.poll() is None and not _loaded(p.pid, "/_datetime."):
            time.sleep(0.002)
        time.sleep(delay)
    return when


def _after_output(out: Path, size: int, delay: float):
    """Once the whole output is written, then ``delay`` seconds later: the exit window."""
    def when(p):
        while p.poll() is None and out.stat().st_size < size:
            time.sleep(0.001)
        time.sleep(delay)
    return when


def _after_handler_leaves(p):
    """The very end: the handler was installed and is no longer (the interpreter's shutdown put
    the default action back, or the command ignores SIGINT as it ends)."""
    seen = False
    while p.poll() is None:
        state = _sigint_disposition(p.pid)
        seen = seen or state == "caught"
        if seen and state in ("default", "ignored"):
            return


COMMANDS = {
    "dump": ["dump", "commitlog", "{store}", "-f", "jsonl"],
    "verify-deep": ["verify", "{store}", "--level", "deep", "-f", "json"],
    "rebuild-workers": ["rebuild", "all", "{store}", "--output", "{out}", "--workers", "2", "-f", "json"],
    "export": ["export", "{store}", "--to", "{out}"],
}


@pytest.mark.skipif(not IS_LINUX, reason="reads a process's signal disposition from /proc")
@pytest.mark.parametrize("name", list(COMMANDS))
def test_sigint_at_any_instant_is_130_interrupted_or_a_complete_0(name, tmp_path):
    if name == "export":
        pytest.importorskip("pyarrow")
    store = ROOT / "fixtures" / "reference" / "basic"
    argv = lambda i: [a.format(store=store, out=tmp_path / f"build-{i}") for a in COMMANDS[name]]
    first = subprocess.run([sys.executable, "-m", "rmqtool", *argv("ref")], capture_output=True,
                           text=True, env=_env(), timeout=300)
    assert first.returncode in (0, 1), first.stderr
    whole = first.stdout
    size = len(whole.encode())
    plans = ([lambda out, d=d: _after_start(d) for d in (0.0, 0.05, 0.15)]
             + [lambda out, d=d: _after_output(out, size, d) for d in (0.0, 0.002, 0.01, 0.03)]
             + [lambda out: _after_handler_leaves] * 3)
    outcomes = []
    for i, plan in enumerate(plans):
        out = tmp_path / f"out-{i}"
        when = plan(out)
        rc, text, err = _interrupt_at(argv(i), out, when)
        outcomes.append(rc)
        assert rc != -signal.SIGINT, f"instant {i}: killed by SIGINT; stderr {err!r}"
        assert "Traceback" not in err, err
        if rc == 130:                    # what a complete run says up to where it stopped, then one line
            assert err.endswith("interrupted\n"), (i, err)
            said = err[:-len("interrupted\n")].replace(f"build-{i}", "build-ref")
            assert first.stderr.startswith(said), (i, err)       # export: its summary, then the table was cut
        else:
            assert rc == first.returncode, (i, rc, err)
            assert err.replace(f"build-{i}", "build-ref") == first.stderr, (i, err)   # export's summary
            if name == "rebuild-workers":
                assert json.loads(text)                  # the whole report (timings differ per run)
            else:
                assert text == whole, i                  # the whole output
    assert 130 in outcomes, outcomes                     # the early instants did interrupt it


# --- B9: a live process holding the store, its lock file gone --------------------------------

_HOLDER = """
import mmap, sys
f = open(sys.argv[1], "r+b")
m = mmap.mmap(f.fileno(), 0)       # held as the broker holds a CommitLog file: mapped
f.close()
print("holding", flush=True)
sys.stdin.read()                   # until the test closes our stdin
"""


@pytest.mark.skipif(not IS_LINUX, reason="reads /proc/PID/fd and /proc/PID/maps")
@pytest.mark.parametrize("command", [
    ["write", "{store}", "--synthetic", "5"],
    ["rebuild", "all", "{store}", "--yes"],
    ["rebuild", "consumequeue", "{store}", "--dry-run"],
], ids=["write", "rebuild", "rebuild-dry-run"])
def test_a_live_process_holding_the_store_is_refused_when_lock_is_gone(store_copy, command):
    store = store_copy("basic")
    (store / "abort").write_bytes(b"")              # the broker runs (or crashed)
    (store / "lock").unlink(missing_ok=True)        # ... and its lock file was deleted
    segment = sorted((store / "commitlog").iterdir())[0]
    argv = [a.format(store=store) for a in command]
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(segment)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        p = subprocess.run([sys.executable, "-m", "rmqtool", *argv], capture_output=True, text=True,
                           env=_env(), timeout=300)
        assert p.returncode == 3, p.stderr
        assert p.stderr.count("\n") == 1 and f"pid {holder.pid}," in p.stderr, p.stderr
        assert str(segment) in p.stderr and "python" in p.stderr, p.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    (store / "lock").unlink(missing_ok=True)
    p = subprocess.run([sys.executable, "-m", "rmqtool", *argv], capture_output=True, text=True,
                       env=_env(), timeout=300)
    assert p.returncode == 0, p.stderr                  # nobody holds it now: it proceeds


@pytest.mark.skipif(not IS_LINUX, reason="reads /proc/PID/fd")
def test_an_open_descriptor_counts_without_abort_nobody_and_our_own_children_never(store_copy):
    """``/proc/PID/fd`` counts as well as mappings; without ``abort`` nobody is asked; a
    descendant of the asking process (a pool worker) is never taken for a broker."""
    from rmqtool.io import liveness
    store = store_copy("basic")
    segment = sorted((store / "commitlog").iterdir())[0]
    flag = store.parent / "hold-while-this-exists"
    code = ("import os, sys, time\nf = open(sys.argv[1], 'rb')\nprint('holding', flush=True)\n"
            "while os.path.exists(sys.argv[2]): time.sleep(0.02)\n")

    def hold(orphan: bool):
        # an orphan (started in the background by a shell that then exits) is nobody's child here
        flag.write_bytes(b"")
        argv = (["/bin/sh", "-c", '"$0" -c "$1" "$2" "$3" &', sys.executable, code, str(segment), str(flag)]
                if orphan else [sys.executable, "-c", code, str(segment), str(flag)])
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "holding\n"
        if orphan:
            p.wait(timeout=60)                           # the shell is gone: the holder is init's
        return p

    child = hold(orphan=False)
    try:
        (store / "abort").write_bytes(b"")
        assert liveness.store_in_use(store) is None     # our own child
    finally:
        flag.unlink()
        child.wait(timeout=60)
    stranger = hold(orphan=True)
    try:
        owner = liveness.store_in_use(store)
        assert owner is not None and owner.holds == str(segment), owner
        assert owner.pid not in (os.getpid(), stranger.pid) and "python" in owner.command
        (store / "abort").unlink()
        assert liveness.store_in_use(store) is None     # no abort: a clean store nobody runs
    finally:
        flag.unlink()


if __name__ == "__main__":
    if sys.argv[1] == "kill-loop":
        print(json.dumps(_kill_loop(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
