"""The broker's ``config/*.json`` as fastjson 1.2.83 writes them (docs/format-config.md).

Not JSON: fastjson serialises a ``Map<Integer, ...>`` with **unquoted integer keys**
(``{0:543,1:543}``), and with ``SerializerFeature.PrettyFormat`` indents with tabs, puts every
string-keyed entry on its own line and the integer-keyed ones on one line, and writes an empty
map as ``{}``. A strict JSON parser refuses the first of these, so these files are read only with
``parse`` here, a small recursive-descent parser of what fastjson's own lexer accepts in them
(quoted and unquoted keys, single- or double-quoted strings, numbers, true/false/null, objects,
arrays), bounded in depth; input size is bounded by the caller's read (``MAX_CONFIG_SIZE``).

``dumps`` writes a parsed tree back byte for byte in fastjson's pretty style (the round trip of
every reference file is tested).
"""
from __future__ import annotations

#: deeper nesting than any broker config file has: refused, never a Python recursion error
MAX_DEPTH = 64

_WS = " \t\r\n\f\b"
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$-.+%@")


#: escapes followed by hex digits, and how many
_HEX_ESCAPES = {"u": 4, "x": 2}

class FastjsonError(ValueError):
    """Where the text stops being fastjson: 1-based line and column, and what was expected."""

    def __init__(self, message: str, line: int, col: int):
        super().__init__(f"{line}:{col}: {message}")
        self.message, self.line, self.col = message, line, col


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def fail(self, message: str, at: int | None = None):
        at = self.i if at is None else at
        line = self.s.count("\n", 0, at) + 1
        col = at - (self.s.rfind("\n", 0, at) + 1) + 1
        raise FastjsonError(message, line, col)

    def ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n and s[self.i] in _WS:
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self, depth: int):
        if depth > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels")
        self.ws()
        c = self.peek()
        if c == "":
            self.fail("unexpected end of text, expected a value")
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        if c in "\"'":
            return self.string()
        if c == "-" or c.isdigit():
            return self.number()
        word = self.word()
        if word == "true":
            return True
        if word == "false":
            return False
        if word == "null":
            return None
        self.fail(f"expected a value, found {word or c!r}")

    def word(self) -> str:
        start = self.i
        while self.i < len(self.s) and self.s[self.i] in _IDENT:
            self.i += 1
        return self.s[start:self.i]

    def number(self):
        start = self.i
        tok = self.word()
        try:
            if tok.lstrip("-").isdigit():
                return int(tok)
            return float(tok)
        except ValueError:
            self.fail(f"not a number: {tok!r}", start)

    def string(self) -> str:
        quote = self.s[self.i]
        start = self.i
        self.i += 1
        out = []
        s, n = self.s, len(self.s)
        while True:
            j = self.i
            while j < n and s[j] != quote and s[j] != "\\":
                j += 1
            out.append(s[self.i:j])
            if j >= n:
                self.fail("string not closed", start)
            if s[j] == quote:
                self.i = j + 1
                text = "".join(out)
                if any("\ud800" <= ch <= "\udfff" for ch in text):    # UTF-16 pairs, as Java holds them
                    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
                return text
            esc = s[j + 1] if j + 1 < n else ""
            if esc in _HEX_ESCAPES:             # \uXXXX, fastjson's \xXX
                width = _HEX_ESCAPES[esc]
                hexes = s[j + 2:j + 2 + width]
                if len(hexes) != width or any(h not in "0123456789abcdefABCDEF" for h in hexes):
                    self.fail(f"bad \\{esc} escape", j)
                out.append(chr(int(hexes, 16)))
                self.i = j + 2 + width
            elif esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                self.i = j + 2
            else:
                self.fail(f"bad escape \\{esc}", j)

    def key(self):
        c = self.peek()
        if c and c in "\"'":
            return self.string()
        start = self.i
        tok = self.word()
        if not tok:
            self.fail(f"expected a key, found {c!r}" if c else "unexpected end of text, expected a key")
        if tok.lstrip("-").isdigit():
            return int(tok)
        if tok[0].isdigit() or tok[0] == "-":
            self.fail(f"bad key {tok!r}", start)
        return tok

    def opened(self, close: str) -> bool:
        """Step past a container's opening bracket; True when ``close`` follows at once (empty)."""
        self.i += 1
        self.ws()
        if self.peek() == close:
            self.i += 1
            return True
        return False

    def more(self, close: str) -> bool:
        """After a container's item: True at ``,`` (another item follows), False at ``close``."""
        self.ws()
        c = self.peek()
        if c == "," or c == close:
            self.i += 1
            return c == ","
        self.fail(f"expected ',' or '{close}'" + ("" if c else ", found the end of the text"))

    def obj(self, depth: int) -> dict:
        out: dict = {}
        if self.opened("}"):
            return out
        while True:
            self.ws()
            k = self.key()
            self.ws()
            if self.peek() != ":":
                self.fail(f"expected ':' after key {k!r}")
            self.i += 1
            out[k] = self.value(depth + 1)
            if not self.more("}"):
                return out

    def arr(self, depth: int) -> list:
        out: list = []
        if self.opened("]"):
            return out
        while True:
            out.append(self.value(depth + 1))
            if not self.more("]"):
                return out


def parse(text: str):
    """The value ``text`` holds (dicts keep the file's key order; unquoted integer keys are ints).
    Text that is only whitespace is None, as fastjson's ``parseObject`` answers. Raises
    ``FastjsonError`` (line, column) where the text stops being fastjson."""
    p = _Parser(text)
    p.ws()
    if p.i >= len(text):
        return None
    v = p.value(0)
    p.ws()
    if p.i < len(text):
        p.fail(f"unexpected {text[p.i]!r} after the value")
    return v


# --- writing: SerializerFeature.PrettyFormat ------------------------------------------------------

#: the characters fastjson writes as a two-character escape (SerializeWriter.writeStringWithDoubleQuote):
#: the reader's escapes, less the two it writes as they are (' and /)
_WRITTEN_ESCAPES = {char: "\\" + esc for esc, char in _ESCAPES.items() if esc not in ("'", "/")}


def _string(s: str) -> str:
    """A quoted string as fastjson writes it: ``_WRITTEN_ESCAPES``, other controls and DEL as \\uXXXX."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in _WRITTEN_ESCAPES:
            out.append(_WRITTEN_ESCAPES[ch])
        elif o < 0x20 or o == 0x7f:
            out.append("\\u%04X" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _scalar(v) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return _string(str(v))


def _dump(v, indent: int, out: list) -> None:
    if isinstance(v, dict):
        if not v:
            out.append("{}")
            return
        out.append("{")
        first = True
        for k, item in v.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):          # a String key starts its own line; an Integer key does not
                out.append("\n" + "\t" * (indent + 1))
                out.append(_string(k))
            else:
                out.append(str(k))
            out.append(":")
            _dump(item, indent + 1, out)
        out.append("\n" + "\t" * indent + "}")
    elif isinstance(v, list):
        if not v:
            out.append("[]")
            return
        out.append("[")
        for n, item in enumerate(v):
            if n:
                out.append(",")
            _dump(item, indent + 1, out)
        out.append("]")
    else:
        out.append(_scalar(v))


def dumps(value) -> str:
    """``value`` as fastjson's ``JSON.toJSONString(obj, PrettyFormat)`` lays it out (no trailing newline)."""
    out: list = []
    _dump(value, 0, out)
    return "".join(out)
