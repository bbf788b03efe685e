"""Derive numpy dtypes, structs and byte offsets from fixed-size construct structs.

numpy is imported only when a dtype is first asked for (``lazy_dtypes``): a query that reads a
few records with ``struct`` never pays for it.
"""
from __future__ import annotations

import struct as _struct

from formats import declare as cs

_STRUCT_CODE_TO_NUMPY = {
    "b": "i1", "B": "u1", "h": "i2", "H": "u2", "i": "i4", "I": "u4",
    "l": "i4", "L": "u4", "q": "i8", "Q": "u8",
}


def leaf_field(subcon):
    """Strip Renamed wrappers down to the field that carries the format."""
    while isinstance(subcon, cs.Renamed):
        subcon = subcon.subcon
    return subcon


def field_dtype(subcon):
    """numpy dtype of one fixed-size field (integer FormatField or Bytes)."""
    import numpy as np
    leaf = leaf_field(subcon)
    if isinstance(leaf, cs.FormatField):
        order, code = leaf.fmtstr[0], leaf.fmtstr[1:]
        endian = {">": ">", "<": "<", "=": "="}[order]
        return np.dtype(endian + _STRUCT_CODE_TO_NUMPY[code])
    if isinstance(leaf, cs.Bytes) and isinstance(leaf.length, int):
        return np.dtype(("V", leaf.length))
    raise TypeError(f"field {subcon!r} has no fixed numpy equivalent")


def numpy_dtype(struct: cs.Struct):
    """Packed numpy record dtype equal to a fixed-size construct Struct."""
    import numpy as np
    return np.dtype([(sc.name, field_dtype(sc)) for sc in struct.subcons])


def lazy_dtypes(namespace: dict, **structs: cs.Struct):
    """A module ``__getattr__`` that builds ``NAME = numpy_dtype(struct)`` on first use, for the
    ``NAME=struct`` pairs given; assign it to the module's ``__getattr__``."""
    def __getattr__(name: str):
        if name in structs:
            namespace[name] = numpy_dtype(structs[name])
            return namespace[name]
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    return __getattr__


def field_offsets(struct: cs.Struct) -> dict[str, int]:
    """Byte offset of every field of a fixed-size construct Struct."""
    offsets, pos = {}, 0
    for sc in struct.subcons:
        offsets[sc.name] = pos
        pos += sc.sizeof()
    return offsets


def struct_of(struct: cs.Struct) -> _struct.Struct:
    """A ``struct.Struct`` packing the integer fields of a fixed-size construct Struct."""
    leaves = [leaf_field(sc) for sc in struct.subcons]
    orders = {leaf.fmtstr[0] for leaf in leaves}
    if len(orders) != 1:
        raise TypeError(f"fields of {struct!r} mix byte orders")
    return _struct.Struct(orders.pop() + "".join(leaf.fmtstr[1:] for leaf in leaves))


def field_struct(subcon) -> _struct.Struct:
    """A ``struct.Struct`` packing one integer field (``Renamed`` wrappers allowed)."""
    return _struct.Struct(leaf_field(subcon).fmtstr)


def member_struct(struct: cs.Struct, name: str) -> _struct.Struct:
    """A ``struct.Struct`` packing the field ``name`` of a construct Struct."""
    return field_struct(next(sc for sc in struct.subcons if sc.name == name))
