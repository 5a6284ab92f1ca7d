"""No import circles between the modules of ``src/gpuwise``, read from the imports themselves.

``test_layers.py`` keeps the packages one-way; this test does the same for the modules
inside them. Every ``import gpuwise.X`` and ``from gpuwise.X import ...`` (relative ones
too) is an edge, at any level: a lazy import inside a function is still a dependency.
Only imports under ``if TYPE_CHECKING:`` are left out, since they never run.

The rule for packages: an import is an edge to the module it names. ``from gpuwise.a
import b`` names the module ``gpuwise.a.b`` when ``b`` is one, else ``gpuwise.a`` itself
(its ``__init__``). The parent packages Python initializes on the way are not edges, so a
package's ``__init__`` may re-export its own modules; but a module that imports a name
from its own package's ``__init__`` (or any ``__init__`` that imports it back) closes a
circle, and fails here like any other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_name(path: Path, root: Path) -> str:
    """``gpuwise.a.b`` for ``root/gpuwise/a/b.py``; ``gpuwise.a`` for its ``__init__.py``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def _run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _base_of(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


def imported_modules(path: Path, importer: str, modules: set[str]) -> set[str]:
    """The gpuwise modules ``path`` (module ``importer``) imports at run time."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _run_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base_of(node, importer, is_package)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        for name in names:
            while name and name not in modules:  # `import gpuwise.a.b.attr` → its module
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out - {importer}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module to the gpuwise modules it imports, for every module under ``root/gpuwise``."""
    paths = {module_name(p, root): p for p in sorted((root / "gpuwise").rglob("*.py"))}
    modules = set(paths)
    return {name: imported_modules(path, name, modules) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan), each closed on itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = {stack.pop()}
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.append(_circle_in(graph, group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest circle through the group's first module, for the failure message."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return sorted(group)  # unreachable for a strongly connected group


def test_no_import_cycles_between_modules() -> None:
    graph = import_graph(SRC)
    assert "gpuwise.sizing.job.job" in graph["gpuwise.sizing.memory.estimate"]  # it reads
    found = [" → ".join(c) for c in cycles(graph)]
    assert found == [], "import circles (move the shared piece down):\n" + "\n".join(found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "gpuwise" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_the_checker_sees_a_lazy_circle_and_a_relative_one(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def f():\n    from gpuwise.b import g\n",
            "b.py": "from . import a\n",
            "c.py": "from .d import x\n",
            "d.py": "import gpuwise.c\nx = 1\n",
        },
    )
    assert cycles(import_graph(root)) == [
        ["gpuwise.a", "gpuwise.b", "gpuwise.a"],
        ["gpuwise.c", "gpuwise.d", "gpuwise.c"],
    ]


def test_type_checking_imports_and_reexports_are_not_circles(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "p/__init__.py": "from gpuwise.p.m import X\n",
            "p/m.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from gpuwise.q import Y\nX = 1\n",
            "q.py": "from gpuwise.p.m import X\nY = X\n",
        },
    )
    assert cycles(import_graph(root)) == []


def test_a_module_importing_its_own_package_init_is_a_circle(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "p/__init__.py": "from gpuwise.p.m import X\nZ = 2\n",
            "p/m.py": "from gpuwise.p import Z\nX = Z\n",
        },
    )
    assert cycles(import_graph(root)) == [["gpuwise.p", "gpuwise.p.m", "gpuwise.p"]]
