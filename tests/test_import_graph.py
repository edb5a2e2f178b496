"""The import graph of the source packages: no run-time cycle inside a package,
and the layering holds: ``control_plane`` and ``mcp_gateway`` never import each
other, ``shared`` imports neither.

Edges come from reading each module's ``import`` statements (``ast``), not from
running them, so a cycle shows even where the import order happens to work
today. ``from X import Y`` reads X's namespace, so it is an edge to X (and to
``X.Y`` too when that is a module); ``import X.Y`` and ``from X.Y import z``
are edges to ``X.Y`` alone: a package's ``__init__`` is entered before its
submodules load, but they never read its namespace. Imports under
``if TYPE_CHECKING:`` do not run, so the cycle check leaves them out; the
layering check counts them (a type is a dependency too).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
Graph = dict[str, set[str]]


def module_names(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def _import_nodes(tree: ast.AST, *, run_time_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, in functions too; ``if TYPE_CHECKING:`` bodies left
    out when ``run_time_only`` (their ``else:`` branch runs, so it stays)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif run_time_only and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names one import statement needs loaded."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        anchor = module.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(packages: tuple[str, ...], *, run_time_only: bool, root: Path = ROOT) -> Graph:
    """Module -> the modules (of any of ``packages``) its import statements need."""
    modules: dict[str, Path] = {}
    for package in packages:
        modules |= module_names(package, root)
    graph: Graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        graph[name] = {
            target
            for node in _import_nodes(tree, run_time_only=run_time_only)
            for target in _targets(node, name, is_package)
            if target in modules and target != name
        }
    return graph


def cycle_groups(graph: Graph) -> list[list[str]]:
    """The groups of modules that import each other (strongly connected), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graphs are small
        index[node] = low[node] = len(index)
        on_stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = on_stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def cycle_through(graph: Graph, group: list[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in a cycle group but no cycle returns to it")


PACKAGES = ["control_plane", "mcp_gateway", "shared"]
CYCLE_FREE = PACKAGES


@pytest.mark.parametrize("package", CYCLE_FREE)
def test_no_run_time_import_cycle_inside_the_package(package: str) -> None:
    graph = import_graph((package,), run_time_only=True)
    groups = cycle_groups(graph)
    assert groups == [], "\n".join(
        f"{', '.join(group)} (e.g. {' -> '.join(cycle_through(graph, group))})" for group in groups
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_of_the_package_imports_on_its_own(package: str) -> None:
    """Each module imported first, with no first-party module loaded: no order-dependent import."""
    script = (
        "import importlib, sys\n"
        f"names = {sorted(n for n in module_names(package) if not n.endswith('__main__'))!r}\n"
        "failed = []\n"
        "for name in names:\n"
        # Every first-party package is forgotten, so state one of them keeps (the shared
        # metrics registry) is made anew with the module that registers into it.
        f"    for loaded in [m for m in sys.modules if m.split('.')[0] in {PACKAGES!r}]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except (ImportError, AttributeError) as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


LAYERS = {
    "control_plane": {"mcp_gateway"},
    "mcp_gateway": {"control_plane"},
    "shared": {"control_plane", "mcp_gateway"},
}


@pytest.mark.parametrize(("package", "forbidden"), sorted(LAYERS.items()))
def test_the_package_imports_none_of_the_packages_above_or_beside_it(
    package: str, forbidden: set[str]
) -> None:
    graph = import_graph(("control_plane", "mcp_gateway", "shared"), run_time_only=False)
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.split(".")[0] == package
        for target in targets
        if target.split(".")[0] in forbidden
    )
    assert crossing == []


def test_the_cycle_finder_finds_a_cycle_through_a_package_namespace() -> None:
    graph: Graph = {"p": {"p.a"}, "p.a": {"p.b", "p"}, "p.b": {"p.c"}, "p.c": {"p.b"}, "q": {"p"}}
    assert cycle_groups(graph) == [["p", "p.a"], ["p.b", "p.c"]]
    assert cycle_through(graph, ["p", "p.a"]) == ["p", "p.a", "p"]
    assert cycle_groups({"p": {"p.a"}, "p.a": {"p.b"}, "p.b": set()}) == []


def test_the_graph_resolves_relative_imports_and_leaves_type_checking_ones_out_of_run_time(
    tmp_path: Path,
) -> None:
    (tmp_path / "p" / "sub").mkdir(parents=True)
    (tmp_path / "p" / "__init__.py").write_text("from p.sub import a\n")
    (tmp_path / "p" / "sub" / "__init__.py").write_text("")
    (tmp_path / "p" / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n"
        "    from p.e import Thing\n"
        "else:\n"
        "    import p.sub.c\n"
        "def later():\n"
        "    from .. import d\n"
    )
    for name in ("b", "c"):
        (tmp_path / "p" / "sub" / f"{name}.py").write_text("")
    (tmp_path / "p" / "d.py").write_text("")
    (tmp_path / "p" / "e.py").write_text("")
    run_time = import_graph(("p",), run_time_only=True, root=tmp_path)
    assert run_time["p.sub.a"] == {"p.sub", "p.sub.b", "p.sub.c", "p", "p.d"}
    assert cycle_groups(run_time) == [["p", "p.sub.a"]]  # through the function-level import
    every = import_graph(("p",), run_time_only=False, root=tmp_path)
    assert every["p.sub.a"] == {*run_time["p.sub.a"], "p.e"}


# The gateway's layers, top to bottom (docs/architecture.md, "Layers of the gateway"):
# a sub-package (or top-level module) imports only those below it, type imports too.
GATEWAY_LAYERS = (
    "app",
    "inbox",
    "transport",
    "pipeline",
    "approvals",
    "webhooks",
    "catalog",
    "sessions",
    "upkeep",
    "request_ids",
    "vocabulary",
)


def _unit(module: str) -> str | None:
    """The sub-package (or top-level module) of a gateway module; None for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_gateway_sub_package_has_a_declared_layer() -> None:
    units = {_unit(name) for name in module_names("mcp_gateway")} - {None}
    assert units - set(GATEWAY_LAYERS) == set()


def test_gateway_sub_packages_import_only_the_layers_below_them() -> None:
    rank = {unit: index for index, unit in enumerate(GATEWAY_LAYERS)}
    graph = import_graph(("mcp_gateway",), run_time_only=False)
    against = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if (source := _unit(module)) is not None
        and (lower := _unit(target)) is not None
        and source != lower
        and rank.get(lower, -1) <= rank.get(source, -1)
    )
    assert against == []


def test_no_gateway_import_hides_behind_type_checking() -> None:
    """A TYPE_CHECKING import is how a cycle hides; with one direction none is needed."""
    every = import_graph(("mcp_gateway",), run_time_only=False)
    run_time = import_graph(("mcp_gateway",), run_time_only=True)
    hidden = sorted(f"{m} -> {t}" for m in every for t in every[m] - run_time[m])
    assert hidden == []
