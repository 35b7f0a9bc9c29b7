"""The hand-maintained type stub of the native module lists exactly what it exports, and
declares each function and method with the extension's parameter names and defaults."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import rlblocks
from rlblocks import _core

pytestmark = pytest.mark.native

STUB = ast.parse(Path(rlblocks.__file__).with_name("_core.pyi").read_text())
Params = list[tuple[str, "str | None"]]  # (name, default as source text or None)


def _split_top_level(text: str) -> list[str]:
    """Split ``a: X[b, c], d: Y = 1`` at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return parts + [tail] if tail else parts


def _normalise(default: str) -> str:
    try:
        return repr(ast.literal_eval(default))
    except (ValueError, SyntaxError):
        return default


def extension_params(obj: Any) -> Params:
    """Parameter names and defaults from pybind11's signature line ``f(a: T, b: T = d) -> R``."""
    line = (obj.__doc__ or "").splitlines()[0]
    inside = line[line.index("(") + 1 : line.rindex(") ->")]
    params: Params = []
    for part in _split_top_level(inside):
        name_and_type, _, default = part.partition(" = ")
        name = name_and_type.partition(":")[0].strip()
        params.append((name, _normalise(default) if default else None))
    return params


def stub_params(node: ast.FunctionDef) -> Params:
    args = node.args.posonlyargs + node.args.args
    defaults: list[ast.expr | None] = [None] * (len(args) - len(node.args.defaults))
    defaults += node.args.defaults
    return [
        (arg.arg, None if default is None else _normalise(ast.unparse(default)))
        for arg, default in zip(args, defaults, strict=True)
    ]


def stub_functions() -> dict[str, ast.FunctionDef]:
    """``name`` for module functions, ``Class.name`` for methods (properties left out)."""
    found: dict[str, ast.FunctionDef] = {}
    for node in STUB.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                is_property = isinstance(item, ast.FunctionDef) and any(
                    getattr(d, "id", "") == "property" for d in item.decorator_list
                )
                if isinstance(item, ast.FunctionDef) and not is_property:
                    found[f"{node.name}.{item.name}"] = item
    return found


def test_stub_matches_the_extension() -> None:
    declared = {
        node.name
        for node in STUB.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    }
    exported = {name for name in dir(_core) if not name.startswith("_")}
    assert declared == exported, (
        f"_core.pyi is out of date: missing {sorted(exported - declared)}, "
        f"stale {sorted(declared - exported)}"
    )
    listed = next(
        ast.literal_eval(node.value)
        for node in STUB.body
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "__all__"
    )
    assert sorted(listed) == listed and set(listed) == exported, (
        f"_core.pyi __all__ must list every export, sorted: missing "
        f"{sorted(exported - set(listed))}"
        f", stale {sorted(set(listed) - exported)}"
    )


def test_stub_methods_match_the_extension() -> None:
    methods = {
        f"{cls}.{name}"
        for cls in dir(_core)
        if isinstance(getattr(_core, cls), type)
        for name, member in vars(getattr(_core, cls)).items()
        if callable(member) and (name == "__init__" or not name.startswith("_"))
    }
    declared = {name for name in stub_functions() if "." in name}
    assert declared == methods, (
        f"_core.pyi methods out of date: missing {sorted(methods - declared)}, "
        f"stale {sorted(declared - methods)}"
    )


@pytest.mark.parametrize("name", sorted(stub_functions()))
def test_stub_signature_matches_the_extension(name: str) -> None:
    owner, _, attr = name.rpartition(".")
    obj = getattr(getattr(_core, owner), attr) if owner else getattr(_core, name)
    assert stub_params(stub_functions()[name]) == extension_params(obj), (
        f"_core.pyi declares {name} with other parameter names or defaults than the extension"
    )


def test_the_signature_parser_reads_nested_types_and_defaults() -> None:
    def f() -> None:
        """f(self: X, a: typing.Sequence[int, str], b: object = None, c: bool = True) -> None"""

    assert extension_params(f) == [("self", None), ("a", None), ("b", "None"), ("c", "True")]
