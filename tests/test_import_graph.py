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
        "rlblocks.train.learners.ppo",
        "rlblocks.train.learners.dqn",
        "rlblocks.train.learners.sac",
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


# --- tiers ---------------------------------------------------------------------------------
#: CONTRIBUTING.md's import tiers, top to bottom: a module may import its own tier and the
#: tiers below, never one above. A module's tier is that of the longest entry naming it or a
#: package above it (``rllib._ray``, the Ray gateway, sits at the bottom with the extension).
TIERS: list[tuple[str, ...]] = [
    ("cli",),  # the command line
    ("rllib",),  # the RLlib integration
    ("export", "benchmarking"),  # exported policies; `rlblocks bench`
    ("train",),  # the native trainers: one Trainer base, the algorithms siblings under it
    ("multiagent",),  # the multi-agent env side that train/ and rllib/ drive
    ("catalog", "compat"),  # the catalog builds models; RLlib's names for them
    ("models",),
    ("masks", "distributions"),
    # the kernels' Python side and the plain data it reads
    (
        "rlblocks",
        "preprocessors",
        "layout",
        "mask_keys",
        "restore",
        "filters",
        "running_stat",
        "image",
        "framestack",
        "sequences",
        "replay",
        "her",
        "spaces",
        "nest",
        "values",
        "views",
        "utils",
        "config",
        "config_fields",
        "activations",
        "envs",
        "wrappers",
    ),
    ("_core", "_impl", "_reference", "rllib._ray"),  # the extension, its twins, Ray's gateway
]


def tier_of(module: str) -> int:
    """The index in :data:`TIERS` of ``module`` (``rlblocks.x.y``; 0 is the top)."""
    parts = module.split(".")[1:] or ["rlblocks"]
    best, depth = -1, 0
    for i, names in enumerate(TIERS):
        for name in names:
            prefix = name.split(".")
            if parts[: len(prefix)] == prefix and len(prefix) > depth:
                best, depth = i, len(prefix)
    if best < 0:
        raise KeyError(f"{module} has no tier: add its top-level name to TIERS")
    return best


def climbing_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The ``(importer, imported)`` edges that go up a tier."""
    return sorted(
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if tier_of(target) < tier_of(name)
    )


def test_every_module_has_a_tier() -> None:
    for name in import_graph():
        tier_of(name)


def test_no_module_imports_from_a_higher_tier() -> None:
    assert climbing_imports(import_graph()) == []


def test_the_tier_check_finds_the_arrows_that_climbed() -> None:
    """The arrows issue 43 removed: each is caught."""
    graph = {
        "rlblocks.models.qnetwork": {"rlblocks.catalog"},
        "rlblocks.masks": {"rlblocks.models.modelv2"},
        "rlblocks.export.exporter": {"rlblocks.rllib.export"},
        "rlblocks._reference.squashed_gaussian": {"rlblocks.distributions.base"},
        "rlblocks.wrappers.ray_vector": {"rlblocks.rllib._ray"},
        "rlblocks.catalog": {"rlblocks.models.action_mask"},
    }
    assert climbing_imports(graph) == [
        ("rlblocks._reference.squashed_gaussian", "rlblocks.distributions.base"),
        ("rlblocks.export.exporter", "rlblocks.rllib.export"),
        ("rlblocks.masks", "rlblocks.models.modelv2"),
        ("rlblocks.models.qnetwork", "rlblocks.catalog"),
    ]


# --- Ray ---------------------------------------------------------------------------------------
RAY_GATEWAY = "rlblocks.rllib._ray"


def ray_importers(sources: dict[str, str]) -> dict[str, list[str]]:
    """``{module: [the Ray modules it imports]}`` for each module of ``sources``
    (``{name: source}``) other than the gateway that imports Ray (``if TYPE_CHECKING:``
    and function-level imports included)."""

    def is_ray(name: str) -> bool:
        return name == "ray" or name.startswith("ray.")

    found: dict[str, list[str]] = {}
    for name, source in sources.items():
        if name == RAY_GATEWAY:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                hits = [alias.name for alias in node.names if is_ray(alias.name)]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                hits = [node.module] if node.module and is_ray(node.module) else []
            else:
                continue
            if hits:
                found.setdefault(name, []).extend(hits)
    return found


def test_ray_is_imported_only_through_the_gateway() -> None:
    sources = {
        name: path.read_text() for name, path in module_files().items() if path.suffix == ".py"
    }
    assert RAY_GATEWAY in sources and "import ray" in sources[RAY_GATEWAY]
    assert ray_importers(sources) == {}


def test_the_ray_check_finds_each_way_of_importing_ray() -> None:
    sources = {
        RAY_GATEWAY: "import ray\nfrom ray.rllib.core import Columns",
        "rlblocks.a": "import ray",
        "rlblocks.b": "def f():\n    from ray.tune.registry import register_env",
        "rlblocks.c": "import ray.exceptions as e",
        "rlblocks.d": "from rlblocks.rllib._ray import ray\nfrom . import ray_vec\nimport raylib",
        "rlblocks.e": "from ray import get",
    }
    assert ray_importers(sources) == {
        "rlblocks.a": ["ray"],
        "rlblocks.b": ["ray.tune.registry"],
        "rlblocks.c": ["ray.exceptions"],
        "rlblocks.e": ["ray"],
    }


def test_contributing_states_the_tiers() -> None:
    """CONTRIBUTING.md's list names every tier entry, in the same order."""
    text = (Path(__file__).resolve().parents[1] / "CONTRIBUTING.md").read_text()
    section = text[text.index("**Imports go down, never up.**") :]
    section = section[: section.index("tests/test_import_graph.py` holds these tiers")]
    where = []
    for names in TIERS:
        for name in names:
            hits = [section.find(f"`{p}`") for p in (f"rlblocks.{name}", name)]
            assert max(hits) >= 0, f"CONTRIBUTING.md's tiers do not name {name}"
            where.append(max(hits))
    firsts = [where[sum(map(len, TIERS[:i]))] for i in range(len(TIERS))]
    assert firsts == sorted(firsts)
