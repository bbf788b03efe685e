"""A second process that changes store files under a reader (run as a script).

    python tests/fuzz/churn.py STORE PRISTINE STOP SEED [KINDS]

Until the file STOP exists, picks a commitlog, ConsumeQueue or index file of STORE (KINDS: comma list of
commitlog,consumequeue,index, or simplified for the article's three files) and truncates it,
extends it, replaces it (new inode, second half zeroed, as a recovery rewrite), deletes it,
or restores it from PRISTINE; the
modes a broker's recovery, retention and an in-progress copy produce. Zeros are only
written past a whole file or from a record boundary, so every record that parses is one
that was written: a reader showing anything else has mixed two states of a file. Prints
``started`` after its first action (a reader started after that line runs while files change) and
one line of action counts when done. Stdlib only.
"""
from __future__ import annotations

import os
import random
import struct
import sys
import time
from pathlib import Path

SUBDIRS = {"commitlog": "commitlog", "consumequeue": "consumequeue", "index": "index"}
#: the article's simplified store (kind "simplified"): three files in the store root
SIMPLIFIED = {"commitLog.txt": "simplified-commitlog", "consumerQueue.txt": "consumequeue", "index.txt": "index"}


def files_of(root: Path, kinds) -> list[Path]:
    out = []
    for kind in kinds:
        if kind == "simplified":
            out += [Path(name) for name in SIMPLIFIED if (root / name).is_file()]
            continue
        base = root / SUBDIRS[kind]
        out += sorted(p.relative_to(root) for p in base.rglob("*") if p.is_file())
    return out


def kind_of(rel: Path) -> str:
    return SIMPLIFIED.get(str(rel), rel.parts[0])


def boundaries(data: bytes, kind: str) -> list[int]:
    """Positions where zeroing leaves only whole records (commitlog) or units (ConsumeQueue)."""
    if kind == "consumequeue":
        return list(range(0, len(data) + 1, 20))
    if kind == "simplified-commitlog":        # records follow msgTotalLen (a big-endian long)
        out, pos = [0], 0
        while pos + 8 <= len(data):
            total = struct.unpack_from(">q", data, pos)[0]
            if total <= 0 or pos + total > len(data):
                break
            pos += total
            out.append(pos)
        return out
    if kind != "commitlog":
        return list(range(0, len(data) + 1))
    out, pos = [0], 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic not in (0xDAA320A7, 0xDAA320AB) or total <= 0:
            break
        pos += total
        out.append(pos)
    return out


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".churn")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def churn(store: Path, pristine: Path, stop: Path, seed: int, kinds) -> dict:
    rng = random.Random(seed)
    rel = files_of(pristine, kinds)
    counts = dict.fromkeys(("truncate", "extend", "replace", "delete", "restore"), 0)
    while not stop.exists():
        r = rng.choice(rel)
        path, orig = store / r, pristine / r
        action = rng.choice(tuple(counts))
        try:
            if action == "truncate":
                os.truncate(path, rng.randrange(0, max(path.stat().st_size, 1)))
            elif action == "extend":          # a preallocating copy: zeros past the whole file
                if path.stat().st_size >= orig.stat().st_size:
                    with open(path, "ab") as fh:
                        fh.write(bytes(rng.choice((1, 20, 4096))))
            elif action == "replace":         # a recovery rewrite: zeros from a record boundary on
                data = bytearray(orig.read_bytes())
                cut = rng.choice(boundaries(data, kind_of(r)))
                data[cut:] = bytes(len(data) - cut)
                _replace(path, bytes(data))
            elif action == "delete":
                path.unlink()
            else:
                _replace(path, orig.read_bytes())
        except FileNotFoundError:
            _replace(path, orig.read_bytes())
            action = "restore"
        counts[action] += 1
        if sum(counts.values()) == 1:
            print("started", flush=True)
        time.sleep(rng.random() * 0.01)
    return counts


if __name__ == "__main__":
    store, pristine, stop, seed = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    kinds = sys.argv[5].split(",") if len(sys.argv) > 5 else list(SUBDIRS)
    done = churn(store, pristine, stop, seed, kinds)
    print(" ".join(f"{k}={v}" for k, v in done.items()), flush=True)
