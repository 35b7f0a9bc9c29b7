"""The package's import graph has no cycles: every module can be read (and imported)
knowing only the modules below it. Imports inside functions count too (a cycle hidden
in a function is still a cycle); ``if TYPE_CHECKING:`` imports do not run and do not
count. A module's edge goes to the module it names, not to its parent packages."""

from __future__ import annotations

import ast
from pathlib import Path

import rlblocks

PACKAGE = Path(rlblocks.__file__).parent


def module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py*"):
        if path.suffix not in (".py", ".pyi") or "__pycache__" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files.setdefault(name, path)
    return files


def type_checking_nodes(tree: ast.AST) -> set[ast.AST]:
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(ast.walk(node))
    return skipped


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        if path.suffix == ".pyi":
            continue
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        skipped = type_checking_nodes(tree)
        for node in ast.walk(tree):
            if node in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            else:
                continue
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "rlblocks.train.fast" in graph and "rlblocks._core" in graph  # the walk sees them
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_fast_paths_never_import_the_policy_or_the_learner() -> None:
    graph = import_graph()
    fast = {name for name in graph if name.startswith("rlblocks.train.fast")}
    reached = set()
    todo = list(fast)
    while todo:
        for w in graph[todo.pop()] - reached:
            reached.add(w)
            todo.append(w)
    assert not reached & {
        "rlblocks.train.policy",
        "rlblocks.train.learner",
        "rlblocks.train.ppo",
        "rlblocks.train.envs",
        "rlblocks.train.runner",
    }


def command_line_importers(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The modules outside ``rlblocks.cli`` that import it (or one of its modules)."""

    def in_cli(name: str) -> bool:
        return name == "rlblocks.cli" or name.startswith("rlblocks.cli.")

    return {
        name: sorted(filter(in_cli, targets))
        for name, targets in graph.items()
        if not in_cli(name) and any(in_cli(t) for t in targets)
    }


def test_no_library_module_imports_the_command_line() -> None:
    graph = import_graph()
    assert "rlblocks.cli.train" in graph and "rlblocks.cli" in graph["rlblocks.cli.__main__"]
    assert command_line_importers(graph) == {}


def test_the_command_line_check_finds_an_importer() -> None:
    graph = {
        "rlblocks.train.ppo": {"rlblocks.cli.train_stops"},
        "rlblocks.cli": {"rlblocks.cli.train"},
        "rlblocks.cli.train": {"rlblocks.train.ppo"},
        "rlblocks.client": {"rlblocks.cli"},
    }
    assert command_line_importers(graph) == {
        "rlblocks.train.ppo": ["rlblocks.cli.train_stops"],
        "rlblocks.client": ["rlblocks.cli"],
    }
