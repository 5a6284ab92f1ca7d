"""The package graph is one-way (DESIGN.md, "Layers"), read from the imports themselves.

Every ``import gpuwise.X`` and ``from gpuwise.X import ...`` in ``src/gpuwise`` counts, also
inside functions: a lazy import is still a dependency. A package may import only packages
of a lower layer; two packages of one layer may not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "gpuwise"

LAYERS: dict[str, int] = {
    # the shared vocabulary and helpers every layer may use
    "errors": 0,
    "records": 0,
    "_lazy": 0,
    "_version": 0,
    # the one rule for stop signals (SIGINT, SIGTERM, SIGHUP) every long command follows
    "interrupts": 0,
    # files and child processes written and run safely
    "atomic": 1,
    "childproc": 1,
    "user_code": 1,
    # FLOP formulas of aten ops: counted at run time (profiling) and in sizing
    "flop_formulas": 1,
    # hardware and process facts
    "telemetry": 2,
    "distributed": 2,
    # the environment check reads the devices
    "doctor": 3,
    # step timing; sizing reads device facts
    "profiling": 3,
    "sizing": 3,
    # libraries users call: the data layer registers its loaders with the step hooks
    "data": 4,
    "diagnose": 4,
    # what a profiled run achieved (MFU, energy), read against sizing's GPU catalog
    "efficiency": 4,
    "report": 5,
    # serving builds on the data layer's JPEG and buffer parts
    "pipeline": 5,
    # on top, like the command line: the explicit API with its diagnosis, engines
    "session": 6,
    "integrations": 6,
    # `gpuwise try` runs the profiler per fix and renders with the report layer
    "trials": 6,
    "cli": 7,
    "__main__": 8,
    "__init__": 8,
}

ALLOWED: dict[tuple[str, str], str] = {}

IMPORTLIB_ALLOWED = {
    "_lazy.py": "the lazy re-exports of package __init__ modules",
    "cli/main.py": "the subcommand table tolerates subcommands that are not installed",
    "records/display.py": "records' notebook display asks the report layer's views by name",
    "user_code.py": "loads the user's own module (package.module:factory)",
}


def imports_of(path: Path) -> set[str]:
    """Top-level gpuwise packages (or modules) imported by ``path``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "gpuwise":
                names = [f"gpuwise.{a.name}" for a in node.names]
        out |= {n.split(".")[1] for n in names if n.startswith("gpuwise.")}
    return out


def package_of(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0].removesuffix(".py")


def edges() -> dict[tuple[str, str], str]:
    """``(importer package, imported package)`` to the first file that makes the edge."""
    out: dict[tuple[str, str], str] = {}
    for path in sorted(SRC.rglob("*.py")):
        source = package_of(path)
        for target in imports_of(path) - {source}:
            out.setdefault((source, target), path.relative_to(SRC).as_posix())
    return out


def test_every_package_has_a_layer() -> None:
    packages = {package_of(p) for p in SRC.rglob("*.py")}
    assert packages <= set(LAYERS), f"give these a layer in LAYERS: {packages - set(LAYERS)}"


def test_imports_point_down_the_layers() -> None:
    back = []
    for (source, target), where in edges().items():
        if LAYERS[target] < LAYERS[source] or (where, target) in ALLOWED:
            continue
        back.append(f"{where} imports gpuwise.{target} (layer {LAYERS[target]} >= ")
        back[-1] += f"{LAYERS[source]} of gpuwise.{source})"
    assert back == []


def test_no_package_cycles() -> None:
    graph: dict[str, set[str]] = {}
    for (source, target), where in edges().items():
        if (where, target) not in ALLOWED:
            graph.setdefault(source, set()).add(target)
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in seen and (cycle := visit(nxt, [*path, node])):
                return cycle
        seen[node] = 2
        return None

    cycles = [c for n in sorted(graph) if n not in seen and (c := visit(n, []))]
    assert cycles == []


def test_no_importlib_loads_of_gpuwise_modules() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where in IMPORTLIB_ALLOWED or "/_site/" in f"/{where}":
            continue
        if "import_module(" in path.read_text(encoding="utf-8"):
            found.append(where)
    assert found == []


def test_the_checker_sees_a_back_edge(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text("def f():\n    from gpuwise.cli.main import main\n")
    assert imports_of(module) == {"cli"}
