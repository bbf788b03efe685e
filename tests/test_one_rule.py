"""Issue 13: each broker rule in one place. verify, dump/export rows and the Arrow form take
tagsCode and index keys from the functions dispatch uses, and agree with upstream's answers
for every record of every reference store."""
from __future__ import annotations

import numpy as np
import pytest

from formats import commitlog as cl
from conftest import STORE_NAMES, load_answers, reference_store
from rmqtool.broker import dispatch
from rmqtool.broker.dispatch import dispatch_batch, goes_to_consumequeue, record_index_keys, record_tags_codes
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.output.schema import dispatch_tags_code
from rmqtool.io.store import Store
from rmqtool.ops.verify import records as verify_records


def _batches(name):
    return [b for b in walk_store(Store(reference_store(name))) if isinstance(b, RecordBatch) and len(b)]


def test_verify_uses_the_dispatchers_functions():
    assert verify_records.record_tags_codes is dispatch.record_tags_codes
    assert verify_records.record_index_keys is dispatch.record_index_keys
    for copy in ("span_hash", "split_spans", "tags_codes", "key_hashes"):
        assert not hasattr(verify_records, copy), f"verify keeps its own {copy}"


@pytest.mark.parametrize("name", STORE_NAMES)
def test_tags_code_and_keys_agree_everywhere(name):
    want = {m["phyOffset"]: m for m in load_answers(name)["messages"]}
    topics = verify_records.TopicTable()
    for b in _batches(name):
        d = dispatch_batch(b)
        cols = verify_records.batch_columns(b, topics, deep=True)
        tags = record_tags_codes(b)
        in_cq = np.flatnonzero(goes_to_consumequeue(b.sys_flag & cl.TRANSACTION_MASK)[:d.records])
        assert tags[in_cq].tolist() == d.cq_tags_code.tolist() == cols["tags_code"][in_cq].tolist()
        rec, keys = record_index_keys(b)
        assert (rec.tolist(), keys.tolist()) == (d.key_record.tolist(), d.key_hash.tolist())
        assert sorted(zip(cols["key_rec"].tolist(), cols["key_hash"].tolist())) == sorted(zip(rec.tolist(),
                                                                                              keys.tolist()))
        for i in in_cq.tolist():            # the row form (dump, export) and upstream's answer
            phy = int(b.phy_offset[i])
            row = dispatch_tags_code(b.topic(i), b.properties(i), int(b.store_timestamp[i]))
            assert row == int(tags[i])
            if phy in want and want[phy].get("tagsCode") is not None:
                assert int(tags[i]) == want[phy]["tagsCode"]
