"""The documentation is true: its code runs, its error tree is the code's, its pages are all
reachable, and the site builds strictly.

Every Python block of README.md and docs/**/*.md runs as pasted: each into a fresh script, run
by a fresh interpreter, in a directory of its page where the page's blocks before it have
already run (a reader copies one block at a time, in order).  Pages are independent of each
other.

Blocks that name a NATS server or cluster on the default ports run against the suite's
server and cluster (the URLs swapped, nothing else); the rest run as written.  Skipped, with
the reason shown: the TLS block (certificates and hosts n1..n3 this machine does not have),
the cluster pipeline (a shared checkpoint directory; tests/connector/test_cluster_streaming.py
runs that query) and the Spark Connect block (tests/connector/test_spark_connect.py runs the
same ``local_session()`` under ``SPARK_REMOTE``; a Connect server costs a JVM of its own).
"""

from __future__ import annotations

import ast
import inspect
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jetspark
import jetspark.errors
from tests.conftest import drop_streams

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
BLOCKS = [(page, i, code) for page in PAGES for i, code in enumerate(BLOCK.findall(page.read_text()))]
SERVER_URL = "nats://127.0.0.1:4222"
CLUSTER_URL = "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"

SKIPPED = {
    "tls://n1": "needs TLS certificates and the hosts n1..n3",
    "/shared/ckpt": "a Spark query on a cluster with a shared checkpoint directory: "
    "tests/connector/test_cluster_streaming.py runs it",
    "SPARK_REMOTE": "Spark Connect: tests/connector/test_spark_connect.py runs local_session() under SPARK_REMOTE "
    "(a Connect server per run)",
}


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def test_the_pages_have_their_blocks():
    counted = {_name(page) for page, _, _ in BLOCKS}
    assert {
        "README.md",
        "docs/getting-started.md",
        "docs/guides/spark-source.md",
        "docs/guides/nats-server.md",
    } <= counted
    assert len(BLOCKS) >= 20


@pytest.fixture(scope="module")
def page_dirs(tmp_path_factory):
    """Each page's reader directory: its blocks run there, after the ones before them."""
    dirs: dict[Path, Path] = {}

    def get(page: Path) -> Path:
        if page not in dirs:
            dirs[page] = tmp_path_factory.mktemp(re.sub(r"\W", "_", _name(page)))
        return dirs[page]

    return get


@pytest.mark.parametrize(("page", "index", "code"), BLOCKS, ids=[f"{_name(p)}:{i}" for p, i, _ in BLOCKS])
def test_block_runs_as_pasted(page, index, code, page_dirs, request):
    where = f"{_name(page)} block {index}"
    for marker, why in SKIPPED.items():
        if marker in code:
            pytest.skip(f"{where}: {why}")
    cleanup = None
    if CLUSTER_URL in code:
        cluster = request.getfixturevalue("cluster")
        code, cleanup = code.replace(CLUSTER_URL, cluster.url), cluster.url
    elif SERVER_URL in code:
        server = request.getfixturevalue("server")
        code, cleanup = code.replace(SERVER_URL, server.url), server.url
    reader_dir = page_dirs(page)
    script = reader_dir / f"block{index}.py"
    script.write_text(code)
    try:
        proc = subprocess.run(
            [sys.executable, script.name], cwd=reader_dir, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"{where} failed:\n{code}\n--- stderr:\n{proc.stderr[-3000:]}"
    finally:
        if cleanup is not None:  # the shared server and cluster: leave them as found
            with jetspark.connect(cleanup, timeout=15) as js:
                drop_streams(js)


# --------------------------------------------------------------------------- the error tree

TREE_LINE = re.compile(r"^(?P<indent>(?:[│ ] {3})*)[├└]── (?P<name>\w+)(?: \((?P<builtins>[\w, ]+)\))?")


def parse_tree(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``{class: (parent in the tree, builtins named in parentheses)}`` from a drawn tree."""
    lines = text.strip("\n").splitlines()
    root = lines[0].split()[0]
    tree = {root: ("", ())}
    stack = [root]  # stack[d]: the last class drawn at depth d
    for line in lines[1:]:
        m = TREE_LINE.match(line)
        if not m:
            assert line.strip().startswith("│") or not line.strip(), f"not a tree line: {line!r}"
            continue
        depth = len(m["indent"]) // 4 + 1
        del stack[depth:]
        builtins = tuple(b.strip() for b in m["builtins"].split(",")) if m["builtins"] else ()
        tree[m["name"]] = (stack[depth - 1], builtins)
        stack.append(m["name"])
    return tree


def drawn_tree() -> str:
    page = (DOCS / "reference" / "errors.md").read_text()
    blocks = re.findall(r"^```text\n(JetSparkError\n.*?)^```", page, re.S | re.M)
    assert len(blocks) == 1, "docs/reference/errors.md draws the tree in one ```text block starting at JetSparkError"
    return blocks[0]


def test_the_drawn_error_tree_is_jetspark_errors():
    tree = parse_tree(drawn_tree())
    classes = {
        name: cls
        for name, cls in vars(jetspark.errors).items()
        if inspect.isclass(cls) and issubclass(cls, jetspark.errors.JetSparkError)
    }
    assert sorted(tree) == sorted(classes), "classes drawn vs classes in jetspark.errors"
    for name, (parent, builtins) in tree.items():
        if name == "JetSparkError":
            continue
        bases = classes[name].__bases__
        assert bases[0] is classes[parent], f"{name}: drawn under {parent}, its first base is {bases[0].__name__}"
        assert tuple(b.__name__ for b in bases[1:]) == builtins, (
            f"{name}: drawn as also {builtins}, its other bases are {bases[1:]}"
        )
        assert getattr(jetspark, name) is classes[name], f"{name} is exported from jetspark"


def test_the_tree_check_catches_a_wrong_drawing():
    right = drawn_tree()
    # a class moved to another parent, a builtin left out, a class missing
    wrong_parent = right.replace("│   │   ├── StreamNotFoundError", "│   ├── StreamNotFoundError", 1)
    assert parse_tree(wrong_parent)["StreamNotFoundError"][0] == "APIError"
    assert (
        parse_tree(right.replace("FetchTimeoutError (TimeoutError)", "FetchTimeoutError"))["FetchTimeoutError"][1] == ()
    )
    assert "AckFloorError" not in parse_tree(
        "\n".join(line for line in right.splitlines() if "AckFloorError" not in line)
    )


# --------------------------------------------------------------------------- the Spark options


def _read_keys() -> set[str]:
    """Every option name the parsers in jetspark/connector/options.py read, found in their code:
    the names passed to _get, _positive_int and _bool, and the tuples of names they loop over."""
    from jetspark.connector import options

    tree = ast.parse(inspect.getsource(options))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in {"_get", "_positive_int", "_bool"}:
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)
        if isinstance(node, ast.comprehension) and isinstance(node.iter, ast.Tuple):
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
                names.update(e.value for e in node.iter.elts)
    return names


def test_every_option_the_parsers_read_is_declared_and_back():
    from jetspark.connector.options import OPTIONS

    declared = {o.name for o in OPTIONS}
    read = _read_keys()
    assert read - declared == set(), "read by the parsers, not declared in OPTIONS"
    # Declared but never read by name: the nats.* family (matched by prefix) and Spark's own query options.
    assert declared - read == {"nats.<option>", "checkpointLocation", "queryName"}


def test_the_connector_docstring_carries_every_option():
    pytest.importorskip("pyspark")
    from jetspark.connector import JetStreamDataSource
    from jetspark.connector.options import OPTIONS, options_table

    shown = pydoc.render_doc(JetStreamDataSource, renderer=pydoc.plaintext)
    for o in OPTIONS:
        assert f"`{o.name}`" in shown, f"help(JetStreamDataSource) does not show {o.name}"
    assert options_table() in JetStreamDataSource.__doc__


# --------------------------------------------------------------------------- the README

SITE = "https://jetspark.github.io/jetspark/"


def test_the_readme_is_a_few_screens():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_readme_links_reach_docs_pages():
    """The README is the package's long description, so it links into the site with absolute
    URLs; each must name a page of docs/ (``guides/arrow/`` is docs/guides/arrow.md)."""
    links = re.findall(re.escape(SITE) + r"([\w/.-]*)", (ROOT / "README.md").read_text())
    assert len(links) >= 10
    for link in links:
        path = link.strip("/")
        assert path == "" or (DOCS / f"{path}.md").is_file(), (
            f"README links to {SITE}{link}, and docs/{path}.md does not exist"
        )
    relative = re.findall(r"\]\((?!https?://)([^)]+)\)", (ROOT / "README.md").read_text())
    assert relative == [], "relative links break on the package index"


# --------------------------------------------------------------------------- the site


def test_every_page_is_in_the_nav():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(entries):
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            if isinstance(value, list):
                yield from walk(value)
            else:
                yield value

    in_nav = list(walk(config["nav"]))
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(in_nav) == pages, "every page of docs/ once in mkdocs.yml's nav, and nothing else"
    assert len(in_nav) == len(set(in_nav))


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]') builds the site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    options_page = (tmp_path / "site" / "reference" / "options" / "index.html").read_text()
    assert "maxTriggerDelay" in options_page and "<!-- options-table -->" not in options_page
