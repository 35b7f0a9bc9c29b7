"""Every import of the package is provided by what pyproject.toml declares.

A fresh ``pip install .`` must be enough to import every module of rlblocks (a module-level
import of an undeclared package once broke the README's first command for every new user
while CI, on a machine with that package installed by hand, stayed green). Two checks:

* statically, over the source tree: a module-level import must come from a core
  dependency; an import inside a function or a ``try: ... except ImportError`` block may
  come from an optional extra instead;
* dynamically, in a subprocess: every module of the installed package is imported while an
  import hook refuses, to rlblocks' own modules only, every third-party package that is not
  a core dependency (so an installed-but-undeclared package cannot hide the problem).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli", reason="tomli reads pyproject.toml on Python 3.10")

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "python" / "rlblocks"

# Import name -> distribution, for packages that may not be installed here to be asked.
KNOWN_PROVIDERS = {
    "cv2": "opencv-python-headless",
    "yaml": "pyyaml",
    "ale_py": "ale-py",
    "stable_baselines3": "stable-baselines3",
    "sb3_contrib": "sb3-contrib",
    "envpool": "envpool",
    "ray": "ray",
    "onnx": "onnx",
    "onnxruntime": "onnxruntime",
    "tensorboard": "tensorboard",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(req: str) -> str:
    return _norm(re.split(r"[\s\[<>=!~;(]", req.strip(), maxsplit=1)[0])


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_requirement(r) for r in project["dependencies"]}
    extras = {
        _requirement(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs
    } - {"rlblocks"}
    return core, extras


@functools.cache
def _installed_providers() -> dict[str, list[str]]:
    return md.packages_distributions()


def _providers(module: str) -> set[str]:
    found = {_norm(d) for d in _installed_providers().get(module, [])}
    if module in KNOWN_PROVIDERS:
        found.add(_norm(KNOWN_PROVIDERS[module]))
    return found or {_norm(module)}


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a function, a ``TYPE_CHECKING`` block, or a ``try`` catching ImportError."""
    parent = parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
        if isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test):
            return True
        if isinstance(parent, ast.Try):
            for handler in parent.handlers:
                caught = ast.unparse(handler.type) if handler.type is not None else "Exception"
                if re.search(r"\b(ImportError|ModuleNotFoundError|Exception)\b", caught):
                    return True
        parent = parents.get(parent)
    return False


@functools.cache  # each file is parsed once for all the checks below
def _third_party_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, top-level module, guarded) of every absolute third-party import in a file."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: p for p in ast.walk(tree) for child in ast.iter_child_nodes(p)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("rlblocks", "__future__"):
                found.append((node.lineno, top, _guarded(node, parents)))
    return found


def undeclared_imports(core: set[str], extras: set[str]) -> list[str]:
    problems = []
    for path in sorted(SOURCE.rglob("*.py")):
        for line, top, guarded in _third_party_imports(path):
            allowed = core | extras if guarded else core
            if not _providers(top) & allowed:
                kind = "a guarded import" if guarded else "a module-level import"
                needs = "a dependency or an extra" if guarded else "a core dependency"
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: {kind} of {top!r} needs "
                    f"{needs} in pyproject.toml"
                )
    return problems


def test_every_import_is_declared() -> None:
    core, extras = _declared()
    assert undeclared_imports(core, extras) == []


def test_the_static_check_catches_a_missing_dependency() -> None:
    # The check must be able to fail: drop each core dependency that the package imports at
    # module level in turn and watch it be reported.
    core, extras = _declared()
    for dropped in ("optree", "numpy", "gymnasium", "pyyaml"):
        problems = undeclared_imports(core - {dropped}, extras - {dropped})
        assert problems, f"removing {dropped} from pyproject.toml went unnoticed"
    # A guarded import of an extra's package is fine; without that extra it is reported.
    assert any(
        "'ray'" in p or "'stable_baselines3'" in p
        for p in undeclared_imports(core, extras - {"ray", "stable-baselines3"})
    )


# Runs in a fresh interpreter: refuses non-core third-party packages to rlblocks' modules,
# then imports every module of the installed package.
_IMPORT_ALL = textwrap.dedent("""
    import importlib, importlib.abc, importlib.metadata as md, json, pkgutil, re, sys

    allowed = set(json.loads(sys.argv[1]))
    norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
    top_names = {top for top, dists in md.packages_distributions().items()
                 if {norm(d) for d in dists} & allowed}

    class RefuseUndeclared(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in top_names or top == "rlblocks":
                return None
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith(
                    ("importlib", "_frozen_importlib")):
                frame = frame.f_back
            importer = frame.f_globals.get("__name__", "") if frame is not None else ""
            if importer == "rlblocks" or importer.startswith("rlblocks."):
                raise ModuleNotFoundError(f"{importer} imports undeclared {name!r}", name=name)
            return None

    sys.meta_path.insert(0, RefuseUndeclared())
    import rlblocks
    failures, imported = {}, []
    for info in pkgutil.walk_packages(rlblocks.__path__, "rlblocks."):
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except ImportError as err:
            failures[info.name] = str(err)
    print(json.dumps({"failures": failures, "imported": imported}))
""")


def _import_all(allowed: set[str]) -> subprocess.CompletedProcess[str]:
    import rlblocks  # the copy under test (installed, or the source tree on PYTHONPATH)

    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([where, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, json.dumps(sorted(allowed))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT / "tests",
        env=env,
    )


def test_every_module_imports_with_only_the_core_dependencies() -> None:
    core, _ = _declared()
    out = _import_all(core)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    failures = result["failures"]
    assert {"rlblocks.restore", "rlblocks.train.ppo", "rlblocks.cli"} <= set(result["imported"])
    # rlblocks.rllib needs the `ray` extra, rlblocks.export.onnx_policy the `export` extra;
    # importing them without it says so.
    extras = {
        "rlblocks.rllib": "rlblocks[ray]",
        "rlblocks.wrappers.ray_vector": "rlblocks[ray]",
        "rlblocks.export.onnx_policy": "rlblocks[export]",
        "rlblocks.envs.multiagent_zoo": "rlblocks[multiagent]",
        "rlblocks.envs.turn_zoo": "rlblocks[multiagent]",
        "rlblocks.multiagent.aec_parallel": "rlblocks[multiagent]",
    }
    extra_only = {name: err for name, err in failures.items() if name.startswith(tuple(extras))}
    for name, err in extra_only.items():
        hint = next(h for prefix, h in extras.items() if name.startswith(prefix))
        assert hint in err, f"{name}: {err}"
    assert {"rlblocks.export", "rlblocks.export.exporter", "rlblocks.export.runtime"} <= set(
        result["imported"]
    )
    assert {k: v for k, v in failures.items() if k not in extra_only} == {}


def test_the_import_hook_catches_an_undeclared_package() -> None:
    # Without optree declared, the hook refuses it to rlblocks.nest (which needs it).
    core, _ = _declared()
    out = _import_all(core - {"optree"})
    assert out.returncode != 0
    assert "rlblocks.nest imports undeclared 'optree'" in out.stderr, out.stderr[-2000:]
