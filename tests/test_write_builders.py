"""`write` appends ConsumeQueues and BatchConsumeQueues through rebuild's builders
(``broker/cqbuild.CqBuilder``/``BcqBuilder``): the files a write leaves, new or appended to, are
what a rebuild of the written store makes; every write survives short writes (``pwrite_all``)."""
from __future__ import annotations

import os

from rmqtool.io.indexfile import IndexGeometry
from rmqtool.io.store import Store
from rmqtool.ops.rebuild import rebuild_all
from rmqtool.ops.writer import Geometry, write_rows
from test_engines import _tree

GEOMETRY = Geometry(commitlog_file_size=1 << 16, cq_file_size=800, hash_slots=61, index_entries=350,
                    bcq_file_size=46 * 8)


def _rows(n: int, first: int = 0) -> list:
    return [("r", {"topic": ("Plain", "Batchy")[i % 2], "body": f"body-{i}", "queue_id": i % 3,
                   "keys": f"k{i}"}) for i in range(first, first + n)]


def test_write_appends_queues_through_the_rebuild_builders(tmp_path, monkeypatch):
    from rmqtool.broker import cqbuild
    calls = []
    for cls in (cqbuild.CqBuilder, cqbuild.BcqBuilder):
        def spy(self, d, real=cls.add, name=cls.__name__):
            calls.append(name)
            return real(self, d)
        monkeypatch.setattr(cls, "add", spy)
    root = tmp_path / "store"
    write_rows(root, _rows(40), GEOMETRY, batch_cq_topics={"Batchy"})
    assert {"CqBuilder", "BcqBuilder"} <= set(calls)
    write_rows(root, _rows(60, 40), GEOMETRY, batch_cq_topics={"Batchy"})      # appended to existing queues
    cq, ix, bcq = rebuild_all(Store(root), IndexGeometry(61, 350), cq_file_size=800, bcq_file_size=46 * 8,
                              output=tmp_path / "out")
    assert bcq.units == 50 and cq.units == 50
    for tree in ("consumequeue", "batchconsumequeue"):
        assert _tree(tmp_path / "out" / tree) == _tree(root / tree), tree


def test_a_dledger_write_survives_short_writes(tmp_path, monkeypatch):
    """Every write of `write` goes through ``install.pwrite_all``: with pwrite writing at most 7
    bytes a call, the store is the same byte for byte."""
    rows = [("r", {"topic": "T", "body": f"b{i}", "keys": f"k{i}", "store_timestamp": 1_790_000_000_000 + i,
                   "born_timestamp": 1_790_000_000_000 + i}) for i in range(30)]
    write_rows(tmp_path / "whole", rows, GEOMETRY, generate_uniq_key=False, dledger_id="n0")
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: real(fd, bytes(memoryview(data)[:7]), pos))
    write_rows(tmp_path / "short", rows, GEOMETRY, generate_uniq_key=False, dledger_id="n0")
    monkeypatch.undo()
    def files(root):          # index files are named by their creation time
        t = _tree(root)
        return ({k: v for k, v in t.items() if not k.startswith("index/")},
                sorted(v for k, v in t.items() if k.startswith("index/")))
    assert files(tmp_path / "short") == files(tmp_path / "whole")
