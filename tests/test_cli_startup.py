"""The ``rlblocks`` process trains without importing torch's compiler
(:mod:`rlblocks.cli._startup`, and :func:`rlblocks.train.fast.adam_step`, which never calls
``Optimizer.step``), and its Adam steps are torch's own: each case runs in a fresh
interpreter, where nothing has imported ``torch._dynamo`` yet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import rlblocks

_SRC = str(Path(rlblocks.__file__).resolve().parents[1])

_ADAM = """
import sys, torch
from rlblocks.cli import _startup
from rlblocks.train.fast import adam_step, make_adam
_startup.standalone = {standalone}
_startup.before_trainer()
torch.manual_seed(0)
net = torch.nn.Linear(3, 2)
opt = make_adam(list(net.parameters()), lr=0.1)
before = net.weight.detach().clone()
for _ in range(3):
    opt.zero_grad()
    net(torch.ones(4, 3)).square().sum().backward()
    if not {standalone} or not adam_step(opt):  # the control: torch's own step
        opt.step()
state = opt.state_dict()
again = make_adam(list(net.parameters()), lr=0.1)
again.load_state_dict(state)
assert again.state_dict()["state"][0]["step"] == 3, again.state_dict()
print(float((net.weight - before).abs().sum()), "torch._dynamo" in sys.modules)
"""


def _run(standalone: bool) -> tuple[float, bool]:
    code = _ADAM.format(standalone=standalone)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": _SRC, "OMP_NUM_THREADS": "1", "PATH": ""},
    )
    assert out.returncode == 0, out.stderr
    moved, dynamo = out.stdout.split()
    return float(moved), dynamo == "True"


def test_the_cli_process_builds_and_steps_optimizers_without_importing_torchs_compiler() -> None:
    moved, dynamo = _run(standalone=True)
    assert not dynamo
    # the same three Adam steps as in a process left as torch makes it
    assert (moved, True) == _run(standalone=False)
