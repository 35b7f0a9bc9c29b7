"""``num_env_workers="auto"``: how many env worker processes a multi-agent PPO run uses.

Worker processes (:class:`~rlblocks.multiagent.workers.WorkerVectorEnv`) pay when the
env's step is a large share of the iteration and there are cores to step the copies on:
on the 2-core machine, quiet, MPE simple_spread ran 1.3x faster in wall-clock time with 2
workers; with the cores busy with other jobs the hand-offs cost more than they saved
(docs/multiagent.md). ``"auto"`` decides at the start from the cores free now: the
process's CPUs minus the 1-minute load average. At least :data:`AUTO_MIN_FREE` free
cores: one worker per free core (rounded), at most one per env copy, and at least 2
(one worker alone only moves the env's step to another process); fewer: 0, the copies
stepped in the trainer's process. A turn-based game, whose copies always step in process,
gets 0. The same seeds give the same training either way; only the speed differs. The
choice is printed at the start and written into ``config.json`` as the number it chose.

Examples:
    >>> auto_env_workers(num_envs=8, cpus=2, free=1.7)
    2
    >>> auto_env_workers(num_envs=8, cpus=2, free=0.4)  # the cores are busy
    0
    >>> auto_env_workers(num_envs=8, cpus=16, free=15.2)  # one per copy at most
    8
    >>> auto_env_workers(num_envs=1, cpus=16, free=16.0)  # one copy: nothing to share
    0
"""

from __future__ import annotations

import os

__all__ = ["AUTO_MIN_FREE", "auto_env_workers", "free_cores", "env_workers_line"]

#: The fewest free cores (CPUs minus the 1-minute load average) for which "auto" starts
#: worker processes.
AUTO_MIN_FREE = 1.5


def free_cores() -> tuple[int, float]:
    """``(cpus, free)``: the CPUs this process may run on and how many of them the 1-minute
    load average leaves idle (0 where the platform has no load average)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume busy
        return cpus, 0.0
    return cpus, max(0.0, cpus - load)


def auto_env_workers(num_envs: int, cpus: int, free: float) -> int:
    """The worker processes ``"auto"`` picks for ``num_envs`` copies with ``free`` of
    ``cpus`` cores idle (module docstring)."""
    if free < AUTO_MIN_FREE:
        return 0
    n = min(num_envs, cpus, int(free + 0.5))
    return n if n >= 2 else 0


def env_workers_line(chosen: int, cpus: int, free: float) -> str:
    """The start-of-run line saying what ``"auto"`` chose.

    Examples:
        >>> env_workers_line(2, 2, 1.7)
        'num_env_workers=auto: 2 env worker processes (1.7 of 2 cores free)'
        >>> env_workers_line(0, 2, 0.4)
        'num_env_workers=auto: 0, the copies step in process (0.4 of 2 cores free)'
    """
    what = f"{chosen} env worker processes" if chosen else "0, the copies step in process"
    return f"num_env_workers=auto: {what} ({free:.1f} of {cpus} cores free)"
