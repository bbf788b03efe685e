"""`report`: one self-contained HTML page for an incident ticket (issues 18 and 36).

``model`` gathers what each store's section says (from ``ops/info``, ``ops/verify`` and ``ops/stats``),
``charts`` draws its charts as small inline SVG, and the page is the Jinja2 template
``templates/report.html.j2`` (autoescaping on: topics, keys and paths come from the store and are
untrusted). The page needs no network and no script to be read (its Content-Security-Policy forbids
both), keeps its charts when printed, and follows the reader's light or dark colour scheme.
"""
from __future__ import annotations

import datetime as dt
import shlex
import socket
import sys
from pathlib import Path

from rmqtool.io.topicpath import printable
from rmqtool.wording import format_time, human_size
from rmqtool.ops.report import charts
from rmqtool.ops.report.model import SEVERITY, STATES, consumer_groups_section, store_model

__all__ = ["build_report", "write_report", "render", "consumer_groups_section", "page_meta"]


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    env = Environment(loader=PackageLoader("rmqtool.ops.report", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(iso=format_time, num=_num, size=human_size, middle=charts.shorten)
    env.globals.update(charts=charts)
    return env


def _num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:,.3f}".rstrip("0").rstrip(".")


def page_meta(command: list[str] | None = None, now: dt.datetime | None = None, version: str | None = None) -> dict:
    """What the page says about its own making: when (UTC and local), by which rmqtool (``version``: the
    CLI passes its own; otherwise the installed distribution's) and kernel path, on which host, from
    which command line."""
    from rmqtool.kernels import native
    if version is None:
        from importlib.metadata import PackageNotFoundError, version as installed
        try:
            version = installed("rmqtool")
        except PackageNotFoundError:
            version = "(not installed)"
    now = now or dt.datetime.now(dt.timezone.utc)
    local = now.astimezone()
    argv = command if command is not None else ["rmqtool", *sys.argv[1:]]
    return {"utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "local": local.strftime("%Y-%m-%d %H:%M:%S %Z (UTC%z)"),
            "version": version, "kernel": native.path, "host": socket.gethostname(),
            "python": sys.version.split()[0], "command": printable(shlex.join(str(a) for a in argv))}


def render(models: list[dict], meta: dict) -> str:
    """The page of one store's model, or of a fleet's (a summary row per store, then each store)."""
    for i, m in enumerate(models):
        m["anchor"] = f"store-{i + 1}" if len(models) > 1 else "store"
    worst = max(models, key=lambda m: SEVERITY[m["state"]]) if models else None
    counts = {k: sum(1 for m in models if m["state"] == k) for k in STATES}
    return _environment().get_template("report.html.j2").render(models=models, meta=meta, worst=worst,
                                                                   counts=counts, states=STATES).lstrip()


def build_report(stores, level: str = "deep", engine=None, split_size: int | None = None, progress=None,
                 command: list[str] | None = None, consumer_groups: dict | None = None,
                 version: str | None = None) -> str:
    """The page's HTML for ``stores`` (``[(name, Store)]``; a fleet when more than one); ``engine``
    (None: this process) runs each store's verify and stats walks; ``progress(done, total)``:
    CommitLog bytes of all the walks; ``consumer_groups``: store name -> what ``ops/consumers`` read."""
    stores = list(stores)
    sizes = [sum(seg.size for seg in s.commitlog.files) for _, s in stores]
    grand = 2 * sum(sizes)
    models = []
    for i, (name, store) in enumerate(stores):
        before = 2 * sum(sizes[:i])
        part = None if progress is None else (lambda done, total, b=before: progress(b + done, grand))
        models.append(store_model(store, name, level, engine, split_size, part,
                                  (consumer_groups or {}).get(name)))
    return render(models, page_meta(command, version=version))


def write_report(stores, output: Path, level: str = "deep", engine=None, split_size: int | None = None,
                 progress=None, command: list[str] | None = None, version: str | None = None) -> int:
    """Build the page, then write it whole or not at all (a temporary file, fsynced, renamed over
    ``output``: an existing report is replaced only by a complete one); returns its length."""
    from rmqtool.io.install import fsync_path, write_synced
    text = printable(build_report(stores, level, engine, split_size, progress, command,
                                          version=version))   # a name that is not UTF-8: as \xNN
    output = Path(output)
    write_synced(output, text)
    fsync_path(output.absolute().parent)
    return len(text)
