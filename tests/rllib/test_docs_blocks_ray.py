"""The README's blocks that need the ``ray`` extra (``<!-- test: requires ray -->``): run in
CI's Ray step, the same way tests/test_docs_blocks.py runs the others.

A block joins this module's local Ray through ``RAY_ADDRESS`` (what a user's
``ray.init()`` and ``rlblocks train --backend rllib`` do where it is set), so that each
command does not start and stop a Ray of its own; a block marked ``<!-- test: own-ray -->``
starts its own, as a user's first command on a machine without Ray running does."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from test_docs_blocks import BLOCKS, Block, check_requirements, run_block  # noqa: E402

RAY_BLOCKS = [b for b in BLOCKS if "ray" in b.requires]


def test_one_ray_block_starts_its_own_ray() -> None:
    """The command line's own start of a local Ray (no ``RAY_ADDRESS``) stays tested."""
    assert [b for b in RAY_BLOCKS if b.own_ray and b.language == "bash"]


@pytest.mark.parametrize("block", RAY_BLOCKS, ids=lambda b: b.id)
def test_ray_doc_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    check_requirements(block)
    if not block.own_ray:
        ray: Any = request.getfixturevalue("local_ray")
        address = ray.get_runtime_context().gcs_address
        block = dataclasses.replace(block, env={**block.env, "RAY_ADDRESS": address})
    run_block(block, tmp_path)
