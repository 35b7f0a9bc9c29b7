"""When ``rlblocks train`` stops: the flags, the ``stop`` block of a config, the run's
``stop.json`` (a ``--resume`` goes on by it) or the defaults, and where each came from;
what the step budget comes to (:func:`budget_note`); and Ctrl-C, which stops the run with a
checkpoint (:func:`ctrl_c_saves`).

Examples:
    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> write_stops(run, 475.0, 100_000)
    >>> saved_stops(run)
    {'episode_return_mean': 475.0, 'timesteps_total': 100000}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_STOP_TIMESTEPS",
    "STOP_FILE",
    "CtrlC",
    "Stops",
    "budget_note",
    "check_stop_flags",
    "ctrl_c_saves",
    "last_return",
    "saved_stops",
    "write_stops",
]

#: ``rlblocks train`` stops here when neither --stop-timesteps nor the env's reward
#: threshold ends the run first.
DEFAULT_STOP_TIMESTEPS = 500_000

#: The stop conditions a run of ``rlblocks train`` went by (a ``--resume`` goes on by them).
STOP_FILE = "stop.json"


def check_stop_flags(args: argparse.Namespace) -> None:
    """The command line's stop flags, by the same check as a config's ``stop`` block."""
    from rlblocks.train.tuned import stop_value

    if args.stop_timesteps is not None:
        stop_value("timesteps_total", args.stop_timesteps, "--stop-timesteps")
    if args.stop_reward is not None:
        stop_value("episode_return_mean", args.stop_reward, "--stop-reward")


def saved_stops(run_dir: str | Path) -> dict[str, Any]:
    """The stop conditions of ``run_dir``'s ``stop.json`` (``{}`` if it has none)."""
    path = Path(run_dir) / STOP_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_stops(run_dir: Path, stop_reward: float | None, stop_timesteps: int) -> None:
    """Writes ``run_dir``'s ``stop.json``."""
    (run_dir / STOP_FILE).write_text(
        json.dumps({"episode_return_mean": stop_reward, "timesteps_total": stop_timesteps}) + "\n"
    )


def _default_stop_reward(env: Any) -> float | None:
    """The env's reward threshold; None if it has none or is not a known id (a bad id
    is reported when the trainer makes the env)."""
    from rlblocks.train.envs import env_spec

    try:
        spec = env_spec(env)
    except ValueError:
        return None
    if spec is None or spec.reward_threshold is None:
        return None
    return float(spec.reward_threshold)


class Stops:
    """The stop conditions of a ``train`` command and where each came from (for messages):
    the flags first, then the config's ``stop`` block, the run's ``stop.json``, the
    defaults."""

    def __init__(
        self, args: argparse.Namespace, file_stops: tuple[Any, Any], env: Any, saved: dict[str, Any]
    ) -> None:
        self.reward: float | None
        if args.stop_reward is not None:
            self.reward, self.reward_from = args.stop_reward, "--stop-reward"
        elif file_stops[0] is not None:
            self.reward, self.reward_from = file_stops[0], "stop.episode_return_mean"
        elif args.no_default_stop_reward:
            self.reward, self.reward_from = None, ""
        elif "episode_return_mean" in saved:
            self.reward, self.reward_from = saved["episode_return_mean"], "stop.episode_return_mean"
        else:
            self.reward = _default_stop_reward(env)
            self.reward_from = "the env's reward threshold"
        if args.stop_timesteps is not None:
            self.timesteps, self.timesteps_from = args.stop_timesteps, "--stop-timesteps"
        elif file_stops[1] is not None:
            self.timesteps, self.timesteps_from = file_stops[1], "stop.timesteps_total"
        elif isinstance(saved.get("timesteps_total"), int):
            self.timesteps, self.timesteps_from = saved["timesteps_total"], "stop.timesteps_total"
        else:
            self.timesteps, self.timesteps_from = DEFAULT_STOP_TIMESTEPS, "the default budget"

    def check_lr_schedule(self, config: Any) -> None:
        """Refuses a run whose ``lr_schedule`` ends at a learning rate of 0 before the step
        budget (the steps after it would not learn), such as a ``--resume`` past the budget
        the CLI's defaults annealed the rate to
        (:func:`rlblocks.cli.train_defaults.annealed_lr`)."""
        schedule = getattr(config, "lr_schedule", None)
        if not schedule or schedule[-1][1] != 0 or schedule[-1][0] >= self.timesteps:
            return
        end = int(schedule[-1][0])
        raise ValueError(
            f"lr_schedule reaches a learning rate of 0 at {end:,} steps, before "
            f"this run's budget ({self.timesteps_from}={self.timesteps}): the steps after "
            f"{end:,} would not learn; give a budget of at most {end} steps, or an "
            "lr_schedule that ends at the budget (a --resume keeps the run's own: start a "
            "new run to train longer)"
        )

    def check_not_met(self, steps: int, last_return: Any) -> None:
        """Refuses a ``--resume`` whose stop condition the run has already met (it would
        end at once): the message says how to extend it."""
        if steps >= self.timesteps:
            if self.timesteps_from == "--stop-timesteps":
                raise ValueError(
                    f"--stop-timesteps {self.timesteps}: the run already has {steps} steps"
                )
            raise ValueError(
                f"the run is already done: {self.timesteps_from}="
                f"{self.timesteps} already reached at {steps:,} steps; pass "
                f"--stop-timesteps N larger than {steps} to train on"
            )
        try:
            ret = float(last_return)
        except (TypeError, ValueError):
            return
        if self.reward is None or math.isnan(ret) or ret < self.reward:
            return
        from rlblocks.train.numbers import format_return  # not at import: --help stays light

        reached = f"a mean return of {format_return(ret)} at {steps:,} steps"
        if self.reward_from == "--stop-reward":
            raise ValueError(
                f"--stop-reward {self.reward:g}: the run already has {reached}; "
                f"pass a --stop-reward larger than {format_return(ret)}"
            )
        why = "" if self.reward_from.startswith("stop.") else f" ({self.reward_from})"
        raise ValueError(
            f"the run is already done: stop.episode_return_mean={self.reward:g}"
            f"{why} already reached with {reached}; pass --stop-reward R larger "
            f"than {format_return(ret)}, or --no-default-stop-reward to train on to the "
            "step budget"
        )


def last_return(path: str | Path, meta: dict[str, Any]) -> Any:
    """The checkpoint's mean return: its ``meta.json`` (else its progress.csv row)."""
    from rlblocks.train.checkpoint import find_checkpoint
    from rlblocks.train.logger import read_progress

    if "episode_return_mean" in meta:
        return meta["episode_return_mean"]
    ckpt = find_checkpoint(path)
    for row in read_progress(ckpt.parent):
        if row.get("training_iteration") == meta.get("iteration"):
            return row.get("episode_return_mean")
    return None


def budget_note(trainer: Any, timesteps: int) -> str:
    """What the step budget comes to, when not exactly ``timesteps`` (for the start line):
    native trainers step all their envs together (the last iteration is cut short, to whole
    steps of every env); RLlib trains whole iterations (PPO, APPO, IMPALA: of about
    ``train_batch_size`` steps) and ends at the one nearest the budget.

    Examples:
        >>> class Native:
        ...     class config: num_envs = 8
        >>> budget_note(Native(), 2001)
        ' (2008: whole steps of its 8 envs)'
        >>> budget_note(Native(), 2000)
        ''
    """
    cfg = trainer.config
    backend = getattr(trainer, "backend", None)
    if isinstance(backend, dict):
        if backend.get("algo") in ("DQN", "SAC"):
            return " (RLlib trains whole iterations: the run ends at the one nearest it)"
        batch = max(1, int(cfg.train_batch_size))
        iters = max(1, round(timesteps / batch))
        return (
            f" (RLlib trains whole iterations of about {batch} steps: the run ends at the "
            f"one nearest it, after about {iters * batch})"
        )
    n = max(1, int(cfg.num_envs))
    whole = -(-timesteps // n) * n
    return f" ({whole}: whole steps of its {n} envs)" if whole != timesteps else ""


class CtrlC:
    """How many times Ctrl-C was pressed during :func:`ctrl_c_saves` (true after one)."""

    def __init__(self) -> None:
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0


@contextlib.contextmanager
def ctrl_c_saves(trainer: Any) -> Iterator[CtrlC]:
    """Within the block, a first Ctrl-C (SIGINT) asks ``trainer`` to stop as soon as it
    can save (``trainer.interrupt()``: its ``fit`` ends and writes the final checkpoint)
    and says so on stderr; a second one raises KeyboardInterrupt at once. Outside the main
    thread (no signal handlers there) nothing changes."""
    pressed = CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def handler(signum: int, frame: Any) -> None:
        pressed.count += 1
        if pressed.count > 1:
            raise KeyboardInterrupt
        trainer.interrupt()
        print(
            "\nrlblocks train: Ctrl-C: stopping to save a checkpoint "
            "(Ctrl-C again aborts without one)",
            file=sys.stderr,
            flush=True,
        )

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)
