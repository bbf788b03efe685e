"""The optional native core (``_native.c``, built at install) and which path runs.

Each fast path in ``kernels`` calls ``core`` when it is there and otherwise runs its numpy
formulation, which is the reference: the native loops skip interpreter work, never change
the algorithm (``tests/test_fastpath_equivalence.py`` proves them equal). ``RMQTOOL_NATIVE=0``
forces the numpy path; without a compiler at install time it is the only one.
"""
from __future__ import annotations

import os


def _load():
    if os.environ.get("RMQTOOL_NATIVE", "").strip() == "0":
        return None, "numpy (RMQTOOL_NATIVE=0)"
    try:
        from rmqtool.kernels import _native
    except ImportError:
        return None, "numpy (native core not built)"
    kernel = _native.crc32_kernel() if hasattr(_native, "crc32_kernel") else "zlib"
    return _native, f"native (C), crc32 by {kernel}"


#: the extension module, or None when the numpy path runs
core, path = _load()
