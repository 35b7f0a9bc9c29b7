"""The README's blocks that need the ``ray`` extra (``<!-- test: requires ray -->``): run in
CI's Ray step, the same way tests/test_docs_blocks.py runs the others.

Each block joins this module's local Ray through ``RAY_ADDRESS`` (what a user's
``ray.init()`` and ``rlblocks train --backend rllib`` do where it is set) rather than start
and stop a Ray of its own per command; the command line's own start of a local Ray is
tests/rllib/test_cli.py::test_train_resume_evaluate's (a new process, no ``RAY_ADDRESS``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from test_docs_blocks import BLOCKS, Block, check_requirements, run_block  # noqa: E402


@pytest.mark.parametrize("block", [b for b in BLOCKS if "ray" in b.requires], ids=lambda b: b.id)
def test_ray_doc_block_runs(block: Block, tmp_path: Path, local_ray: Any) -> None:
    check_requirements(block)
    address = local_ray.get_runtime_context().gcs_address
    run_block(dataclasses.replace(block, env={**block.env, "RAY_ADDRESS": address}), tmp_path)
