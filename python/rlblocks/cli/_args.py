"""What the commands' parsers share: a subcommand whose user errors are one line on
stderr, and the run-directory argument.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="rlblocks")
    >>> sub = parser.add_subparsers(dest="command", required=True)
    >>> show = add_command(sub, "show", lambda args: print(args.run_dir) or 0,
    ...                    help="print a run directory", description="Prints RUN_DIR.")
    >>> add_run_dir(show)
    >>> args = parser.parse_args(["show", "runs/a"])
    >>> args.func(args)
    runs/a
    0
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

#: A command's body: the parsed arguments in, the exit code out.
Run = Callable[[argparse.Namespace], int]


def add_command(
    sub: Any, name: str, run: Run, *, help: str, description: str, add_help: bool = True
) -> argparse.ArgumentParser:
    """Adds the subcommand ``name`` to an argparse subparsers object; ``run`` runs guarded:
    a user's error (a ValueError, or an OSError such as a full disk) is one line
    ``rlblocks NAME: error: ...`` on stderr and exit code 2 (``RLBLOCKS_TRACEBACK=1`` shows
    the traceback; a ValueError's ``detail`` string, such as a config file's position
    marker, follows as it is), Ctrl-C is ``rlblocks NAME: interrupted`` and exit code 130.
    Options are never abbreviated (``--num-envs`` is not ``--num-envs-per-env-runner``);
    ``add_help=False`` leaves ``-h``/``--help`` to the command (``rlblocks train``'s lists
    its config keys)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description, allow_abbrev=False, add_help=add_help
    )
    parser.set_defaults(func=_guarded(run, name))
    return parser


def add_run_dir(
    parser: argparse.ArgumentParser, help: str = "run directory or checkpoint directory"
) -> None:
    """The positional ``run_dir`` argument."""
    parser.add_argument("run_dir", help=help)


def add_checkpoint_choice(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint auto|best|last``: which checkpoint of a native run directory
    (:func:`rlblocks.train.checkpoint.select_checkpoint`)."""
    parser.add_argument(
        "--checkpoint",
        choices=["auto", "best", "last"],
        default="auto",
        help="which checkpoint of a run directory: best (best/, the best score so far), last "
        "(the newest) or auto (default: best/ where a turn-based game keeps it by its games "
        "against a random legal player, else the newest); a checkpoint directory given as "
        "RUN_DIR is used as it is",
    )


def chosen_checkpoint(args: argparse.Namespace) -> tuple[Any, str]:
    """The checkpoint ``--checkpoint`` picks in ``args.run_dir`` (a native run) and the line
    that says which (:func:`say_checkpoint` prints it once the command has succeeded, so an
    error stays one line)."""
    from rlblocks.train.checkpoint import select_checkpoint

    return select_checkpoint(args.run_dir, args.checkpoint)


def restore_chosen(args: argparse.Namespace, ckpt: Any, said: str) -> tuple[Any, str]:
    """The trainer of ``ckpt`` (:func:`chosen_checkpoint`'s pick), restored for evaluation,
    and the line that says which. A run that is being trained removes its older checkpoints
    as it saves new ones (``keep_checkpoints``): when the pick is removed before it is read,
    the newest checkpoint is picked again (three tries)."""
    import warnings

    from rlblocks.cli._startup import before_trainer
    from rlblocks.train.restoring import restore_trainer

    before_trainer()
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # fresh evaluation episodes
                return restore_trainer(ckpt, log=False), said
        except (OSError, ValueError):
            if attempt == 2 or os.path.exists(ckpt):
                raise
        ckpt, said = chosen_checkpoint(args)
    raise AssertionError("unreachable")


def say_checkpoint(command: str, line: str) -> None:
    """``rlblocks COMMAND: LINE`` on stderr (stdout keeps the command's own output)."""
    print(f"rlblocks {command}: {line}", file=sys.stderr, flush=True)


def refuse_checkpoint_choice(args: argparse.Namespace) -> None:
    """``--checkpoint`` other than ``auto`` on a ``--backend rllib`` run: refused."""
    if args.checkpoint != "auto":
        raise ValueError(
            f"--checkpoint {args.checkpoint}: native runs only (a --backend rllib run is read "
            "from its newest checkpoint; give a checkpoint directory as RUN_DIR for another)"
        )


def _user_modules_importable() -> None:
    """``--env my_pkg.envs:MyEnv-v0`` finds ``my_pkg`` in the current directory, as
    ``python -m`` would (appended: it never shadows an installed package)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def _guarded(run: Run, name: str) -> Run:
    def guarded(args: argparse.Namespace) -> int:
        _user_modules_importable()
        try:
            return int(run(args))
        except (ValueError, OSError) as err:
            if os.environ.get("RLBLOCKS_TRACEBACK"):
                raise
            if isinstance(err, OSError):
                where = f": {err.filename}" if err.filename else ""
                message = f"{err.strerror or err}{where}"
            else:
                message = " ".join(str(err).split())
            print(f"rlblocks {name}: error: {message}", file=sys.stderr)
            detail = getattr(err, "detail", None)  # lines shown as they are (a YAML marker)
            if isinstance(detail, str) and detail:
                print(detail.rstrip("\n"), file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"rlblocks {name}: interrupted", file=sys.stderr)
            return 130

    return guarded
