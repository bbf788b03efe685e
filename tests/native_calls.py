"""Which path ran: every C function of the native core counted as it is called.

A comparison of the native core with the numpy path proves something only if the native side
called the C functions and the numpy side did not. ``CoreCalls.install(core)`` replaces each
function of the extension module with a counting wrapper (the kernels call ``core.NAME(...)``
at call time, so every caller goes through it); ``calls.none()`` fails if anything inside it
called the core.

Run as a script it is ``python -m rmqtool`` with the counting installed: ``python
tests/native_calls.py ARGS...`` with ``RMQTOOL_TEST_CALLS=FILE`` writes ``{"path": native.path,
"file": the core's file, "calls": {function: count}}`` to FILE when the command ends (the CLI
equivalence tests).
"""
from __future__ import annotations

import contextlib
import types
from collections import Counter


class CoreCalls:
    def __init__(self):
        self.counts: Counter = Counter()
        self._core = None
        self._originals: dict = {}

    def install(self, core) -> None:
        if core is None or self._core is not None:
            return
        self._core = core
        for name in dir(core):
            fn = getattr(core, name)
            if isinstance(fn, types.BuiltinFunctionType):
                self._originals[name] = fn
                setattr(core, name, self._counting(name, fn))

    def uninstall(self) -> None:
        for name, fn in self._originals.items():
            setattr(self._core, name, fn)
        self._core, self._originals = None, {}

    def _counting(self, name: str, fn):
        counts = self.counts

        def counted(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        counted.__name__ = name
        return counted

    def snapshot(self) -> Counter:
        return Counter(self.counts)

    @contextlib.contextmanager
    def none(self, *names: str):
        """The block is the numpy path: it must not call the native core at all, or, with ``names``,
        not those C functions (a reference built on kernels that other tests prove equal to theirs)."""
        before = self.snapshot()
        yield
        called = self.counts - before
        if names:
            called = Counter({name: n for name, n in called.items() if name in names})
        assert not called, f"the numpy path called the native core: {dict(called)}"


def _main() -> None:
    import atexit
    import json
    import os
    import runpy
    import sys
    from rmqtool.kernels import native
    calls = CoreCalls()
    calls.install(native.core)
    out = os.environ["RMQTOOL_TEST_CALLS"]

    def record():
        with open(out, "w") as fh:
            json.dump({"path": native.path, "file": getattr(native.core, "__file__", None),
                       "calls": dict(calls.counts)}, fh)
    atexit.register(record)
    sys.argv = ["rmqtool", *sys.argv[1:]]
    runpy.run_module("rmqtool", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
