"""Owners and modes of what rmqtool writes into a store (docs/limits.md, "Owners and modes").

Run as root on a store owned by ``nobody`` (its root read-only 0555, some files and directories
with modes of their own), as an SRE runs rmqtool on a broker's store: after ``rebuild all``,
``write``, ``rebuild timerwheel`` and ``convert``, every file and directory in and beside the
store (backups included) is owned by ``nobody``; an entry that existed before keeps its mode
(a backup holds the originals: theirs), a new one gets the mode the rule gives.
"""
from __future__ import annotations

import os
import pwd
import re
import stat
from pathlib import Path

import pytest

from tests.conftest import dledger_copy, reference_store, run_cli, timer_copy

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a store to another user (chown) needs root")

_BACKUP = re.compile(r"^(.*)\.backup-\d{8}T\d{6}\d*Z$")
_BUILD = re.compile(r"^(.*)\.rmqtool-tmp-\d{8}T\d{6}\d*Z$")


def _nobody() -> tuple[int, int]:
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def _empty_home(tmp_path, mode: int) -> Path:
    """An empty directory of ``mode`` that nobody owns, as a user's home a store is written into."""
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, mode)
    os.chown(home, *_nobody())
    return home


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def _entries(top: Path):
    """Every file, directory and link below ``top`` (relative paths), ``top`` itself as "."."""
    yield "."
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            yield os.path.relpath(os.path.join(dirpath, name), top)


def _give_away(home: Path) -> None:
    """chown -R nobody, then modes an SRE might have: a read-only store root, a private
    checkpoint, a group-only commitlog directory, one CommitLog file, one queue, one IndexFile
    with modes of their own."""
    uid, gid = _nobody()
    for rel in _entries(home):
        os.chown(home / rel, uid, gid, follow_symlinks=False)
    store = home / "store"
    os.chmod(store / "checkpoint", 0o640)
    os.chmod(store / "commitlog", 0o750)
    logs = sorted((store / "commitlog").iterdir())
    os.chmod(logs[-1], 0o660)
    topic = sorted(p for p in (store / "consumequeue").iterdir())[0]
    queue = sorted(topic.iterdir())[0]
    os.chmod(queue, 0o770)
    for f in queue.iterdir():
        os.chmod(f, 0o600)
    if (store / "index").is_dir():
        os.chmod(store / "index", 0o750)
        index = sorted((store / "index").iterdir())
        os.chmod(index[-1], 0o640)             # the last one: new IndexFiles take its mode
    os.chmod(store, 0o555)                     # last: root writes into it anyway


def _snapshot(home: Path) -> dict[str, os.stat_result]:
    return {rel: os.lstat(home / rel) for rel in _entries(home)}


def _original(rel: str) -> str:
    """The path an entry of a dated backup had before it was replaced (of a build: the path it
    replaces)."""
    parts = rel.split(os.sep)
    for i, part in enumerate(parts):
        m = _BACKUP.match(part) or _BUILD.match(part)
        if m:
            parts[i] = m.group(1)
            break
    return os.sep.join(parts)


def _kind(name: str, is_dir: bool):
    return "dir" if is_dir else (("digits", len(name)) if name.isdigit() else None)


def _new_mode(home: Path, rel: str, is_dir: bool, before: dict) -> int:
    """The documented mode of a new entry: that of the last sibling of its kind before the run,
    else the umask default within what its directory grants (owner rw-/rwx kept)."""
    parent, name = os.path.split(rel)
    parent = parent or "."
    kind = _kind(name, is_dir)
    if kind is not None:
        siblings = sorted(r for r, st in before.items()
                          if r != "." and (os.path.dirname(r) or ".") == parent and ".backup-" not in os.path.basename(r)
                          and ".rmqtool-" not in os.path.basename(r)
                          and (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode))
                          and _kind(os.path.basename(r), stat.S_ISDIR(st.st_mode)) == kind)
        if siblings:
            return stat.S_IMODE(before[siblings[-1]].st_mode)
    pmode = stat.S_IMODE(os.stat(home / parent).st_mode)
    if is_dir:
        return (0o777 & ~_umask() & (pmode | 0o700)) | (pmode & stat.S_ISGID)
    return 0o666 & ~_umask() & (pmode | 0o600)


def _check(home: Path, before: dict) -> list[str]:
    """What is wrong with the owners and modes under ``home`` after a run (empty: nothing)."""
    uid, gid = _nobody()
    wrong = []
    for rel in _entries(home):
        st = os.lstat(home / rel)
        what = f"{rel}: {st.st_uid}:{st.st_gid} {stat.S_IMODE(st.st_mode):04o}"
        if (st.st_uid, st.st_gid) != (uid, gid):
            wrong.append(f"{what}, not owned by nobody ({uid}:{gid})")
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        old = before.get(rel) or before.get(_original(rel))
        is_dir = stat.S_ISDIR(st.st_mode)
        if old is not None and stat.S_ISDIR(old.st_mode) == is_dir:
            want = stat.S_IMODE(old.st_mode)
        else:
            want = _new_mode(home, rel, is_dir, before)
        if stat.S_IMODE(st.st_mode) != want:
            wrong.append(f"{what}, mode not {want:04o}")
    return wrong


def _home(tmp_path, name: str = "basic") -> Path:
    """A broker user's home: ``home/store``, a copy of a reference store, all nobody's."""
    import shutil
    home = tmp_path / "home"
    home.mkdir()
    shutil.copytree(reference_store(name), home / "store")
    _give_away(home)
    return home


@pytest.fixture
def home(tmp_path) -> Path:
    return _home(tmp_path)


@needs_root
def test_rebuild_all_in_place_keeps_owners_and_modes(home):
    before = _snapshot(home)
    r = run_cli("rebuild", "all", home / "store", "--yes")
    assert r.code == 0, r.err
    assert any(_BACKUP.match(p.name) for p in (home / "store").iterdir())      # the originals were kept
    assert _check(home, before) == []
    assert stat.S_IMODE(os.stat(home / "store").st_mode) == 0o555


@needs_root
@pytest.mark.parametrize("command", ["all", "batchconsumequeue"])
def test_light_queues_and_batch_queues_keep_owners_and_modes(tmp_path, command):
    """A 5.x store with light queues (``%LMQ%`` directories) and BatchConsumeQueues."""
    home = _home(tmp_path, "propcrc-lmq-batchcq")
    os.chmod(home / "store" / "batchconsumequeue", 0o750)
    before = _snapshot(home)
    r = run_cli("rebuild", command, home / "store", "--yes")
    assert r.code == 0, r.err
    assert _check(home, before) == []


@needs_root
def test_rebuild_one_topic_keeps_owners_and_modes(home):
    """A partial rebuild: the other topics' files are carried into the new tree."""
    topic = sorted((home / "store" / "consumequeue").iterdir())[0].name
    before = _snapshot(home)
    r = run_cli("rebuild", "consumequeue", home / "store", "--topic", topic, "--yes")
    assert r.code == 0, r.err
    assert _check(home, before) == []


@needs_root
def test_write_keeps_owners_and_modes_and_the_read_only_root(home):
    before = _snapshot(home)
    r = run_cli("write", home / "store", "--synthetic", "100")
    assert r.code == 0, r.err
    assert any(_BACKUP.match(p.name) for p in home.iterdir())                 # the old root, kept beside it
    assert _check(home, before) == []
    assert stat.S_IMODE(os.stat(home / "store").st_mode) == 0o555


@needs_root
def test_rebuild_then_write_then_rebuild(home):
    """In sequence, as an incident goes: each run finds what the one before left (backups
    inside the store included) and leaves it owned and moded as it was."""
    for args in (("rebuild", "all", home / "store", "--yes"),
                 ("write", home / "store", "--synthetic", "300"),
                 ("rebuild", "index", home / "store", "--yes")):
        before = _snapshot(home)
        r = run_cli(*args)
        assert r.code == 0, r.err
        assert _check(home, before) == [], args[:2]


@needs_root
def test_a_lock_file_rmqtool_creates_is_the_store_owners(home):
    os.unlink(home / "store" / "lock")
    before = _snapshot(home)
    r = run_cli("rebuild", "index", home / "store", "--yes")
    assert r.code == 0, r.err
    assert (home / "store" / "lock").is_file()
    assert _check(home, before) == []
    assert stat.S_IMODE(os.stat(home / "store" / "lock").st_mode) == 0o666 & ~_umask() & 0o755


@needs_root
def test_rebuild_timerwheel_keeps_owner_and_mode(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    store = timer_copy(home / "store")
    _give_away(home)
    os.chmod(store / "timerwheel", 0o640)
    before = _snapshot(home)
    r = run_cli("rebuild", "timerwheel", store, "--yes")
    assert r.code == 0, r.err
    assert any(_BACKUP.match(p.name) for p in store.iterdir())
    assert _check(home, before) == []
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o555


@needs_root
def test_convert_into_a_users_directory_gives_the_new_store_to_that_user(tmp_path):
    """convert writes a new store (never into an existing one): made in a directory nobody
    owns, the whole new store is nobody's, with the modes a new entry gets there."""
    source = dledger_copy(tmp_path / "dledger")
    home = _empty_home(tmp_path, 0o750)
    before = _snapshot(home)
    r = run_cli("convert", source, "--output", home / "store")
    assert r.code == 0, r.err
    assert (home / "store" / "commitlog").is_dir()
    assert _check(home, before) == []
    assert stat.S_IMODE(os.stat(home / "store").st_mode) == 0o777 & ~_umask() & 0o750


@needs_root
def test_write_a_new_store_in_a_users_directory(tmp_path):
    home = _empty_home(tmp_path, 0o755)
    before = _snapshot(home)
    r = run_cli("write", home / "store", "--synthetic", "50")
    assert r.code == 0, r.err
    assert _check(home, before) == []


@needs_root
@pytest.mark.parametrize("step", ["journal", "exchanged"])
def test_a_crashed_install_leaves_its_leftovers_to_the_owner(home, step):
    """A rebuild killed mid-install leaves a journal and a build (or the originals) in the store:
    they are nobody's already; the next run finishes the install and everything is nobody's."""
    from tests.conftest import ROOT, run_cli_process
    before = _snapshot(home)
    env = dict(os.environ, RMQTOOL_CRASH_AT=step, PYTHONPATH=str(ROOT))
    r = run_cli_process("rebuild", "consumequeue", home / "store", "--yes", env=env, cwd=ROOT)
    assert r.returncode == -9, r.stderr
    left = [p.name for p in (home / "store").iterdir() if p.name.startswith(".consumequeue") or "rmqtool-tmp" in p.name]
    assert left                                                     # the journal (and the build) are there
    assert _check(home, before) == []
    r2 = run_cli("rebuild", "consumequeue", home / "store", "--yes")
    assert r2.code == 0, r2.err
    assert _check(home, before) == []


def test_a_chown_the_user_may_not_make_is_left_out(tmp_path, monkeypatch):
    """Not root (or a filesystem without owners): the owner stays the running user, the mode
    is still given, nothing fails."""
    from rmqtool.io import ownership
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    os.chmod(old, 0o600)
    os.chmod(new, 0o644)
    st = os.stat(new)
    calls = []

    def refuse(*args, **kw):
        calls.append(args)
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "chown", refuse)
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: _as_other(os.stat(p, follow_symlinks=False))
                        if os.fspath(p) == os.fspath(old) else os.stat(p, follow_symlinks=False))
    ownership.inherit(new, like=old)
    assert calls                                                      # a chown was tried, and refused
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o600
    assert (os.stat(new).st_uid, os.stat(new).st_gid) == (st.st_uid, st.st_gid)


def _as_other(st: os.stat_result) -> os.stat_result:
    """``st`` as if another user owned the file."""
    fields = list(st)
    fields[4], fields[5] = st.st_uid + 1, st.st_gid + 1
    return os.stat_result(fields)


@needs_root
def test_files_and_directories_made_in_a_store_are_the_owners_from_their_creation(tmp_path):
    """``ownership.open_file`` / ``makedirs`` (what ``write`` creates files and directories with):
    a new file is its directory's owner's, with the mode of the last file of its kind there, on
    the descriptor before anything is written; an existing file is left alone; each directory
    ``makedirs`` creates is its parent's owner's, with its last sibling directory's mode."""
    from rmqtool.io import ownership
    uid, gid = _nobody()
    d = tmp_path / "commitlog"
    d.mkdir()
    (d / "00000000000000000000").write_bytes(b"a")
    (d / "00000000001073741824").write_bytes(b"b")
    (tmp_path / "sibling").mkdir()
    os.chmod(d / "00000000000000000000", 0o600)
    os.chmod(d / "00000000001073741824", 0o640)        # the last one: the model
    os.chmod(tmp_path / "sibling", 0o710)
    for p in (tmp_path, d, *d.iterdir(), tmp_path / "sibling"):
        os.chown(p, uid, gid)
    fd = ownership.open_file(d / "00000000002147483648", os.O_RDWR)
    try:
        st = os.fstat(fd)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, gid, 0o640)
    finally:
        os.close(fd)
    os.chmod(d / "00000000000000000000", 0o604)
    os.close(ownership.open_file(d / "00000000000000000000", os.O_RDWR))     # existing: untouched
    assert stat.S_IMODE(os.stat(d / "00000000000000000000").st_mode) == 0o604
    ownership.makedirs(tmp_path / "queue" / "T" / "0")
    st = os.stat(tmp_path / "queue")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, gid, 0o710)   # its sibling's
    for sub in (tmp_path / "queue" / "T", tmp_path / "queue" / "T" / "0"):
        st = os.stat(sub)
        assert (st.st_uid, st.st_gid) == (uid, gid)
        assert stat.S_IMODE(st.st_mode) == 0o777 & ~_umask() & (0o710 | 0o700)      # no sibling: its parent's


@needs_root
def test_the_article_layout_written_into_a_users_directory_is_that_users(tmp_path):
    home = _empty_home(tmp_path, 0o750)
    before = _snapshot(home)
    r = run_cli("write", home / "article", "--layout", "simplified", "--synthetic", "5")
    assert r.code == 0, r.err
    assert len(list((home / "article").iterdir())) == 3
    assert _check(home, before) == []
