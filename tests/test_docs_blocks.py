"""The README is a test: every ```python and ```bash block of README.md, CONTRIBUTING.md
and docs/*.md runs.

Each block is one test case, named ``FILE:LINE`` (the line of its opening fence). Python
blocks run in a fresh interpreter (a new namespace, nothing shared between blocks), bash
blocks under ``bash -euo pipefail``; both in an empty temporary directory, with this
interpreter's ``bin/`` first on PATH (so ``rlblocks`` and ``python`` are the ones under test).

What a block needs beyond that is said by marker lines right before its fence, visible to
anyone reading the Markdown source (HTML comments, so the rendered page does not show them)::

    <!-- test: skip REASON -->                  never run here; the reason is the skip message
    <!-- test: requires MODULE [MODULE ...] --> skipped unless each module imports; blocks
                                                that require ``ray`` run in CI's Ray step
                                                (tests/rllib/test_docs_blocks_ray.py)
    <!-- test: env NAME=VALUE -->               an environment variable for the block
    <!-- test: replace "OLD" "NEW" -->          shorten the block (a long training, ...);
                                                OLD must occur in the block
    <!-- test: timeout SECONDS -->              the block's time limit (default 120 s)

An unknown marker, or a ``replace`` whose text is not in the block, fails the test, so the
rules cannot silently go stale when the docs change.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash")
DEFAULT_TIMEOUT = 120.0
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    """One fenced code block and the test rules written before it."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip: str | None = None
    requires: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    replacements: list[tuple[str, str]] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT

    @property
    def id(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def _apply_marker(block: Block, text: str) -> None:
    words = shlex.split(text)
    if not words:
        raise ValueError(f"{block.id}: empty test marker")
    kind, args = words[0], words[1:]
    if kind == "skip":
        block.skip = text[len("skip") :].strip(" ()") or "skipped by its marker"
    elif kind == "requires" and args:
        block.requires.extend(args)
    elif kind == "env" and len(args) == 1 and "=" in args[0]:
        name, value = args[0].split("=", 1)
        block.env[name] = value
    elif kind == "replace" and len(args) == 2:
        block.replacements.append((args[0], args[1]))
    elif kind == "timeout" and len(args) == 1:
        block.timeout = float(args[0])
    else:
        raise ValueError(
            f"{block.id}: unknown test marker {text!r} (skip, requires, env, replace, timeout)"
        )


def parse_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The python and bash blocks of a Markdown file, with their markers applied.

    Markers are the ``<!-- test: ... -->`` lines directly above the opening fence.
    """
    lines = (path.read_text() if text is None else text).splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{start + 1}: code block is never closed")
        language = m.group(1)
        if language in LANGUAGES:
            block = Block(path, start + 1, language, "\n".join(lines[start + 1 : end]) + "\n")
            markers = []
            j = start - 1
            while j >= 0 and (mm := _MARKER.match(lines[j])):
                markers.append(mm.group(1))
                j -= 1
            for marker in reversed(markers):
                _apply_marker(block, marker)
            blocks.append(block)
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in parse_blocks(path)]


def prepared_code(block: Block) -> str:
    """The block's code after its ``replace`` rules (each must match)."""
    code = block.code
    for old, new in block.replacements:
        if old not in code:
            raise AssertionError(
                f"{block.id}: replace rule {old!r} matches nothing in the "
                "block; update the marker with the docs"
            )
        code = code.replace(old, new)
    return code


def run_block(block: Block, workdir: Path) -> None:
    """Runs one block in ``workdir``; fails the test with its output when it fails."""
    code = prepared_code(block)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    env.pop("PYTHONSTARTUP", None)
    env.update(block.env)
    if block.language == "python":
        # Padded with blank lines so that a traceback names the Markdown file and line.
        source = workdir / "_block.py"
        source.write_text("\n" * block.line + code)
        runner = (
            "import sys; path, name = sys.argv[1], sys.argv[2]; "
            "exec(compile(open(path).read(), name, 'exec'), {'__name__': '__main__'})"
        )
        cmd = [sys.executable, "-c", runner, str(source), str(block.path)]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    try:
        proc = subprocess.run(
            cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=block.timeout
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(
            f"{block.id}: still running after {block.timeout:.0f} s (shorten it with "
            f"a replace marker)\n{err.stdout or ''}\n{err.stderr or ''}"
        )
    if proc.returncode != 0:
        pytest.fail(
            f"{block.id} ({block.language}) exited with {proc.returncode}:\n"
            f"--- code ---\n{code}--- stdout ---\n{proc.stdout[-4000:]}\n"
            f"--- stderr ---\n{proc.stderr[-6000:]}"
        )


def check_requirements(block: Block) -> None:
    """Skips the test when its block is marked skip or needs a module that is missing."""
    if block.skip is not None:
        pytest.skip(block.skip)
    for module in block.requires:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")


BLOCKS = all_blocks()


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if "ray" not in b.requires], ids=lambda b: b.id
)
def test_doc_block_runs(block: Block, tmp_path: Path) -> None:
    check_requirements(block)
    run_block(block, tmp_path)


def test_ray_blocks_run_in_the_ray_step() -> None:
    """Blocks that need Ray are not lost: tests/rllib/test_docs_blocks_ray.py runs them."""
    ray_blocks = [b for b in BLOCKS if "ray" in b.requires]
    assert ray_blocks, "README.md documents the ray extra with examples"
    assert (ROOT / "tests" / "rllib" / "test_docs_blocks_ray.py").is_file()


def test_every_doc_has_been_parsed() -> None:
    """The parser sees the README's blocks, and only python/bash blocks are collected."""
    readme = [b for b in BLOCKS if b.path.name == "README.md"]
    assert len(readme) >= 10
    assert {b.language for b in BLOCKS} <= set(LANGUAGES)
    first = readme[0]
    assert first.language == "bash" and first.skip, "the set-up commands are CI's own step"


def test_parser_markers_and_rules(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "intro",
            "<!-- test: requires nosuchmodule_xyz -->",
            "<!-- test: env A=1 -->",
            '<!-- test: replace "sleep 100" "true" -->',
            "```bash",
            "sleep 100",
            "```",
            "```text",
            "not collected",
            "```",
            "<!-- test: skip (needs a GPU) -->",
            "```python",
            "raise SystemExit(3)",
            "```",
            "```python",
            "import os",
            "assert os.environ['A'] == '1'",
            "```",
        ]
    )
    doc = tmp_path / "doc.md"
    blocks = parse_blocks(doc, text)
    assert [(b.line, b.language) for b in blocks] == [(5, "bash"), (12, "python"), (15, "python")]
    assert blocks[0].requires == ["nosuchmodule_xyz"] and blocks[0].env == {"A": "1"}
    assert prepared_code(blocks[0]) == "true\n"
    assert blocks[1].skip == "needs a GPU"
    assert blocks[2].env == {}  # markers belong to the block right below them only
    with pytest.raises(ValueError, match="unknown test marker"):
        parse_blocks(doc, "<!-- test: frobnicate -->\n```bash\ntrue\n```\n")
    stale = Block(doc, 1, "bash", "echo hi\n", replacements=[("nope", "x")])
    with pytest.raises(AssertionError, match="matches nothing"):
        prepared_code(stale)
    # A failing block fails its test, with the doc's line in the traceback.
    bad = Block(ROOT / "README.md", 40, "python", "x = 1\nraise ValueError('boom')\n")
    with pytest.raises(pytest.fail.Exception, match=r"README\.md\", line 42"):
        run_block(bad, tmp_path)
    with pytest.raises(pytest.fail.Exception, match="exited with 1"):
        run_block(Block(doc, 1, "bash", "false\necho never\n"), tmp_path)
    run_block(
        Block(
            doc,
            1,
            "bash",
            'test "$(command -v python)" = '
            f"{shlex.quote(str(Path(sys.executable).parent / 'python'))}\n",
        ),
        tmp_path,
    )
