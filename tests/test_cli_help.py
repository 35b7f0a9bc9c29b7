"""``rlblocks --help`` and ``rlblocks COMMAND --help`` for every command import no torch, no
Ray and none of the library a command runs (the command line sits above the library and
imports it only to run a command), and show no reStructuredText markup; ``rlblocks tuned``
lists the tuned configs without torch either.

Each check runs in a fresh interpreter, as the installed console script would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import rlblocks

COMMANDS = ["bench", "evaluate", "export", "plot", "train", "tuned"]

#: What no help text may import: torch, Ray and the library the commands run.
HEAVY = ("torch", "ray", "rlblocks.train", "rlblocks.export", "rlblocks.rllib")
#: But ``rlblocks train --help`` lists the config keys from the config tables themselves
#: (rlblocks.cli.train_help): these modules, which import neither torch nor Ray.
CONFIG_TABLES = [
    "rlblocks.train",
    "rlblocks.train.offpolicy_checks",
    "rlblocks.train.offpolicy_config",
    "rlblocks.train.trainer_config",
]

_PROBE = """
import contextlib, io, json, sys
from rlblocks.cli import main

heavy = tuple(json.loads(sys.argv[1]))
out = {}
for argv in json.loads(sys.argv[2]):
    buf = io.StringIO()
    code = None
    with contextlib.redirect_stdout(buf):
        try:
            main([*argv, "--help"])
        except SystemExit as exit:
            code = exit.code
    out[" ".join(argv)] = {"code": code, "text": buf.getvalue()}
imported = sorted(m for m in sys.modules if m.split(".")[0] in heavy or m.startswith(heavy))
with contextlib.redirect_stdout(io.StringIO()) as buf:
    main(["tuned"])
print(json.dumps({"help": out, "imported": imported, "tuned": buf.getvalue(),
                  "tuned_torch": "torch" in sys.modules}))
"""


def probe() -> dict[str, Any]:
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    argvs = [[], *([c] for c in COMMANDS)]
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": where},
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_every_help_imports_no_torch_nor_the_library_and_shows_no_rst() -> None:
    got = probe()
    assert got["imported"] == CONFIG_TABLES
    usage = re.search(r"\{([a-z,]+)\}", got["help"][""]["text"])
    assert usage is not None and sorted(usage.group(1).split(",")) == COMMANDS  # all covered
    for command, shown in got["help"].items():
        assert shown["code"] == 0, command
        assert shown["text"].startswith(f"usage: rlblocks {command}".rstrip()), command
        for raw in ("``", ":class:", ":mod:", ":func:", ":meth:", ":data:"):
            assert raw not in shown["text"], (command, raw)
    assert "stateless_cartpole_attention" in got["tuned"]
    assert got["tuned_torch"] is False
