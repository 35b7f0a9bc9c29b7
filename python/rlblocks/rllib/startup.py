"""Starting Ray and building an RLlib algorithm for :class:`~rlblocks.rllib.trainer.RLlibTrainer`:
the job's ``runtime_env`` (the user's modules added), RLlib's start-up logs held back, and
env runners that fail to start as one ValueError naming their error
(:func:`actor_start_failure`), not RLlib's ``IndexError``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from rlblocks.rllib._ray import (
    LOCAL_RAY_SYSTEM_CONFIG,
    RayError,
    RayTaskError,
    actor_table,
    init_ray,
    ray,
)

__all__ = ["LOCAL_RAY_SYSTEM_CONFIG", "actor_start_failure", "build_algo", "init_ray"]

#: RLlib's loggers that report env runners failing to start (held back while the algorithm is
#: built: one line names the cause instead).
_START_LOGGERS = ("ray.rllib.utils.actor_manager", "ray.rllib.env.env_runner_group")


class _HoldRecords(logging.Filter):
    """Holds back the records of :data:`_START_LOGGERS` while installed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _held_rllib_logs() -> Iterator[_HoldRecords]:
    """Holds back :data:`_START_LOGGERS`' records; they are logged at the end unless the
    caller empties ``records``."""
    hold = _HoldRecords()
    loggers = [logging.getLogger(name) for name in _START_LOGGERS]
    for logger in loggers:
        logger.addFilter(hold)
    try:
        yield hold
    finally:
        for logger in loggers:
            logger.removeFilter(hold)
        for record in hold.records:
            logging.getLogger(record.name).handle(record)


def _dead_actors() -> dict[str, Any]:
    """This job's dead Ray actors (``{actor_id: info}`` of Ray's actor table; {} when Ray
    cannot tell)."""
    if actor_table is None:
        return {}
    try:
        job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
        return dict(actor_table(job_id=job, actor_state_name="DEAD"))
    except Exception:  # Ray's actor table is a debugging API: no answer is no diagnosis
        return {}


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _creation_error(death_cause: Any) -> str | None:
    """What stopped an actor from starting: its constructor's exception or its runtime env's
    setup error, in one line (None: it died of something else)."""
    if death_cause.HasField("creation_task_failure_context"):
        err: Any = RayError.from_ray_exception(death_cause.creation_task_failure_context)
        # ActorDiedError(RayTaskError(cause)): the cause is the constructor's exception
        for _ in range(8):  # a few wrappers deep at most
            if not isinstance(err, RayError):
                break
            inner: Any = err.args[0] if err.args and isinstance(err.args[0], RayError) else None
            if isinstance(err, RayTaskError) and isinstance(err.cause, BaseException):
                inner = err.cause
            if inner is None:
                break
            err = inner
        if isinstance(err, RayError):  # no exception object inside: its traceback's last line
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            return lines[-1] if lines else type(err).__name__
        return _one_line(err)
    if death_cause.HasField("runtime_env_failed_context"):
        lines = [
            ln.strip()
            for ln in death_cause.runtime_env_failed_context.error_message.splitlines()
            if ln.strip()
        ]
        return f"RuntimeEnvSetupError: {lines[-1] if lines else 'the runtime env failed'}"
    return None


def actor_start_failure(dead_before: Mapping[str, Any]) -> str | None:
    """One line naming why Ray actors of this job failed to start since ``dead_before`` (the
    dead actors then), e.g. ``env runners failed to start: ModuleNotFoundError: No module
    named 'my_pkg'``; None when none did.

    Examples:
        >>> actor_start_failure({}) is None  # no Ray started: no actor failed
        True
    """
    if not ray.is_initialized():
        return None
    causes: dict[str, dict[str, None]] = {}
    for actor_id, info in _dead_actors().items():
        if actor_id in dead_before:
            continue
        try:
            cause = _creation_error(info["DeathCause"])
        except Exception:  # an exception Ray cannot unpickle here: RLlib's error stands
            cause = None
        if cause is not None:
            name = str(info.get("ActorClassName", ""))
            what = "env runners" if "EnvRunner" in name else f"Ray actors {name}".strip()
            causes.setdefault(what, {})[cause] = None
    if not causes:
        return None
    return "; ".join(f"{what} failed to start: {'; '.join(c)}" for what, c in causes.items())


def build_algo(algo_config: Any) -> Any:
    """``algo_config.build_algo()``; env runners (or other actors) that fail to start are a
    ValueError naming the cause (RLlib reports them as an ``IndexError`` in ``get_spaces``
    after logging each runner's traceback, which is held back then)."""
    dead_before = _dead_actors()
    with _held_rllib_logs() as held:
        try:
            return algo_config.build_algo()
        except Exception as err:
            failure = actor_start_failure(dead_before)
            if failure is None:
                raise
            held.records.clear()
            raise ValueError(failure) from err
