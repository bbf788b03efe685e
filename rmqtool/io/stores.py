"""The STORE... arguments of a command: globs expanded (locally or in object storage), each store
opened once, and a name per store that rows and reports carry."""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Callable, Sequence

from rmqtool.errors import StoreLayoutError, UsageError
from rmqtool.io import storage


def store_names(paths: Sequence[str | Path]) -> list[str]:
    """A name per store: the directory name, or the full path where names collide."""
    full = [str(storage.path(p).resolve()) for p in paths]
    base = [storage.path(f).name or f for f in full]
    return [b if base.count(b) == 1 else f for b, f in zip(base, full)]


def _absolute(p: str) -> str:
    return str(storage.path(p)) if storage.is_uri(p) else os.path.abspath(storage.path(p))


def open_stores(patterns: Sequence[str], store_factory: Callable[[str], object]) -> list[tuple[str, object]]:
    """``[(name, store)]``: each pattern a store, or a glob whose matches that are stores (absolute
    paths, so that engine tasks on other machines find them); the same store once."""
    found: list[tuple[str, object]] = []
    for p in patterns:
        if not glob.has_magic(p):
            found.append((_absolute(p), store_factory(_absolute(p))))
            continue
        hits = []
        for h in storage.glob(p) if storage.is_uri(p) else sorted(glob.glob(p)):
            try:                       # a glob may also match things that are not stores
                hits.append((_absolute(h), store_factory(_absolute(h))))
            except StoreLayoutError:
                continue
        if not hits:
            raise UsageError(f"no store matches {p!r}")
        found.extend(hits)
    unique = list({path: store for path, store in found}.items())
    names = store_names([path for path, _ in unique])
    return [(n, store) for n, (_, store) in zip(names, unique)]
