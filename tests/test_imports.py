"""The package's shape, checked from its source: who may import whom, and no import circles.

The two backends are siblings behind one declared API (jetspark/backend.py):
neither imports the other, both import the shared pieces (``jetspark.api``,
``jetspark.errors``, ``jetspark.validate``, ``jetspark.protocol``); the
connector and the CLI use only the public API.  ``jetspark.connect``
(``jetspark.connection``) is the one place that picks a backend.

Imports are read with ``ast`` from every module, including imports inside
functions (a lazy import is still a dependency); only ``if TYPE_CHECKING:``
blocks are left out, because they never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jetspark"

# What each layer may import from jetspark, besides its own package.
SHARED = (
    "jetspark.api",
    "jetspark.errors",
    "jetspark.err_codes",
    "jetspark.validate",
    "jetspark.protocol",
    "jetspark.backend",
    "jetspark.connect_options",
    "jetspark._extras",
)
ALLOWED = {
    "jetspark.engine": SHARED,
    "jetspark.remote": SHARED,
    "jetspark.connector": ("jetspark", "jetspark.connection") + SHARED,
    "jetspark.cli": ("jetspark", "jetspark.connection", "jetspark.demo") + SHARED,
    # connect() picks a backend: the one module besides the package root that loads both.
    "jetspark.connection": ("jetspark.engine", "jetspark.remote") + SHARED,
    "jetspark.demo": ("jetspark", "jetspark.connection", "jetspark.connector") + SHARED,  # the demo is a Spark pipeline on the connector
    "jetspark.protocol": ("jetspark.api", "jetspark.errors", "jetspark.err_codes"),
    "jetspark.api": ("jetspark.errors", "jetspark.err_codes"),
    "jetspark.errors": ("jetspark.err_codes",),
    "jetspark.err_codes": (),
    "jetspark.validate": ("jetspark.api", "jetspark.errors", "jetspark.err_codes", "jetspark.protocol"),
    "jetspark.connect_options": ("jetspark.api", "jetspark.errors", "jetspark.err_codes", "jetspark.validate", "jetspark.protocol"),
    "jetspark.backend": SHARED,
    "jetspark._extras": (),
}
# Third-party packages a layer must never load.
FORBIDDEN = {
    "jetspark.engine": ("pyspark", "nats"),
    "jetspark.remote": ("pyspark",),
    "jetspark.protocol": ("pyspark", "nats"),
    "jetspark.api": ("pyspark", "nats", "pyarrow", "numpy"),
    "jetspark.errors": ("pyspark", "nats", "pyarrow", "numpy"),
    "jetspark.err_codes": ("pyspark", "nats", "pyarrow", "numpy"),
    "jetspark.validate": ("pyspark", "nats"),
    "jetspark.backend": ("pyspark", "nats"),
    # It looks for the spark extra without importing it.
    "jetspark._extras": ("pyspark", "pandas", "nats", "pyarrow", "numpy"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports (resolved to modules where ``from pkg import mod`` names one)."""
    tree = ast.parse(MODULES[name].read_text())
    is_package = MODULES[name].name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.add(candidate if candidate in MODULES else source)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


IMPORTS = {name: _imports(name) for name in MODULES}


def _layer(name: str, layers) -> str | None:
    return max((layer for layer in layers if name == layer or name.startswith(layer + ".")), key=len, default=None)


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m, ALLOWED)))
def test_module_imports_only_what_its_layer_may(module):
    layer = _layer(module, ALLOWED)
    allowed = ALLOWED[layer]
    wrong = sorted(
        dep
        for dep in IMPORTS[module]
        if (dep == "jetspark" or dep.startswith("jetspark."))
        and not _within(dep, (layer,))
        and not (dep in allowed or _within(dep, [a for a in allowed if a != "jetspark"]))
    )
    assert not wrong, f"{module} ({layer}) imports {wrong}; it may import only {list(allowed)} and its own package"
    banned = sorted(dep for dep in IMPORTS[module] if _within(dep, FORBIDDEN.get(_layer(module, FORBIDDEN) or "", ())))
    assert not banned, f"{module} imports {banned}"


def test_no_import_circles():
    """Tarjan's strongly connected components over jetspark's modules (the package root left out:
    every submodule import loads it anyway, and it imports the backends only inside connect())."""
    graph = {m: sorted(d for d in IMPORTS[m] if d in MODULES and d != "jetspark" and d != m) for m in MODULES if m != "jetspark"}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    assert not circles, f"import circles: {circles}"


def test_the_checker_sees_lazy_imports_and_skips_type_checking():
    # The rules above are only as good as the import reader: it must see an import inside a
    # function and ignore one under TYPE_CHECKING.
    assert "jetspark.remote" in IMPORTS["jetspark.connection"]  # connect() imports it lazily
    assert "jetspark.engine.handle" in IMPORTS["jetspark.connection"]


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout.strip()


def test_a_nats_store_never_loads_the_engine(server):
    code = f"""
import sys, jetspark
from jetspark.connector.store import handle
js = handle({server.url!r})
js.stream_info("KEEPER")
print(sorted(m for m in sys.modules if m.startswith("jetspark.engine")))
"""
    assert _fresh(code) == "[]"


def test_the_engine_never_loads_nats_or_spark(tmp_path):
    code = f"""
import sys, jetspark
with jetspark.connect({str(tmp_path / "store")!r}) as js:
    js.add_stream(name="S", subjects=["s.>"])
    js.publish_batch(__import__("pyarrow").table({{"subject": ["s.a"], "data": [b"x"]}}), stream="S")
    list(js.read_batches("S", 1, 1))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("nats", "pyspark") or m.startswith("jetspark.remote")))
"""
    assert _fresh(code) == "[]"
