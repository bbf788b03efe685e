"""Golden outputs: what every command prints on every reference store, captured from the
installed command, so that moving code around (issue 13) provably changes nothing users see.

``python tests/golden/capture.py [--tree DIR]`` writes ``tests/golden/<store>/<case>.out``
(the command's stdout, exit code and stderr, normalised); ``tests/test_golden.py`` runs the
same cases on the current code and compares. Outputs above ``INLINE_LIMIT`` bytes are kept as
their SHA-256, line count and first lines (the fixtures stay small).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
STORES = ("basic", "mixed", "crashed", "propcrc-lmq-batchcq", "rocksdb-cq", "timer", "dledger")
INLINE_LIMIT = 24 << 10

#: JSON fields that differ from run to run (times, backup names)
VOLATILE = {"seconds", "messages_per_second", "backup"}
_INDEX_NAME = re.compile(r"\b20\d{15}\b")          # index file names are creation times
_ROCKSDB_VIEW = re.compile(r"/tmp/rmqtool-rocksdb-cq-\w+")  # a RocksDB CQ's file view (a temporary directory)


def _pick(answers: dict) -> dict:
    """Keys, ids and offsets to query, chosen from upstream's answers (stable across runs)."""
    msgs = [m for m in answers["messages"] if m.get("keys") and m.get("uniqKey")]
    m = msgs[len(msgs) // 3]
    q = next(x for x in answers["messages"] if x.get("inConsumeQueue"))
    topic, qid, qoff = q["inConsumeQueue"].rsplit("/", 2)
    return {"key": m["keys"].split()[0], "uniq": m["uniqKey"], "offset_id": m["offsetMsgId"],
            "phy": m["phyOffset"], "inside": m["phyOffset"] + 7, "topic": topic, "queue": qid,
            "qoff": qoff, "time": m["storeTimestamp"]}


def cases(store: str, answers: dict) -> dict[str, list[str]]:
    """Case name -> argv (``{store}`` and ``{tmp}`` are filled in by the runner)."""
    p = _pick(answers)
    s = "{store}"
    return {
        "info": ["info", s],
        "info-json": ["info", s, "-f", "json"],
        "info-count": ["info", s, "--count"],
        "dump-commitlog-head": ["dump", "commitlog", s, "--limit", "25"],
        "dump-commitlog-jsonl": ["dump", "commitlog", s, "-f", "jsonl"],
        "dump-commitlog-text": ["dump", "commitlog", s, "-f", "jsonl", "--body", "text"],
        "dump-consumequeue": ["dump", "consumequeue", s, "-f", "jsonl"],
        "dump-index": ["dump", "index", s, "-f", "jsonl"],
        "dump-checkpoint": ["dump", "checkpoint", s + "/checkpoint", "-f", "json"],
        "locate-offset": ["locate", s, str(p["inside"])],
        "locate-queue": ["locate", s, "--topic", p["topic"], "--queue", p["queue"], "--queue-offset", p["qoff"]],
        "verify-shallow": ["verify", s, "-f", "json"],
        "verify-deep": ["verify", s, "--level", "deep", "-f", "json"],
        "verify-deep-table": ["verify", s, "--level", "deep"],
        "query-key": ["query-key", s, p["key"], "-f", "json"],
        "query-key-scan": ["query-key", s, p["key"], "--scan", "-f", "json"],
        "query-key-raw": ["query-key", s, p["key"], "--raw", "-f", "json"],
        "query-id-offset": ["query-id", s, p["offset_id"], "-f", "json"],
        "query-id-uniq": ["query-id", s, p["uniq"], "-f", "json"],
        "query-queue": ["query-queue", s, p["topic"], p["queue"], "--offset", "0", "--count", "20", "-f", "json"],
        "query-queue-time": ["query-queue", s, p["topic"], p["queue"], "--time", str(p["time"])],
        "rebuild-all-dry": ["rebuild", "all", s, "--dry-run", "-f", "json", "--allow-truncate"],
        "rebuild-consumequeue-out": ["rebuild", "consumequeue", s, "--output", "{tmp}/cq", "-f", "json",
                                     "--allow-truncate", "--tree", "{tmp}/cq"],
        "rebuild-index-out": ["rebuild", "index", s, "--output", "{tmp}/ix", "-f", "json",
                              "--allow-truncate", "--tree", "{tmp}/ix"],
        "rebuild-all-out": ["rebuild", "all", s, "--output", "{tmp}/all", "-f", "json",
                            "--allow-truncate", "--tree", "{tmp}/all"],
        "verify-deep-jobs": ["verify", s, "--level", "deep", "-f", "json", "--jobs", "2"],
        "stats": ["stats", s, "-f", "json"],
        "stats-jobs": ["stats", s, "-f", "json", "--jobs", "2"],
        "export-jsonl": ["export", s, "--to", "{tmp}/ex", "--format", "jsonl", "--tree", "{tmp}/ex"],
        "query-key-scan-spark": ["query-key", s, p["key"], "--scan", "--engine", "spark", "-f", "json"],
    }


def materialise(reference: Path, name: str, dest: Path) -> Path:
    """The reference store ``name`` copied to ``dest`` (a ``.tar.gz`` one unpacked, holes kept)."""
    import shutil
    import tarfile
    src = reference / name
    if src.is_dir():
        shutil.copytree(src, dest)
        return dest
    unpack = dest.parent / (dest.name + ".unpack")
    with tarfile.open(reference / f"{name}.tar.gz") as tar:
        tar.extractall(unpack, filter="data")
    (unpack / name).rename(dest)
    unpack.rmdir()
    return dest


def _tree_digest(path: Path, store: Path, tmp: Path) -> str:
    """File name (index names normalised) -> sha1 of content (the store's and the run's paths in
    it replaced, as in the outputs), one line each, sorted by content for the index (its names
    are creation times)."""
    rows = []
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = _INDEX_NAME.sub("{index-name}", str(f.relative_to(path)))
        data = (f.read_bytes().replace(str(tmp).encode(), b"{tmp}")
                .replace(str(store).encode(), b"{store}"))
        rows.append(f"{rel} {hashlib.sha1(data).hexdigest()}")
    return "\n".join(sorted(rows)) + "\n"


def _scrub(obj):
    if isinstance(obj, dict):
        return {k: ("<volatile>" if k in VOLATILE else _scrub(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v) for v in obj]
    if isinstance(obj, str):
        return _INDEX_NAME.sub("{index-name}", obj)
    return obj


def normalise(text: str, store: Path, tmp: Path) -> str:
    """Paths and volatile values replaced. JSON is parsed before index names are masked, so a
    float whose digits look like a creation time (0.20000123456789012) cannot break the parse."""
    text = text.replace(str(tmp), "{tmp}").replace(str(store), "{store}")
    text = _ROCKSDB_VIEW.sub("{rocksdb-view}", text)
    try:
        data = json.loads(text)
    except ValueError:
        text = _INDEX_NAME.sub("{index-name}", text)
        return re.sub(r"\d+(\.\d+)? s\b", "<seconds> s", text)
    return json.dumps(_scrub(data), indent=2, ensure_ascii=False) + "\n"


def run_case(argv: list[str], store: Path, tmp: Path, tree: Path) -> str:
    """The case's normalised record: exit code, stderr, stdout (or its digest)."""
    args = [a.replace("{store}", str(store)).replace("{tmp}", str(tmp)) for a in argv]
    digest_dir = None
    if "--tree" in args:
        i = args.index("--tree")
        digest_dir = Path(args[i + 1])
        del args[i:i + 2]
    env = dict(os.environ, COLUMNS="200", TZ="UTC", RMQTOOL_TRACEBACK="")
    env.pop("RMQTOOL_TRACEBACK")
    proc = subprocess.run([sys.executable, "-m", "rmqtool", *args], capture_output=True, text=True,
                          cwd=tree, env=env, timeout=600)
    out = normalise(proc.stdout, store, tmp)
    stderr = proc.stderr
    if "spark" in args:
        # the JVM's own log lines (times, host names) are not rmqtool's output
        stderr = "".join(line for line in stderr.splitlines(keepends=True)
                         if line.startswith(("error", "warning", "note")))
    err = normalise(stderr, store, tmp)
    if len(out) > INLINE_LIMIT:
        lines = out.splitlines()
        out = (f"<sha256 {hashlib.sha256(out.encode()).hexdigest()} lines {len(lines)}>\n"
               + "\n".join(lines[:3]) + "\n")
    record = f"exit {proc.returncode}\n--- stderr\n{err}--- stdout\n{out}"
    if digest_dir is not None:
        record += "--- files\n" + (_tree_digest(digest_dir, store, tmp) if digest_dir.exists() else "(none)\n")
    return record
