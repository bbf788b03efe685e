"""`compare`'s epoch view: two controller-mode replicas as the broker's HA handshake sees them.

Each side's epochs end at the end of its compared log (its CommitLog max offset). The controller
elects the replica with the higher (last epoch, max offset) when nothing else decides; the other
follows it and truncates at the consistent point (``broker.epochs``), then copies the master's log
from there. The byte comparison says where the logs really stop agreeing: the epoch view agrees
with it when the slave keeps nothing past that offset.
"""
from __future__ import annotations

from dataclasses import asdict

from rmqtool.broker.epochs import consistent_point, election_rank, handshake_ranges
from rmqtool.io.controller import read_epochs


def _side(epochs, end: int) -> dict:
    ranges = handshake_ranges(epochs.entries, end) if epochs else []
    return {"epoch_file": epochs.used if epochs else None, "last_epoch": ranges[-1].epoch if ranges else -1,
            "max_offset": end, "ranges": [asdict(r) for r in ranges]}


def epoch_view(store_a, store_b, comparison) -> dict | None:
    """None when neither store has an epoch file (the report is then what it always was)."""
    ea, eb = read_epochs(store_a.root), read_epochs(store_b.root)
    if ea is None and eb is None:
        return None
    ends = [side.end_offset if side.end_offset is not None else store.commitlog.min_offset
            for side, store in ((comparison.a, store_a), (comparison.b, store_b))]
    view = {"a": _side(ea, ends[0]), "b": _side(eb, ends[1]), "last_agreed_epoch": None,
            "consistent_point": None, "master": None, "truncates": None, "bytes_agree_to": None,
            "agrees_with_bytes": None, "reason": ""}
    empty = [k for k in "ab" if not view[k]["ranges"]]
    if empty:
        view["reason"] = (f"{' and '.join(empty)} loads no epochs: as a slave the broker takes itself for a new "
                          "replica and does not truncate, so the epochs say nothing about where the logs differ")
        return view
    ra, rb = (handshake_ranges(e.entries, end) for e, end in ((ea, ends[0]), (eb, ends[1])))
    rank_a, rank_b = (election_rank(view[k]["last_epoch"], view[k]["max_offset"]) for k in "ab")
    master = "either" if rank_a == rank_b else ("a" if rank_a > rank_b else "b")
    epoch, point = consistent_point(rb, ra)          # symmetric: the same from either side
    view.update(master=master, last_agreed_epoch=epoch, consistent_point=point)
    if point < 0:
        view["reason"] = ("no epoch has the same start offset on both: there is no consistent point, and "
                          "the slave's handshake fails (it does not replicate)")
        return view
    view["truncates"] = {k: max(view[k]["max_offset"] - point, 0) for k in "ab"}
    agree_to = comparison.agreed_end
    if agree_to is None:                              # nothing agrees: from the first record on
        firsts = [s.first_past["phy_offset"] for s in (comparison.a, comparison.b) if s.first_past]
        agree_to = min(firsts) if firsts else min(ends)
    view["bytes_agree_to"] = agree_to
    view["agrees_with_bytes"] = point <= agree_to
    slaves = "ab" if master == "either" else ("b" if master == "a" else "a")
    drops = "; ".join(f"if {k} follows, it truncates {view['truncates'][k]} bytes" for k in slaves)
    lead = ("the replicas rank equal (last epoch, max offset): the controller's choice decides"
            if master == "either" else f"{master} ranks first (last epoch {view[master]['last_epoch']}, max offset "
            f"{view[master]['max_offset']}) and is the likely master")
    check = (f"the bytes agree to {agree_to}, so the slave keeps only what the master has"
             if view["agrees_with_bytes"] else
             f"but the bytes differ from {agree_to}: the slave would keep {point - agree_to} bytes the master "
             "does not have (a divergence inside one epoch: the epoch files do not show it)")
    view["reason"] = (f"{lead}; both have epoch {epoch} from the same offset, so the slave truncates at "
                      f"{point} ({drops}) and copies the master's log from there; {check}")
    return view
