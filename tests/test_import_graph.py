"""jetspark's modules import one another without circles, read from their source (AST).

Two graphs: the module-level imports of the whole package (what loads on
import), and those plus the imports inside functions (a lazy import is a
circle all the same: the two modules cannot be understood or split apart
alone).  Imports under ``if TYPE_CHECKING:`` are for annotations and are left
out.  ``jetspark/__init__.py`` is the public facade: ``jetspark.connect`` and
``jetspark.register`` load a backend or the connector lazily by design, and
those (which import the public API back) are left out of the second graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jetspark

ROOT = Path(jetspark.__file__).parent
FACADE = "jetspark"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _owner(dotted: str):
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def imports(name: str, *, in_functions: bool) -> set[str]:
    """The jetspark modules ``name`` imports."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt)
            else:
                visit_one(child)

    def visit_one(node) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not in_functions:
            return
        if isinstance(node, ast.Import):
            found.update(filter(None, (_owner(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                target = f"{base}.{a.name}"
                owner = target if target in MODULES else _owner(base)
                if owner:
                    found.add(owner)
        visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_the_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert imports("jetspark.engine.handle", in_functions=True) >= {"jetspark.engine.pull", "jetspark.engine.bulk", "jetspark.handle_base"}
    assert "jetspark.engine.handle" not in imports("jetspark.engine.pull", in_functions=True)  # TYPE_CHECKING only


def test_no_circle_among_module_level_imports():
    graph = {name: imports(name, in_functions=False) for name in MODULES}
    assert circles(graph) == []


def test_no_circle_even_through_imports_in_functions():
    graph = {name: imports(name, in_functions=True) for name in MODULES if name != FACADE}
    assert circles(graph) == []


@pytest.mark.parametrize("module", ["jetspark.backend", "jetspark.handle_base"])
def test_the_contract_and_the_base_import_no_backend(module):
    reached, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in reached:
            reached.add(m)
            todo.extend(imports(m, in_functions=True) - {FACADE})
    assert not {m for m in reached if m.startswith(("jetspark.engine", "jetspark.remote", "jetspark.connector"))}
