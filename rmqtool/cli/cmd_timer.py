"""`rmqtool query-timer STORE`: the timer messages still waiting (docs/format-timer.md)."""
from __future__ import annotations

from typing import Optional

import typer

from rmqtool.cli.common import FormatOpt, app, emit, open_store, parse_time
from rmqtool.cli.options import Format, option


@app.command("query-timer")
def query_timer_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root of a broker with timerWheelEnable"),
    due_before: Optional[str] = typer.Option(None, "--due-before", metavar="TIME",
                                             help="only timers due before this time (epoch ms or ISO-8601)"),
    topic: Optional[str] = option("topic", help="only timers for this real topic"),
    key: Optional[str] = typer.Option(None, "--key", metavar="KEY",
                                      help="only the timer whose UNIQ_KEY or a KEYS token is this"),
    precision_ms: Optional[int] = option("timer_precision_ms",
                                         help="timerPrecisionMs (default: found from the wheel, else 1000)"),
    fmt: Format = FormatOpt,
):
    """Every timer message still pending: its wheel slot, due time, roll count and the CommitLog record
    that carries it (cancelled ones left out). Exit 0 when some are pending, 1 when none."""
    from rmqtool.ops.timer import pending_timers, timer_store
    s = open_store(store)
    rows = list(pending_timers(s, timer_store(s, precision_ms), parse_time(due_before, "--due-before"), topic, key))
    emit(rows, fmt, ["due_ms", "slot_index", "real_topic", "real_queue_id", "uniq_key", "keys", "roll",
                     "roll_times", "phy_offset", "timer_log_pos"] if fmt == "table" else None)
    raise typer.Exit(0 if rows else 1)
