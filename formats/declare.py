"""construct's declaration spelling, with construct itself imported only when a schema is used.

The modules of ``formats/`` declare every layout in construct's own words (``cs.Struct("size" /
cs.Int32sb, ...)``), importing this module as ``cs``. The names here record that declaration; the
real construct object is built from it on first use (``.construct``, and ``parse``/``build``,
which go through it). Sizes, field offsets, ``struct`` formats and numpy dtypes of fixed-size
layouts come from the declaration alone (``formats.derive``), so a command that reads records
with ``struct`` never imports construct (about 11 ms, with its ``pdb``), and what it reads is
still declared once. ``tests/test_formats.py`` proves every declaration equal to the construct
object built from it: same size, same field offsets, same bytes parsed and built.
"""
from __future__ import annotations

import struct as _struct


def _construct():
    import construct
    return construct


def _real(arg, cs):
    """An argument as construct takes it: declarations built, ``this`` paths resolved."""
    if isinstance(arg, Construct):
        return arg.construct
    if isinstance(arg, _ThisPath):
        return arg.resolve(cs)
    return arg


class Construct:
    """A declared construct: its construct object is built (once) when first needed."""

    _built = None

    @property
    def construct(self):
        if self._built is None:
            self._built = self._make(_construct())
        return self._built

    def _make(self, cs):
        raise NotImplementedError

    def sizeof(self, **context) -> int:
        return self.construct.sizeof(**context)

    def parse(self, data, **context):
        return self.construct.parse(data, **context)

    def build(self, obj, **context) -> bytes:
        return self.construct.build(obj, **context)

    def __rtruediv__(self, name: str) -> "Renamed":
        return Renamed(name, self)


class FormatField(Construct):
    """A fixed-size integer field, as construct's ``FormatField`` (``fmtstr``: byte order + code)."""

    def __init__(self, fmtstr: str, name: str):
        self.fmtstr, self._name = fmtstr, name

    def _make(self, cs):
        return getattr(cs, self._name)

    def sizeof(self, **context) -> int:
        return _struct.calcsize(self.fmtstr)

    def __repr__(self) -> str:
        return self._name


Int8sb = FormatField(">b", "Int8sb")
Int16sb = FormatField(">h", "Int16sb")
Int32sb = FormatField(">i", "Int32sb")
Int32ub = FormatField(">I", "Int32ub")
Int64sb = FormatField(">q", "Int64sb")


class Bytes(Construct):
    """``length`` bytes: an int, a ``this`` path or a function of the context."""

    def __init__(self, length):
        self.length = length

    def _make(self, cs):
        return cs.Bytes(_real(self.length, cs))

    def sizeof(self, **context) -> int:
        if isinstance(self.length, int):
            return self.length
        return super().sizeof(**context)


class Const(Construct):
    """A constant value (bytes, or an integer of ``subcon``)."""

    def __init__(self, value, subcon: Construct | None = None):
        self.value, self.subcon = value, subcon

    def _make(self, cs):
        return cs.Const(self.value) if self.subcon is None else cs.Const(self.value, self.subcon.construct)

    def sizeof(self, **context) -> int:
        return len(self.value) if self.subcon is None else self.subcon.sizeof()


class Renamed(Construct):
    """``"name" / subcon``."""

    def __init__(self, name: str, subcon: Construct):
        self.name, self.subcon = name, subcon

    def _make(self, cs):
        return self.name / self.subcon.construct

    def sizeof(self, **context) -> int:
        return self.subcon.sizeof(**context)


class IfThenElse(Construct):
    """``thensubcon`` or ``elsesubcon`` by ``condfunc`` (a ``this`` comparison or a function)."""

    def __init__(self, condfunc, thensubcon: Construct, elsesubcon: Construct):
        self.condfunc, self.thensubcon, self.elsesubcon = condfunc, thensubcon, elsesubcon

    def _make(self, cs):
        return cs.IfThenElse(_real(self.condfunc, cs), self.thensubcon.construct, self.elsesubcon.construct)


class Struct(Construct):
    """Fields in order; ``struct.name`` is the field called ``name``, as in construct."""

    def __init__(self, *subcons: Construct):
        self.subcons = list(subcons)

    def _make(self, cs):
        return cs.Struct(*(sc.construct for sc in self.subcons))

    def sizeof(self, **context) -> int:
        return sum(sc.sizeof(**context) for sc in self.subcons)

    def __getattr__(self, name: str):
        for sc in self.__dict__.get("subcons", ()):
            if getattr(sc, "name", None) == name:
                return sc
        raise AttributeError(name)


class _ThisPath:
    """``this.field`` (and ``this.field == value``), resolved to construct's ``this`` when built."""

    def __init__(self, name: str, equals=None, compare: bool = False):
        self.name, self.equals, self.compare = name, equals, compare

    def __getattr__(self, name: str) -> "_ThisPath":
        if name.startswith("__"):
            raise AttributeError(name)
        return _ThisPath(name)

    def __eq__(self, other) -> "_ThisPath":       # type: ignore[override]
        return _ThisPath(self.name, other, True)

    __hash__ = None

    def resolve(self, cs):
        path = getattr(cs.this, self.name)
        return path == self.equals if self.compare else path


class _This:
    def __getattr__(self, name: str) -> _ThisPath:
        if name.startswith("__"):
            raise AttributeError(name)
        return _ThisPath(name)


this = _This()
