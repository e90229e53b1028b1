"""The package's shape: no import cycles (module-level or inside functions), and no long
functions."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "mtdnn"
# folders installed under mtdnn from the top of the repository (setup.cfg's package_dir)
MAPPED = {REPO / "data_prep": "mtdnn.data_prep", REPO / "task_defs": "mtdnn.task_defs"}


def module_name(path: Path) -> str:
    for folder, package in MAPPED.items():
        if path.is_relative_to(folder):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            break
    else:
        parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> list[Path]:
    """Every module of the installed package, wherever its folder is in the repository."""
    return [*PACKAGE.rglob("*.py"), *(p for folder in MAPPED for p in folder.rglob("*.py"))]


def imports() -> dict[str, set[str]]:
    """Each mtdnn module -> the mtdnn modules it imports, wherever in it the import is."""
    modules = {module_name(p): p for p in sources()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    graph = imports()
    # a package imports its own submodules to re-export them: not a cycle of concepts
    for name in graph:
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")
                       or not (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").is_file()}
    assert cycles(graph) == []


def test_no_function_over_sixty_lines() -> None:
    long = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} "
                                f"({length} lines)")
    assert long == []


def test_no_module_over_450_lines() -> None:
    """A module longer than this holds more than one concept: split it along its seams."""
    long = [f"{path.relative_to(REPO)} ({lines} lines)" for path in sources()
            if (lines := len(path.read_text().splitlines())) > 450]
    assert long == []


# The floors of the package, lowest first: a module imports only from its own subpackage
# and the floors below it (docs/architecture.md draws them). Top-level modules not named
# here are the command line and the public API, above everything.
FLOORS = (
    ("mtdnn._version", "mtdnn.errors", "mtdnn.files", "mtdnn.commandline"),
    ("mtdnn.config",),
    ("mtdnn.tasks", "mtdnn.task_defs"),
    ("mtdnn.data", "mtdnn.data_prep", "mtdnn.modeling"),
    ("mtdnn.runs",),
    ("mtdnn.inference",),
    ("mtdnn.training",),
    ("mtdnn.analysis",),
    ("mtdnn.experiment",),
)


def floor_of(module: str) -> tuple[int, str]:
    """(floor, room) of a module: its subpackage, or a top-level module of the base floor."""
    for level, rooms in enumerate(FLOORS):
        for room in rooms:
            if module == room or module.startswith(room + "."):
                return level, room
    return len(FLOORS), module  # the command line and the public API


def test_subpackages_import_only_from_floors_below() -> None:
    graph = imports()
    wrong = []
    for name, targets in graph.items():
        level, room = floor_of(name)
        for target in targets:
            other, target_room = floor_of(target)
            # the base floor's few modules are one room: errors, files, the command line's
            same_room = target_room == room or level == other == 0
            if not same_room and other >= level and level < len(FLOORS):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_every_module_lives_on_a_floor_or_is_an_entry_point() -> None:
    entry_points = {"mtdnn", "mtdnn.cli", "mtdnn.export", "mtdnn.agreement", "mtdnn.hf_trainer",
                    "mtdnn.smart_probe", "mtdnn.configs"}
    strays = [name for name in imports()
              if floor_of(name)[0] == len(FLOORS) and name not in entry_points]
    assert strays == []
