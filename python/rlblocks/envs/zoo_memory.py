"""The zoo's memory task: echo the symbol seen ``delay`` steps ago, which needs ``use_lstm``
or ``use_attention`` (see :mod:`rlblocks.envs.zoo`)."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from rlblocks.envs.zoo import ZooEnv

__all__ = ["Recall"]


class Recall(ZooEnv):
    """Echo the symbol seen ``delay`` steps ago: each step shows a uniform ``Discrete(n)``
    symbol; from step ``delay`` on, the action (``Discrete(n)``) scores 1 when it equals the
    symbol shown ``delay`` steps earlier. The first ``delay`` steps score 0 whatever the
    action, so the best return is ``episode_len - delay`` and a memoryless agent scores
    :attr:`random_return`.

    Args:
        delay: How many steps back (>= 1).
        n: Symbols (>= 2).
        episode_len: Steps per episode (> delay).

    Examples:
        >>> env = Recall(delay=2, n=2, episode_len=6)
        >>> obs, _ = env.reset(seed=0)
        >>> seen, total = [obs], 0.0
        >>> for t in range(6):
        ...     obs, r, _, trunc, _ = env.step(seen[t - 2] if t >= 2 else 0)
        ...     seen.append(obs)
        ...     total += r
        >>> total, trunc, env.max_return, env.random_return
        (4.0, True, 4.0, 2.0)
    """

    def __init__(self, delay: int = 2, n: int = 2, episode_len: int = 16):
        super().__init__(episode_len)
        if delay < 1 or n < 2 or self.episode_len <= delay:
            raise ValueError(
                f"Recall: need delay >= 1, n >= 2 and episode_len > delay, got "
                f"delay={delay}, n={n}, episode_len={episode_len}"
            )
        self.delay, self.n = int(delay), int(n)
        self.observation_space = spaces.Discrete(self.n)
        self.action_space = spaces.Discrete(self.n)
        self._seen: list[int] = []

    @property
    def max_return(self) -> float:
        return float(self.episode_len - self.delay)

    @property
    def random_return(self) -> float:
        return round((self.episode_len - self.delay) / self.n, 6)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self._seen = []
        return super().reset(seed=seed, options=options)

    def _draw(self) -> int:
        symbol = int(self.np_random.integers(self.n))
        self._seen.append(symbol)
        return symbol

    def target(self) -> int | None:
        """The symbol the next action should echo (None during the first ``delay`` steps)."""
        t = len(self._seen) - 1
        return self._seen[t - self.delay] if t >= self.delay else None

    def answer(self, obs: Any) -> int:
        target = self.target()
        return 0 if target is None else target

    def score(self, obs: Any, action: Any) -> float:
        target = self.target()
        return 0.0 if target is None else float(int(action) == target)
