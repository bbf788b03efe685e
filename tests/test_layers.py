"""The layers docs/architecture.md draws, checked on the source: every import of every module of
``formats/`` and ``rmqtool/`` is read with ``ast`` (imports inside functions included, and the
``from . import x`` / ``from .. import x`` forms), and

- no module imports from a higher layer (formats < io < kernels < records < broker < output <
  engines < ops < cli);
- no private name (``_x``) is imported from another module (a private submodule of one's own
  package, such as ``kernels/_native``, is the package's own business);
- no two modules import each other, directly or round a longer loop.

An import inside a function counts like one at the top: it runs as soon as the function is
called, so it ties the two modules together just the same. Deferring it only hides the
dependency (and a loop) from a reader of the imports, which is the reason these checks exist.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("formats", "rmqtool")

#: lowest first; a module may import from its own layer or lower ones
LAYERS = ("formats", "io", "kernels", "records", "broker", "output", "engines", "ops", "cli")
#: modules outside the layer packages, and where they stand
PLACED = {
    "rmqtool.errors": "formats",        # the error classes every layer raises; imports nothing of ours
    "rmqtool.wording": "formats",       # counts in messages ("1 file", "3 files"); imports nothing of ours
    "rmqtool.simplified": "ops",        # the simplified store kind: its reader, writer and verify
    "rmqtool.__init__": "cli",
    "rmqtool.__main__": "cli",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


MODULES = _modules()


def _is_module(name: str) -> bool:
    """A module of ours: a .py file, a package, or an extension (``kernels/_native``)."""
    if name in MODULES or name + ".__init__" in MODULES:
        return True
    base = ROOT.joinpath(*name.split("."))
    return any(base.parent.glob(base.name + ".*.so")) or base.with_suffix(".c").exists()


def _canonical(name: str) -> str:
    return name + ".__init__" if name + ".__init__" in MODULES else name


def layer(name: str) -> str | None:
    name = name.removesuffix(".__init__")
    for prefix, where in PLACED.items():
        if name == prefix.removesuffix(".__init__") or name.startswith(prefix + "."):
            return where
    parts = name.split(".")
    if parts[0] == "formats":
        return "formats"
    if parts[0] == "rmqtool" and len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return None


@dataclass(frozen=True)
class Import:
    source: str          # the importing module
    line: int
    target: str          # the module imported from (ours)
    name: str | None     # the name imported from it (``from target import name``), if not a module
    in_function: bool


def _package_of(module: str) -> str:
    return module.removesuffix(".__init__") if module.endswith(".__init__") else module.rpartition(".")[0]


def imports_of(module: str) -> list[Import]:
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found: list[Import] = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] in PACKAGES:
                        found.append(Import(module, child.lineno, alias.name, None, in_function))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = _package_of(module)
                    for _ in range(child.level - 1):
                        base = base.rpartition(".")[0]
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module or ""
                if target.split(".")[0] not in PACKAGES:
                    continue
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    if _is_module(sub):          # ``from pkg import module``
                        found.append(Import(module, child.lineno, sub, None, in_function))
                    else:
                        found.append(Import(module, child.lineno, target, alias.name, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


ALL_IMPORTS = [imp for m in MODULES for imp in imports_of(m)]


def _where(imp: Import) -> str:
    what = f"{imp.target}.{imp.name}" if imp.name else imp.target
    return f"{MODULES[imp.source].relative_to(ROOT)}:{imp.line} imports {what}" + \
        (" (inside a function)" if imp.in_function else "")


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer(m) is None] == []


def test_the_walk_sees_function_level_and_relative_imports():
    """The walk itself: imports inside functions and ``from . import x`` are found (a check that
    missed them would pass on a house full of hidden arrows)."""
    assert any(i.in_function for i in ALL_IMPORTS)
    fuzzed = [i for i in ALL_IMPORTS if i.source == "rmqtool.io.store" and i.target == "rmqtool.io.storage"]
    assert fuzzed, "from rmqtool.io import storage"
    rel = ast.parse("from . import b\nfrom .c import d\n")
    assert [n.level for n in ast.walk(rel) if isinstance(n, ast.ImportFrom)] == [1, 1]


@pytest.mark.parametrize("lower", LAYERS)
def test_no_import_from_a_higher_layer(lower):
    """Per layer: none of its modules imports from a layer above it."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = [_where(i) + f" ({layer(i.target)} is above {lower})" for i in ALL_IMPORTS
           if layer(i.source) == lower and layer(i.target) is not None
           and rank[layer(i.target)] > rank[lower]]
    assert bad == []


def test_no_private_name_imported_across_modules():
    bad = []
    for i in ALL_IMPORTS:
        if i.name is not None and i.name.startswith("_") and not i.name.startswith("__"):
            bad.append(_where(i))
        elif i.name is None:
            leaf = i.target.rpartition(".")[2]
            own_package = _package_of(i.source) == i.target.rpartition(".")[0]
            if leaf.startswith("_") and not leaf.startswith("__") and not own_package:
                bad.append(_where(i) + " (a private module of another package)")
    assert bad == []


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in ALL_IMPORTS:
        target = _canonical(i.target)
        if target in MODULES and target != i.source:
            graph[i.source].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def test_the_cycle_finder_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    """Module-level and function-level imports both count (see the module's docstring)."""
    graph = _graph()
    loops = []
    for comp in _cycles(graph):
        members = set(comp)
        arrows = sorted(_where(i) for i in ALL_IMPORTS
                        if i.source in members and _canonical(i.target) in members and _canonical(i.target) != i.source)
        loops.append(f"{' <-> '.join(comp)}: " + "; ".join(arrows))
    assert loops == []
