"""The side thread (``rlblocks.train.fast.side_thread``) and the twin critics' passes run
on it (``parallel_critics``): the same numbers as one after the other, and really paired."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box
from rlblocks.replay import ReplaySample
from rlblocks.train.denormals import denormals_flushed, flush_denormals, hardware_flushes
from rlblocks.train.fast import sac_backprop, td3_backprop
from rlblocks.train.fast.side_thread import (
    MIN_PAIRED_MACS,
    cpus_available,
    run_pair,
    worth_pairing,
)
from rlblocks.train.learners.sac import SACLearner
from rlblocks.train.learners.td3 import TD3Learner
from rlblocks.train.offpolicy_config import SACConfig, TD3Config


def test_run_pair_runs_the_second_on_the_side_thread() -> None:
    names = run_pair(
        lambda: threading.current_thread().name, lambda: threading.current_thread().name
    )
    assert names[0] == threading.current_thread().name
    assert names[1].startswith("rlblocks-side")


def test_an_error_of_either_is_raised_after_both_ended() -> None:
    ended = threading.Event()

    def slow_side() -> None:
        ended.wait(0.05)
        ended.set()

    def fail() -> None:
        raise KeyError("first")

    with pytest.raises(KeyError, match="first"):
        run_pair(fail, slow_side)
    assert ended.is_set()  # the side call had ended when the error came back

    def fail_side() -> None:
        raise ValueError("second")

    with pytest.raises(ValueError, match="second"):
        run_pair(lambda: 1, fail_side)
    with pytest.raises(KeyError, match="first"):  # both fail: the caller's error
        run_pair(fail, fail_side)


@pytest.mark.parametrize("flushed", [True, False])
@pytest.mark.parametrize("grad", [True, False])
def test_the_side_call_takes_the_callers_denormals_and_grad_mode(flushed: bool, grad: bool) -> None:
    if flushed and not hardware_flushes():
        pytest.skip("this CPU cannot flush denormals")
    x = torch.ones(2, requires_grad=True)
    with flush_denormals(flushed), torch.set_grad_enabled(grad):
        here, side = run_pair(
            lambda: (denormals_flushed(), (x * 2).requires_grad),
            lambda: (denormals_flushed(), (x * 2).requires_grad),
        )
    assert here == side == (flushed, grad)
    # the side thread's own setting is left as it was
    assert run_pair(lambda: None, denormals_flushed)[1] == denormals_flushed()


def _pair_in_child(queue: Any) -> None:
    queue.put(run_pair(lambda: 1, lambda: threading.current_thread().name))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
def test_a_forked_child_starts_its_own_side_thread() -> None:
    run_pair(lambda: None, lambda: None)  # the parent's side thread exists before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_pair_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    first, name = queue.get(timeout=5)
    assert first == 1 and name.startswith("rlblocks-side")


def test_worth_pairing_needs_two_cpus_and_a_large_pass() -> None:
    two = cpus_available() >= 2
    assert worth_pairing(MIN_PAIRED_MACS) is two
    assert worth_pairing(MIN_PAIRED_MACS - 1) is False


# --- the learners ---------------------------------------------------------------------------
OBS, ACT = Box(-np.inf, np.inf, (5,)), Box(-2.0, 3.0, (2,))
SMALL = {"fcnet_hiddens": [32, 32]}


def _batches(rows: int = 64, n: int = 12) -> list[ReplaySample]:
    rng = np.random.default_rng(0)
    return [
        ReplaySample(
            rng.normal(size=(rows, 5)).astype(np.float32),
            rng.uniform(-2.0, 3.0, (rows, 2)).astype(np.float32),
            rng.normal(size=rows).astype(np.float32),
            rng.normal(size=(rows, 5)).astype(np.float32),
            np.where(rng.random(rows) < 0.2, 0.0, 0.99).astype(np.float32),
            rng.uniform(0.5, 1.0, rows).astype(np.float32),
            np.arange(rows, dtype=np.int64),
        )
        for _ in range(n)
    ]


def _learner(algo: str, **kw: Any) -> SACLearner | TD3Learner:
    torch.manual_seed(0)
    if algo == "SAC":
        return SACLearner(OBS, ACT, SACConfig(model=SMALL, q_model=SMALL, **kw))
    return TD3Learner(OBS, ACT, TD3Config(model=SMALL, q_model=SMALL, **kw))


@pytest.mark.parametrize("algo", ["SAC", "TD3"])
def test_paired_critics_give_the_same_updates_bit_for_bit(
    algo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve updates with the twin critics' passes side by side (``parallel_critics=True``)
    leave every parameter, optimizer moment, statistic and priority exactly as one critic
    after the other does; and the side thread did run critic passes."""
    critic_class = sac_backprop._Critic if algo == "SAC" else td3_backprop._NumpyCritic
    threads: set[str] = set()
    q = critic_class.q

    def spied_q(self: Any, *args: Any) -> Any:
        threads.add(threading.current_thread().name)
        return q(self, *args)

    monkeypatch.setattr(critic_class, "q", spied_q)
    batches = _batches()
    runs = []
    for paired in (False, True):
        learner = _learner(algo, parallel_critics=paired)
        assert learner._backprop() is not None and learner._backprop().paired is paired
        threads.clear()
        torch.manual_seed(1)
        runs.append(([learner.update(b, 0) for b in batches], learner.state_dict()))
        assert any(t.startswith("rlblocks-side") for t in threads) is paired, threads
    (serial, serial_state), (paired_out, paired_state) = runs
    for (stats_a, prio_a), (stats_b, prio_b) in zip(serial, paired_out, strict=True):
        assert stats_a == stats_b
        np.testing.assert_array_equal(prio_a, prio_b)
    flat_a = torch.nn.utils.parameters_to_vector
    for key in ("actor", "critics", "target_critics"):
        a = [v for v in serial_state[key].values() if torch.is_tensor(v)]
        b = [v for v in paired_state[key].values() if torch.is_tensor(v)]
        assert torch.equal(flat_a(a), flat_a(b)), key
    moments_a = serial_state["critic_optimizer"]["state"]
    moments_b = paired_state["critic_optimizer"]["state"]
    for i in moments_a:
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(moments_a[i][name], moments_b[i][name])


@pytest.mark.parametrize("algo", ["SAC", "TD3"])
def test_auto_pairs_large_twin_critics_only(algo: str) -> None:
    """``parallel_critics="auto"`` pairs ``[400, 300]`` critics on batches of 256 where two
    CPUs are free, never ``[32, 32]`` ones (a pass far below the hand-off's worth), nor a
    single critic; True with a single critic is refused."""
    big = {"fcnet_hiddens": [400, 300]}
    torch.manual_seed(0)
    cls, cfg = (SACLearner, SACConfig) if algo == "SAC" else (TD3Learner, TD3Config)
    large = cls(OBS, ACT, cfg(model=big, q_model=big, train_batch_size=256))
    assert large._backprop() is not None
    assert large._backprop().paired is (cpus_available() >= 2)
    assert _learner(algo)._backprop().paired is False
    assert cls(OBS, ACT, cfg(model=big, twin_q=False))._backprop().paired is False
    with pytest.raises(ValueError, match=r"^parallel_critics=True pairs the twin critics"):
        cfg(parallel_critics=True, twin_q=False)
    with pytest.raises(ValueError, match="parallel_critics must be 'auto', True or False"):
        cfg(parallel_critics="sometimes")
    assert cfg.from_dict({"parallel_critics": "false"}).parallel_critics is False
