"""``rlblocks evaluate RUN --opponent WHO``: games of a turn-based run's policy against an
opponent, counted as wins, draws and losses (:mod:`rlblocks.train.matches`).

``WHO`` is ``random`` (a uniform legal move), ``snapshot`` (the run's opponent pool, the
games split evenly over its snapshots, which sample their moves), another run directory
(its policies from the checkpoint ``rlblocks evaluate`` picks there, greedy; the same env
and policies) or ``human``: the person at the terminal
plays the other seat, seeing the board (the env's own text render where it has one, else
the observation's planes: ``X`` the mover's pieces, ``O`` the other's) and typing the index
of a legal move; anything else is asked again. The run's policy plays greedily (with
``--exported``: its exported artifacts, as a deployment plays one side); seats alternate
from game to game.

Examples:
    >>> board_text({"observations": np.array([[[1, 0], [0, 1]], [[0, 0], [0, 0]]])})
    'X O\\n. .'
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from rlblocks.masks import MASK_KEY, OBS_KEY

__all__ = ["board_text", "exported_mover", "human_mover", "versus"]


def board_text(obs: Any) -> str:
    """A text board of a PettingZoo classic observation (``[rows, cols, planes]``: ``X``
    where plane 0 is set, ``O`` where plane 1 is, ``.`` elsewhere), else the observation
    as numpy prints it."""
    x = np.asarray(obs[OBS_KEY] if isinstance(obs, dict) and OBS_KEY in obs else obs)
    if x.ndim != 3 or x.shape[-1] < 2:
        return str(x)
    rows = []
    for row in x:
        cells = ["X" if c[0] else "O" if c[1] else "." for c in row]
        rows.append(" ".join(cells))
    return "\n".join(rows)


def human_mover(
    hub: Any, read: Callable[[str], str] = input, write: Callable[[str], Any] = print
) -> Any:
    """A :data:`~rlblocks.train.matches.Mover` for a person: shows the board (copy 0's
    text render, or :func:`board_text`) and the legal moves, reads a move index with
    ``read`` and asks again until it is legal.

    Raises:
        ValueError: (when called) the input ends before a legal move.
    """

    def move(pid: str, agents: list[Any], obs: list[Any]) -> np.ndarray:
        out = np.zeros(len(agents), np.int64)
        for i, (agent, o) in enumerate(zip(agents, obs, strict=True)):
            legal = np.flatnonzero(np.asarray(o[MASK_KEY]).reshape(-1)).tolist()
            env = hub.envs[0]
            shown = env.render() if getattr(env, "render_mode", None) == "ansi" else None
            write(shown if isinstance(shown, str) else board_text(o))
            while True:
                try:
                    text = read(f"{agent} (you), your move {legal}: ")
                except EOFError:
                    raise ValueError("the input ended before a legal move was typed") from None
                try:
                    choice = int(text.strip())
                except ValueError:
                    choice = -1
                if choice in legal:
                    out[i] = choice
                    break
                write(f"{text.strip()!r} is not a legal move; type one of {legal}")
        return out

    return move


def exported_mover(policies: dict[str, Any], hub: Any) -> Any:
    """A :data:`~rlblocks.train.matches.Mover` of exported artifacts (``{policy_id:
    ExportedPolicy}``, checked against ``hub``'s policies), their deterministic actions.

    Raises:
        ValueError: An artifact of other spaces than its policy's.
    """
    from rlblocks.export.evaluate import ExportedActor
    from rlblocks.export.evaluate_multiagent import check_policy

    actors = {}
    for pid, spec in hub.specs.items():
        check_policy(policies[pid], pid, spec.observation_space, spec.action_space)
        actors[pid] = ExportedActor(policies[pid])

    def move(pid: str, agents: list[Any], obs: list[Any]) -> Any:
        spec = hub.specs[pid]
        raw = [spec.value(a, o) for a, o in zip(agents, obs, strict=True)]
        return actors[pid].act(raw, None, None, None)[0]

    return move


def versus(
    args: argparse.Namespace, trainer: Any, exported: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``--opponent`` on a restored native run: ``args.episodes`` games of its policies (or
    of its ``exported`` artifacts, ``--exported``); the JSON summary.

    Raises:
        ValueError: A run that is not a turn-based game with action masks, a ``snapshot``
            run without snapshots, another run of other policies, or ``--explore`` with
            ``--opponent``.
    """
    from rlblocks.train.matches import play_games, random_legal, wdl_rates
    from rlblocks.train.selfplay import has_masks, policy_mover, snapshot_counts

    who = args.opponent
    if args.explore:
        raise ValueError("--opponent plays the run's greedy policy: drop --explore")
    selfplay = getattr(trainer, "selfplay", None)
    if selfplay is None or not has_masks(trainer.hub):
        raise ValueError(
            f"--opponent {who}: this run's env is not a turn-based game whose agents observe "
            "an action mask (PettingZoo classic games are)"
        )
    games = args.episodes
    if games < 1:
        raise ValueError(f"--episodes must be >= 1 (the games to play), got {games}")
    seed = trainer.evaluation_seed(args.seed)
    hub = trainer.fresh_hub(1 if who == "human" else min(games, 8))
    other = None
    try:
        if exported is None:
            learner = policy_mover(trainer.policies, hub, explore=False)
        else:
            learner = exported_mover(exported, hub)
        if who == "random":
            counts = play_games(
                hub, learner, random_legal(np.random.default_rng(seed)), games, seed
            )
        elif who == "human":
            said = {"win": "you lost", "draw": "a draw", "loss": "you won"}

            def tell(game: int, outcome: str) -> None:
                print(f"game {game + 1}: {said[outcome]}")

            counts = play_games(hub, learner, human_mover(hub), games, seed, tell)
        elif who == "snapshot":
            pool = selfplay.pool
            if pool is None or not len(pool):
                raise ValueError(
                    "--opponent snapshot: this run has no opponent snapshots (it trained with "
                    "selfplay_snapshot_every=0, or stopped before the first)"
                )
            counts = snapshot_counts(hub, learner, pool.snapshots, games, seed)
        else:
            other = _other_run(who, trainer)
            counts = play_games(
                hub, learner, policy_mover(other.policies, hub, explore=False), games, seed
            )
    finally:
        hub.close()
        if other is not None:
            other.close()
    result: dict[str, Any] = {"opponent": who, **counts, **wdl_rates(counts, "")}
    return result


def _other_run(path: str, trainer: Any) -> Any:
    """The trainer of run directory ``path``, refused unless its policies match."""
    import warnings
    from pathlib import Path

    if not Path(path).is_dir():
        raise ValueError(
            f"--opponent {path!r}: not 'random', 'snapshot', 'human' or a run directory"
        )
    from rlblocks.train.checkpoint import select_checkpoint
    from rlblocks.train.restoring import restore_trainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        other = restore_trainer(select_checkpoint(path)[0], log=False)  # as evaluate picks
    mine = {p: str(s.observation_space) + str(s.action_space) for p, s in trainer.hub.specs.items()}
    theirs = {
        p: str(s.observation_space) + str(s.action_space)
        for p, s in getattr(getattr(other, "hub", None), "specs", {}).items()
    }
    if mine != theirs:
        other.close()
        raise ValueError(
            f"--opponent {path!r}: that run's policies {sorted(theirs)} do not play this "
            f"run's game (policies {sorted(mine)}, with the same spaces, are needed)"
        )
    return other
