"""The hand-maintained type stub of the native module lists exactly what it exports."""

from __future__ import annotations

import ast
from pathlib import Path

import rlblocks
from rlblocks import _core


def test_stub_matches_the_extension():
    stub = Path(rlblocks.__file__).with_name("_core.pyi")
    tree = ast.parse(stub.read_text())
    declared = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    }
    exported = {name for name in dir(_core) if not name.startswith("_")}
    assert declared == exported, (
        f"_core.pyi is out of date: missing {sorted(exported - declared)}, "
        f"stale {sorted(declared - exported)}"
    )
    listed = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "__all__"
    )
    assert sorted(listed) == listed and set(listed) == exported, (
        f"_core.pyi __all__ must list every export, sorted: missing "
        f"{sorted(exported - set(listed))}"
        f", stale {sorted(set(listed) - exported)}"
    )
