"""The import graph has no cycles: ``multiworker.spec`` strictly, the whole package as a goal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

grimp = pytest.importorskip("grimp")  # installed by import-linter (the dev extra)


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("multiworker", cache_dir=None)


def import_cycles(graph) -> list[list[str]]:
    """Every import cycle as the sorted modules of one strongly connected component (Tarjan, iterative)."""
    modules = set(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> tuple[str, Iterator[str]]:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        return module, iter(sorted(graph.find_modules_directly_imported_by(module) & modules))

    for root in sorted(modules):
        if root in index:
            continue
        work = [visit(root)]
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    work.append(visit(other))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1 or module in graph.find_modules_directly_imported_by(module):
                        cycles.append(sorted(component))
    return cycles


def describe(graph, cycle: list[str]) -> str:
    """One cycle as a chain of imports, e.g. ``a -> b -> a``."""
    first = cycle[0]
    for imported in sorted(graph.find_modules_directly_imported_by(first) & set(cycle)):
        chain = graph.find_shortest_chain(importer=imported, imported=first)
        if chain:
            return " -> ".join((first, *chain))
    return ", ".join(cycle)


def test_spec_has_no_import_cycle(graph):
    """No cycle passes through a module of multiworker.spec (function-level imports count too)."""
    cycles = [c for c in import_cycles(graph) if any(m == "multiworker.spec" or m.startswith("multiworker.spec.")
                                                      for m in c)]
    assert not cycles, "import cycles through multiworker.spec:\n" + "\n".join(describe(graph, c) for c in cycles)


def test_finds_a_cycle():
    """The check itself: a graph with a -> b -> c -> a and a self-import has two cycles."""
    g = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a"), ("p.e", "p.e")):
        g.add_import(importer=importer, imported=imported)
    assert import_cycles(g) == [["p.a", "p.b", "p.c"], ["p.e"]]


def test_package_has_no_import_cycle(graph):
    """No cycle anywhere in the package (function-level imports count too)."""
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(describe(graph, c) for c in cycles)


def test_private_spec_modules_stay_in_their_package(graph):
    """A ``_name`` module under multiworker.spec is imported only from inside its own package."""
    outside = []
    for module in sorted(graph.modules):
        if not module.startswith("multiworker.spec.") or not module.rpartition(".")[2].startswith("_"):
            continue
        package = module.rpartition(".")[0]
        outside += [f"{importer} -> {module}" for importer in sorted(graph.find_modules_that_directly_import(module))
                    if importer != package and not importer.startswith(package + ".")]
    assert not outside, "private modules imported from outside their package:\n" + "\n".join(outside)
