"""Store files that are symlinks or FIFOs: read as the broker reads them, or refused (issue 33, B1/B2).

Each store file kind is replaced by a symbolic link to the same bytes moved elsewhere, or by a
FIFO, and every command that reads that kind is run on it as a subprocess with a timeout (a hang
fails the test instead of hanging pytest):

- through a link, the command gives the same answer as on the untouched store (the broker's
  ``File``/``RandomAccessFile`` follow the link), and says once on stderr that it read through
  it; a writer that would write through the link refuses (exit 3, naming it);
- a FIFO is refused with exit 3 naming it ("is a FIFO, not a regular file"); nothing blocks on it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, reference_store

#: a hang is a failure, not a slow test: every command here takes about a second on this store
TIMEOUT = int(os.environ.get("RMQTOOL_HANG_TIMEOUT", "120"))
LAST_SEGMENT = sorted(os.listdir(reference_store("basic") / "commitlog"))[-1]
FIRST_INDEX = sorted(os.listdir(reference_store("basic") / "index"))[0]
TOPICS_JSON = {"topicConfigTable": {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4,
                                                  "writeQueueNums": 4, "perm": 6}},
               "dataVersion": {"counter": 1, "timestamp": 1795263700000}}
OFFSETS_JSON = {"offsetTable": {"TopicTest@group": {"0": 10, "1": 12}}}

#: file kind -> its path inside the store
KINDS = {
    "commitlog-first": "commitlog/00000000000000000000",
    "commitlog-last": f"commitlog/{LAST_SEGMENT}",
    "consumequeue": "consumequeue/TopicTest/0/00000000000000000000",
    "index": f"index/{FIRST_INDEX}",
    "checkpoint": "checkpoint",
    "topics.json": "config/topics.json",
    "consumerOffset.json": "config/consumerOffset.json",
}

COMMANDS = ("info", "verify", "verify-deep", "rebuild-output", "rebuild-inplace", "query-queue",
            "query-key", "dump", "export", "stats", "report", "write")

#: which commands read which kind (the table of the issue)
READERS = {
    "commitlog-first": COMMANDS,
    "commitlog-last": COMMANDS,
    "consumequeue": ("info", "verify", "verify-deep", "rebuild-output", "rebuild-inplace", "query-queue",
                     "dump", "report", "write"),
    "index": ("info", "verify", "verify-deep", "rebuild-output", "rebuild-inplace", "query-key", "dump",
              "report", "write"),
    "checkpoint": ("info", "verify", "verify-deep", "dump", "report", "write"),
    "topics.json": ("info", "verify", "verify-deep", "rebuild-inplace", "query-key", "report", "write"),
    "consumerOffset.json": ("info", "verify", "verify-deep", "rebuild-inplace", "report", "write"),
}

#: through a link, these refuse (exit 3, naming the link) rather than write through it or replace it:
#: ``write`` never writes into a store holding a link; a ConsumeQueue rebuild never rebuilds a queue
#: holding a link (``io/install.refuse_linked_topics``, checked before the walk, --output or not), an
#: in-place index rebuild never replaces a linked index file (``refuse_links_in``)
LINK_REFUSED = {("write", kind) for kind in KINDS} | {("rebuild-inplace", "consumequeue"),
                                                      ("rebuild-output", "consumequeue"),
                                                      ("rebuild-inplace", "index")}

DUMP_WHAT = {"commitlog-first": "commitlog", "commitlog-last": "commitlog", "consumequeue": "consumequeue",
             "index": "index", "checkpoint": "checkpoint"}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["COLUMNS"] = "400"
    env.pop("RMQTOOL_TRACEBACK", None)
    return env


def rmq(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The CLI in a child process: a read that blocks fails the test at TIMEOUT."""
    try:
        return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], input=stdin,
                              capture_output=True, text=True, env=_env(), timeout=TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"rmqtool {' '.join(map(str, args))} hung (killed after {TIMEOUT} s): {exc}")


def make_store(where: Path) -> Path:
    """A copy of the basic reference store with the broker's config files added."""
    store = where / "store"
    shutil.copytree(reference_store("basic"), store)
    (store / "config").mkdir()
    (store / "config" / "topics.json").write_text(json.dumps(TOPICS_JSON, indent=2))
    (store / "config" / "consumerOffset.json").write_text(json.dumps(OFFSETS_JSON, indent=2))
    return store


def link(store: Path, rel: str) -> Path:
    """Move the file outside the store and put an absolute symlink to it in its place."""
    path = store / rel
    moved = store.parent / "elsewhere" / rel.replace("/", "_")
    moved.parent.mkdir(exist_ok=True)
    os.rename(path, moved)
    os.symlink(moved, path)
    return moved


def fifo(store: Path, rel: str) -> None:
    path = store / rel
    os.unlink(path)
    os.mkfifo(path)


def tree_digest(root: Path, only=None, store: Path | None = None) -> dict:
    """{relative path: sha256} of every regular file under root (links followed), or under its
    subdirectories ``only``; an IndexFile, named by the time it is made, by its place instead;
    ``store``'s path in the files' text as STORE."""
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if only is not None and rel_dir.parts[:1] and rel_dir.parts[0] not in only:
            continue
        digits = sorted(n for n in names if n.isdigit())
        for name in names:
            if only is not None and not rel_dir.parts:
                continue
            key = str(rel_dir / name)
            if rel_dir.name == "index" and name.isdigit():
                key = f"{rel_dir}/#{digits.index(name)}"
            data = (Path(dirpath) / name).read_bytes()
            if store is not None:
                data = data.replace(str(store).encode(), b"STORE")
            out[key] = hashlib.sha256(data).hexdigest()
    return out


def _drop_link_notes(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if "symbolic link" not in line and "symlink" not in line)


def _without_link_notes(value):
    """A JSON value with every string saying "symbolic link" left out of its lists."""
    if isinstance(value, dict):
        return {k: _without_link_notes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_link_notes(v) for v in value if not (isinstance(v, str) and "symbolic link" in v)]
    return value


def run(command: str, kind: str, store: Path, work: Path) -> tuple[subprocess.CompletedProcess, object]:
    """Run one command of the table; (the process, the answer to compare with the untouched store's)."""
    norm = (lambda text: _drop_link_notes(text.replace(str(store), "STORE")))
    if command == "info":
        res = rmq("info", store, "-f", "jsonl")
        answer = None
        if res.returncode == 0:
            info = json.loads(res.stdout.replace(str(store), "STORE").splitlines()[0])
            info.pop("symlinks")
            answer = _without_link_notes(info)
        return res, answer
    if command in ("verify", "verify-deep"):
        res = rmq("verify", store, "-f", "json", "--level", "deep" if command == "verify-deep" else "shallow")
        answer = None
        if res.returncode in (0, 1):
            found = json.loads(res.stdout.replace(str(store), "STORE"))["findings"]
            answer = sorted((f["severity"], f["check"], f["file"], f["offset"], f["message"]) for f in found
                            if f["check"] != "store.symlink" and "symbolic link" not in f["message"])
        return res, answer
    if command == "rebuild-output":
        out = work / "rebuilt"
        res = rmq("rebuild", "all", store, "--output", out, "--workers", 1)
        return res, tree_digest(out, store=store) if res.returncode == 0 else None
    if command == "rebuild-inplace":
        res = rmq("rebuild", "all", store, "--yes", "--workers", 1)
        answer = None
        if res.returncode == 0:
            answer = tree_digest(store, only=("consumequeue", "index"))
        return res, answer
    if command == "query-queue":
        res = rmq("query-queue", store, "TopicTest", "0", "--offset", "0", "-f", "jsonl")
        return res, norm(res.stdout)
    if command == "query-key":
        res = rmq("query-key", store, "key-0020", "-f", "jsonl")
        return res, norm(res.stdout)
    if command == "dump":
        res = rmq("dump", DUMP_WHAT[kind], store, "-f", "jsonl")
        return res, norm(res.stdout)
    if command == "export":
        out = work / "export"
        res = rmq("export", store, "--to", out, "-f", "jsonl")
        return res, tree_digest(out, store=store) if res.returncode == 0 else None
    if command == "stats":
        res = rmq("stats", store, "-f", "jsonl")
        return res, norm(res.stdout)
    if command == "report":
        res = rmq("report", store, "-o", work / "report.html", "--level", "shallow")
        return res, None
    if command == "write":
        rows = "".join(json.dumps({"topic": "TopicTest", "body": f"b{i}", "keys": f"w{i}",
                                   "store_timestamp": 1795263800000 + i}) + "\n" for i in range(3))
        res = rmq("write", store, "--from", "-", stdin=rows)
        answer = None
        if res.returncode == 0:
            answer = tree_digest(store, only=("commitlog", "consumequeue"))
        return res, answer
    raise AssertionError(command)


_BASELINE: dict = {}


def baseline(command: str, kind: str, tmp_path_factory) -> tuple[int, object]:
    """The command's exit code and answer on an untouched store (made once per command)."""
    key = (command, DUMP_WHAT.get(kind) if command == "dump" else None)
    if key not in _BASELINE:
        work = tmp_path_factory.mktemp("baseline")
        store = make_store(work)
        res, answer = run(command, kind, store, work)
        assert res.returncode in (0, 1), res.stderr
        _BASELINE[key] = (res.returncode, answer)
    return _BASELINE[key]


def _cases(mode: str):
    return [pytest.param(kind, command, id=f"{kind}-{command}")
            for kind, commands in READERS.items() for command in commands]


# --- the table -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,command", _cases("link"))
def test_a_linked_store_file_is_read_through_or_the_writer_refuses(tmp_path, tmp_path_factory, kind, command):
    store = make_store(tmp_path)
    rel = KINDS[kind]
    link(store, rel)
    res, answer = run(command, kind, store, tmp_path)
    if (command, kind) in LINK_REFUSED:
        assert res.returncode == 3, res.stderr
        assert str(store / rel) in res.stderr and "symlink" in res.stderr, res.stderr
        return
    code, expected = baseline(command, kind, tmp_path_factory)
    assert res.returncode == code, res.stderr
    assert answer == expected
    note = f"note: {store / rel} is a symbolic link to {os.path.realpath(store / rel)}"
    assert res.stderr.count(note) == 1, res.stderr                # read through it, and said so once


@pytest.mark.parametrize("kind,command", _cases("fifo"))
def test_a_fifo_store_file_is_refused_naming_it(tmp_path, kind, command):
    store = make_store(tmp_path)
    rel = KINDS[kind]
    fifo(store, rel)
    res, _ = run(command, kind, store, tmp_path)
    assert res.returncode == 3, (res.returncode, res.stdout[-2000:], res.stderr)
    assert f"{store / rel}: is a FIFO, not a regular file" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# --- the probe's reproductions, one by one -------------------------------------------------------------
def test_b1_a_rebuild_through_a_linked_first_segment_reads_every_record(tmp_path):
    store = make_store(tmp_path)
    moved = link(store, KINDS["commitlog-first"])
    res = rmq("rebuild", "all", store, "--yes", "--workers", 1)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("commitlog read [0, 3728338) (zero), 3000 records") == 2, res.stdout
    assert res.stderr.count(f"is a symbolic link to {moved}; read through it as the broker does") == 1
    units = rmq("query-queue", store, "TopicTest", "0", "--offset", "0", "-f", "jsonl")
    assert units.returncode == 0, units.stderr
    first = json.loads(units.stdout.splitlines()[0])
    assert (first["cq_queue_offset"], first["phy_offset"], first["topic"]) == (0, 19686, "TopicTest")


@pytest.mark.parametrize("kind", ["commitlog-first", "commitlog-last"])
@pytest.mark.parametrize("command", ["rebuild-inplace", "verify-deep"])
def test_b1_a_fifo_segment_is_never_skipped(tmp_path, kind, command):
    """Skipped, the first one made the log start 98304 bytes late; the last one dropped 74 records."""
    store = make_store(tmp_path)
    fifo(store, KINDS[kind])
    before = tree_digest(store, only=("consumequeue", "index"))
    res, _ = run(command, kind, store, tmp_path)
    assert res.returncode == 3 and f"{store / KINDS[kind]}: is a FIFO, not a regular file" in res.stderr, res.stderr
    assert tree_digest(store, only=("consumequeue", "index")) == before


@pytest.mark.parametrize("make,what", [
    (lambda p: os.symlink(p.parent / "nowhere", p), "a symbolic link to '{dir}/nowhere' that leads nowhere"),
    (lambda p: os.symlink("/dev/zero", p), "a symbolic link to a character device (/dev/zero)"),
    (lambda p: _socket_at(p), "a socket"),
], ids=["dangling-link", "link-to-device", "socket"])
def test_other_non_regular_segments_are_refused(tmp_path, make, what):
    store = make_store(tmp_path)
    path = store / KINDS["commitlog-first"]
    os.unlink(path)
    make(path)
    for args in (("info", store), ("rebuild", "all", store, "--yes"), ("verify", store)):
        res = rmq(*args)
        expected = f"{path}: is {what.format(dir=path.parent)}, not a regular file"
        assert res.returncode == 3 and expected in res.stderr, (args, res.stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_node_as_a_config_file_is_refused(tmp_path):
    store = make_store(tmp_path)
    path = store / KINDS["topics.json"]
    os.unlink(path)
    os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))          # /dev/zero's: reads never end
    res = rmq("info", store)
    assert res.returncode == 3 and f"{path}: is a character device, not a regular file" in res.stderr, res.stderr


def _socket_at(path: Path) -> None:
    """A socket file at ``path``: bound under a short directory (a socket's path is limited to
    about 108 bytes, and test directories under a test runner's workers are longer), then moved."""
    import socket
    import tempfile
    short = Path(tempfile.mkdtemp(prefix="rmq-sock-", dir="/tmp"))
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(short / "s"))
        s.close()                      # the socket file stays
        os.rename(short / "s", path)
    finally:
        short.rmdir()


def test_b2_a_refused_write_leaves_the_store_lock_free(tmp_path):
    """A write hung on a FIFO kept the store lock; refused, it releases it at once."""
    store = make_store(tmp_path)
    fifo(store, KINDS["topics.json"])
    res, _ = run("write", "topics.json", store, tmp_path)
    assert res.returncode == 3, res.stderr
    os.unlink(store / KINDS["topics.json"])
    (store / KINDS["topics.json"]).write_text(json.dumps(TOPICS_JSON))
    res, _ = run("write", "topics.json", store, tmp_path)
    assert res.returncode == 0, res.stderr


# --- a rebuild walk that never reaches a later segment's data --------------------------------------------
def test_a_rebuild_that_would_leave_out_a_later_segments_data_is_refused(tmp_path):
    store = make_store(tmp_path)
    later = store / "commitlog" / f"{int(LAST_SEGMENT) + 98304:020d}"
    with open(later, "wb") as fh:               # zeros: the broker's pre-allocated next file, not data
        fh.truncate(98304)
    res = rmq("rebuild", "all", store, "--output", tmp_path / "out", "--workers", 1)
    assert res.returncode == 0 and "3000 records" in res.stdout, res.stderr
    with open(later, "r+b") as fh:              # data past the valid end, holding no record
        fh.seek(1000)
        fh.write(b"\xff" * 64)
    before = tree_digest(store, only=("consumequeue", "index"))
    res = rmq("rebuild", "all", store, "--yes", "--workers", 1)
    assert res.returncode == 3, res.stderr
    assert f"error: {later}@1000: the CommitLog walk ends at offset 3728338" in res.stderr, res.stderr
    assert "--allow-truncate" in res.stderr
    assert tree_digest(store, only=("consumequeue", "index")) == before
    res = rmq("rebuild", "consumequeue", store, "--yes", "--workers", 1)
    assert res.returncode == 3 and f"{later}@1000" in res.stderr, res.stderr
    res = rmq("rebuild", "all", store, "--yes", "--workers", 1, "--allow-truncate")
    assert res.returncode == 0 and "3000 records" in res.stdout, res.stderr



def test_a_fifo_as_the_side_lock_file_never_hangs_naming_the_holder(tmp_path):
    """rmqtool's own side file beside a store, made a FIFO, is read without waiting: while another
    process holds the store's ``lock``, ``info`` names that process as a broker."""
    import fcntl
    from rmqtool.io import liveness
    store = make_store(tmp_path)
    os.mkfifo(liveness.side_path(store))
    with open(store / "lock", "a+b") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)   # the broker's lock: byte 0
        res = rmq("info", store, "-f", "json")
    assert res.returncode in (0, 1), res.stderr
    assert str(os.getpid()) in res.stdout, res.stdout
