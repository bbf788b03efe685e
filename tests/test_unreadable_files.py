"""A file the user cannot read is an error naming it (exit 2), never a partial answer (issue 20.4).

Run as a user to whom ``chmod 000`` applies: as root the test drops the capabilities that
override file permissions (``setpriv``), as any other user it runs as is."""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys

import pytest

from conftest import reference_store, run_cli

_DAC_CAPS = "-dac_override,-dac_read_search"


def _unprivileged_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: chmod 000 would not apply")
    prefix = [setpriv, f"--bounding-set={_DAC_CAPS}", f"--inh-caps={_DAC_CAPS}"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import rmqtool"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("setpriv cannot drop the permission-override capabilities here")
    return prefix


@pytest.fixture(scope="module")
def unreadable(tmp_path_factory):
    """A copy of the basic store with one middle CommitLog file made unreadable, and a record
    (its offsetMsgId, UNIQ_KEY and a key) that lives in that file."""
    root = tmp_path_factory.mktemp("unreadable") / "store"
    shutil.copytree(reference_store("basic"), root)
    rows = run_cli("dump", "commitlog", root, "-f", "jsonl").jsonl()
    files = sorted({r["file"] for r in rows})
    victim = files[len(files) // 2]
    row = next(r for r in rows if r["file"] == victim and r["kind"] == "MESSAGE"
               and r["properties"].get("KEYS") and r["properties"].get("UNIQ_KEY"))
    host, port = row["store_host"].rsplit(":", 1)
    offset_id = (socket.inet_aton(host) + struct.pack(">I", int(port))
                 + struct.pack(">q", row["phy_offset"])).hex().upper()
    os.chmod(victim, 0)
    yield root, victim, row, offset_id
    os.chmod(victim, 0o644)


def _run(prefix, *args):
    return subprocess.run([*prefix, sys.executable, "-m", "rmqtool", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("how", ["offset-id", "uniq-key", "queue", "queue-time", "key", "key-scan",
                                 "locate", "dump", "verify"])
def test_unreadable_commitlog_file_is_an_error(unreadable, how):
    root, victim, row, offset_id = unreadable
    prefix = _unprivileged_prefix()
    key = row["properties"]["KEYS"].split()[0]
    args = {
        "offset-id": ["query-id", root, offset_id],
        "uniq-key": ["query-id", root, row["properties"]["UNIQ_KEY"]],
        "queue": ["query-queue", root, row["topic"], row["queue_id"], "--offset",
                  max(row["queue_offset"] - 5, 0), "--count", 20],
        "queue-time": ["query-queue", root, row["topic"], row["queue_id"], "--time",
                       row["store_timestamp"]],
        "key": ["query-key", root, key],
        "key-scan": ["query-key", root, key, "--scan"],
        "locate": ["locate", root, row["phy_offset"]],
        "dump": ["dump", "commitlog", root, "-f", "jsonl"],
        "verify": ["verify", root],
    }[how]
    r = _run(prefix, *args)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    lines = [line for line in r.stderr.splitlines() if not line.startswith('{"error"')]    # -f json: its twin
    assert lines == [f"error: {victim}: cannot open: Permission denied"]


@pytest.mark.parametrize("which", [0, -1], ids=["first", "last"])
def test_unreadable_index_file_is_scanned_around(tmp_path, which):
    """An index file that cannot be read is named in a note and its CommitLog range is
    scanned: the answer is the whole one, as from a readable store."""
    prefix = _unprivileged_prefix()
    root = tmp_path / "store"
    shutil.copytree(reference_store("basic"), root)
    key = next(r["properties"]["KEYS"].split()[0]
               for r in run_cli("dump", "commitlog", root, "-f", "jsonl").jsonl()
               if r["properties"].get("KEYS"))
    whole = _run(prefix, "query-key", root, key, "-f", "json")
    victim = sorted((root / "index").iterdir())[which]
    os.chmod(victim, 0)
    try:
        r = _run(prefix, "query-key", root, key, "-f", "json")
    finally:
        os.chmod(victim, 0o644)
    assert r.returncode == whole.returncode == 0, r.stderr
    strip = lambda out: [(h["phy_offset"], h["matched_by"]) for h in json.loads(out)]
    assert strip(r.stdout) == strip(whole.stdout)
    note = next(line for line in r.stderr.splitlines() if str(victim) in line)
    assert "Permission denied" in note
