"""Every test module that drives the native kernels directly carries the ``native`` marker,
so that tools/asan_check.sh (``pytest -m native``) runs it under ASan + UBSan."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
NATIVE_MODULES = {"_core", "_impl"}  # the extension, and the switch between it and its twin


def drives_the_core(tree: ast.Module) -> bool:
    """True if the module imports ``rlblocks._core`` / ``rlblocks._impl``, reads
    ``<something>._core``, or uses tests/conftest.py's ``impl`` fixture or ``both_impls``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "rlblocks":
            if any(alias.name in NATIVE_MODULES for alias in node.names):
                return True
        if isinstance(node, (ast.ImportFrom, ast.Import)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names]
            if any(name.split(".")[-1] in NATIVE_MODULES and "rlblocks" in name for name in names):
                return True
        if isinstance(node, ast.Attribute) and node.attr in NATIVE_MODULES:
            return True
        if isinstance(node, ast.Name) and node.id == "both_impls":  # tests/conftest.py
            return True
        if isinstance(node, ast.FunctionDef) and any(a.arg == "impl" for a in node.args.args):
            return True  # the `impl` fixture: once on the C++ kernels, once on the twin
    return False


def marked_native(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", "") == "pytestmark" for target in node.targets
        ):
            return "pytest.mark.native" in ast.unparse(node.value)
    return False


def test_modules_that_drive_the_core_are_marked_native() -> None:
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        if drives_the_core(tree) and not marked_native(tree):
            unmarked.append(str(path.relative_to(TESTS)))
    assert not unmarked, (
        f"{unmarked} drive the native kernels: add `pytestmark = pytest.mark.native` "
        "below the imports so that tools/asan_check.sh runs them under the sanitizers"
    )


def test_the_check_sees_each_way_of_reaching_the_core() -> None:
    for source in (
        "from rlblocks import _core",
        "import rlblocks._core",
        "from rlblocks._core import tanh",
        "import rlblocks as rb\nrb._core.tanh",
        "from rlblocks import _impl",
        "def test_x(impl):\n    pass",
        "a, b = both_impls(f)",
    ):
        assert drives_the_core(ast.parse(source)), source
    assert not drives_the_core(ast.parse("from rlblocks import image\nimage.gray_resize"))
    assert marked_native(ast.parse("import pytest\npytestmark = pytest.mark.native"))
    assert marked_native(ast.parse("pytestmark = [pytest.mark.native, pytest.mark.slow]"))
    assert not marked_native(ast.parse("pytestmark = pytest.mark.slow"))


def skips_itself_without_ray(source: str) -> bool:
    """True if the source skips on Ray's absence by hand (``importorskip("ray")`` inside a
    function, or a ``skipif`` on ``find_spec("ray")``) rather than by the ``ray`` marker."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call) and ast.unparse(inner.func).endswith("importorskip"):
                    if [ast.unparse(a) for a in inner.args[:1]] == ["'ray'"]:
                        return True
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("find_spec"):
            if [ast.unparse(a) for a in node.args[:1]] == ["'ray'"]:
                return True
    return False


def test_tests_that_need_ray_carry_the_ray_marker() -> None:
    """CI's Ray step runs ``-m ray``: a test outside tests/rllib that skips itself on Ray's
    absence by hand would run in no step with Ray."""
    exempt = {"conftest.py", "test_ray_extra_missing.py"}  # they test Ray's absence
    by_hand = [
        path.name
        for path in sorted(TESTS.glob("*.py"))
        if path.name not in exempt and skips_itself_without_ray(path.read_text())
    ]
    assert not by_hand, f"{by_hand}: mark the tests that need Ray `@pytest.mark.ray` instead"


def test_the_ray_check_sees_both_ways_of_skipping_by_hand() -> None:
    assert skips_itself_without_ray('def test_x():\n    pytest.importorskip("ray")')
    assert skips_itself_without_ray(
        '@pytest.mark.skipif(find_spec("ray") is None, reason="")\ndef test_x():\n    pass'
    )
    assert skips_itself_without_ray(
        'def test_x():\n    if importlib.util.find_spec("ray") is None:\n        pytest.skip("ray")'
    )
    assert not skips_itself_without_ray('pytest.importorskip("ray")')  # a module-level skip
    assert not skips_itself_without_ray('def test_x():\n    pytest.importorskip("pettingzoo")')
