"""The README's blocks that need the ``ray`` extra (``<!-- test: requires ray -->``): run in
CI's Ray step, the same way tests/test_docs_blocks.py runs the others."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_docs_blocks import BLOCKS, Block, check_requirements, run_block  # noqa: E402


@pytest.mark.parametrize("block", [b for b in BLOCKS if "ray" in b.requires], ids=lambda b: b.id)
def test_ray_doc_block_runs(block: Block, tmp_path: Path) -> None:
    check_requirements(block)
    run_block(block, tmp_path)
