"""What a user's env raised, said in one line: the frame of the user's own code that raised
it (for example: my_pkg/envs.py:12 in step `return 1 / self.n`), also for the envs of an
async vector env, whose worker's traceback gymnasium would otherwise print before the error
reaches the trainer.

Examples:
    >>> env_failure("MyEnv-v0", "step", KeyError("b"), [], "Dict('a': Discrete(2))")
    "env 'MyEnv-v0' failed in step: KeyError: 'b' (an observation lacks a key of the \
observation space Dict('a': Discrete(2)))"
"""

from __future__ import annotations

import os
import re
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import logger as _gym_logger

from rlblocks.spaces import format_path, space_path_items

__all__ = [
    "call_env",
    "captured_worker_errors",
    "env_failure",
    "non_finite_observation",
    "raised_at",
    "user_frame",
]

_FRAME = re.compile(
    r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n'
    r"(?P<code>[ \t]+\S[^\n]*)?",
    re.M,
)


def _library_dirs() -> tuple[str, ...]:
    import gymnasium
    import numpy

    import rlblocks

    dirs = [Path(m.__file__).resolve().parent for m in (gymnasium, numpy, rlblocks) if m.__file__]
    dirs += [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")]
    return tuple(str(d) + os.sep for d in dirs)


def _where(filename: str, lineno: int, func: str, code: str | None) -> str:
    path = Path(filename)
    try:
        shown = str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:  # not below the current directory
        shown = str(Path(*path.parts[-2:])) if len(path.parts) > 1 else filename
    code = (code or "").strip()
    if sum(map(code.count, "([{")) > sum(map(code.count, ")]}")):
        code += " ..."  # the first line of a statement over several lines
    return f"{shown}:{lineno} in {func}" + (f" `{code}`" if code else "")


def user_frame(frames: list[tuple[str, int, str, str | None]]) -> str | None:
    """The deepest frame of the user's code among ``(file, line, function, code)`` frames
    (outermost first): not gymnasium, numpy, rlblocks or the standard library; a frame
    outside site-packages is preferred. None if there is none."""
    library = _library_dirs()
    own = [
        f
        for f in frames
        if not f[0].startswith("<") and not str(Path(f[0]).resolve()).startswith(library)
    ]
    if not own:
        return None
    outside = [f for f in own if "site-packages" not in f[0] and "dist-packages" not in f[0]]
    return _where(*(outside or own)[-1])


def raised_at(err: BaseException) -> str | None:
    """Where in the user's code ``err`` was raised (see :func:`user_frame`), or None."""
    return user_frame(_frames_of(err))


def _frames_of(err: BaseException) -> list[tuple[str, int, str, str | None]]:
    return [
        (f.filename, f.lineno or 0, f.name, f.line) for f in traceback.extract_tb(err.__traceback__)
    ]


def _frames_in(text: str) -> list[tuple[str, int, str, str | None]]:
    return [(m["file"], int(m["line"]), m["func"], m["code"]) for m in _FRAME.finditer(text)]


class captured_worker_errors:  # noqa: N801 - used like a function: with captured_...() as logs
    """Collects (instead of printing) what gymnasium logs as errors meanwhile: the
    tracebacks an async vector env's workers send back before it re-raises their error.
    Cheap enough for every env step (no generator, two attribute swaps)."""

    __slots__ = ("captured", "_original")

    def __init__(self) -> None:
        self.captured: list[str] = []
        self._original: Any = None

    def _collect(self, msg: str, *args: object, **kwargs: object) -> None:
        self.captured.append(msg % args if args else msg)

    def __enter__(self) -> list[str]:
        self._original = _gym_logger.error
        _gym_logger.error = self._collect
        return self.captured

    def __exit__(self, *exc: object) -> None:
        _gym_logger.error = self._original


def env_failure(
    env_name: str,
    method: str,
    err: BaseException,
    worker_logs: list[str],
    observation_space: Any = None,
) -> str:
    """One line for an exception out of the vector env's ``reset`` / ``step``: where the
    user's code raised it (from its traceback, or an async worker's logged traceback);
    a KeyError raised outside the user's code is gymnasium missing a key of the Dict
    ``observation_space`` in an observation."""
    frames = _frames_of(err)
    for log in worker_logs:
        if "Traceback (most recent call last)" in log:
            frames += _frames_in(log)
    # An async worker's error comes back as type(err)(err): show the inner one.
    shown = err.args[0] if len(err.args) == 1 and isinstance(err.args[0], BaseException) else err
    text = " ".join(str(shown).split())
    what = f"{type(shown).__name__}: {text}" if text else type(shown).__name__
    frame = user_frame(frames)
    if frame is not None:
        return f"env {env_name!r} failed in {method} at {frame}: {what}"
    hint = ""
    if isinstance(err, KeyError) and observation_space is not None:
        hint = f" (an observation lacks a key of the observation space {observation_space})"
    return f"env {env_name!r} failed in {method}: {what}{hint}"


def call_env(
    env_name: str,
    observation_space: Any,
    method: str,
    fn: Callable[..., Any],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)``, a vector env's ``method`` (``reset`` / ``step``); what the envs (or
    gymnasium batching their observations) raise becomes a ValueError naming the env and
    the user's frame that raised (:func:`env_failure`; async workers' tracebacks are
    captured, not printed); a ValueError that already names the env passes as it is."""
    with captured_worker_errors() as worker_logs:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if isinstance(err, ValueError) and str(err).startswith(f"env {env_name!r} "):
                raise  # already one line naming the env (a multi-agent env's checked return)
            raise ValueError(
                env_failure(env_name, method, err, worker_logs, observation_space)
            ) from err


def non_finite_observation(env_name: str, space: gym.Space, raw: Any, flat: np.ndarray) -> str:
    """One line for the first non-finite value of a batch: the env, the sub-env and the
    path of the value in its observation (``obs["a"][1] = nan``), or its position in the
    preprocessed row when the raw observation does not show it.

    Args:
        env_name: The env, as the config names it.
        space: The env's (single) observation space.
        raw: The raw batch: a list of per-env observations, or batched leaves.
        flat: Its preprocessed rows ``[B, ...]`` (with a non-finite value).
    """
    row, col = (int(i) for i in np.argwhere(~np.isfinite(flat.reshape(len(flat), -1)))[0])
    where = f"position {col} of its preprocessed observation"
    per_env = isinstance(raw, list)
    for path, _leaf in space_path_items(space):
        try:
            node = raw[row] if per_env else raw
            for key in path:
                node = node[key]
            value = np.asarray(node if per_env else node[row])
        except (KeyError, IndexError, TypeError):
            break
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            index = tuple(int(i) for i in np.argwhere(~np.isfinite(value))[0])
            where = format_path(path + index) + f" = {value[index]}"
            break
    return f"env {env_name!r} (sub-env {row}) returned a non-finite observation: {where}"
