"""The typed validators every config kind uses: the model config (:mod:`rlblocks.config`),
its encoder sub-configs, the trainers' configs (:mod:`rlblocks.train.trainer_config`,
:mod:`rlblocks.train.offpolicy_config`) and the replay settings.

Each validator takes the value and the name the user wrote (``"lr"``,
``"entity_encoder.dim"``), returns the value in its typed form and raises one ValueError
line naming the key, what is allowed and the value given. :func:`option` declares one row
of a config table: a dataclass field whose metadata holds its check, so defaults, fields
and checks come from one place.

Examples:
    >>> as_int(3, "num_envs"), as_number(0.5, "gamma", low=0.0, high=1.0)
    (3, 0.5)
    >>> as_int(0, "num_envs")
    Traceback (most recent call last):
    ...
    ValueError: num_envs must be an int >= 1, got 0
    >>> one_of("sum", "pool", ("mean", "sum"))
    'sum'
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import inspect
import math
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "Check",
    "as_bool",
    "as_float",
    "as_int",
    "as_number",
    "as_schedule",
    "checks_of",
    "choice",
    "config_keys",
    "dict_of",
    "field_docs",
    "int_at_least",
    "number_in",
    "run_checks",
    "is_int",
    "one_of",
    "option",
    "option_rows",
    "optional",
    "unknown_key_message",
]

#: A validator: ``check(value, name) -> typed value``; raises ValueError.
Check = Callable[[Any, str], Any]


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or numpy), bools excluded.

    Examples:
        >>> is_int(np.int64(3)), is_int(True), is_int(3.0)
        (True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_int(value: Any, name: str, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (no upper bound when None).

    Examples:
        >>> as_int(2**64, "seed", minimum=0, maximum=2**63 - 1)
        Traceback (most recent call last):
        ...
        ValueError: seed must be an int in [0, 9223372036854775807], got 18446744073709551616
    """
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int in [{minimum}, {maximum}], got {value!r}")
    return int(value)


def as_bool(value: Any, name: str) -> bool:
    """``value`` as a bool; only True or False (numpy's too), never 0, 1 or "yes".

    Examples:
        >>> as_bool(1, "twin_q")
        Traceback (most recent call last):
        ...
        ValueError: twin_q must be True or False, got 1
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def as_number(
    value: Any, name: str, low: float = -math.inf, high: float = math.inf, low_open: bool = False
) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` when ``low_open``).

    Examples:
        >>> as_number(float("inf"), "lr", low=0.0, low_open=True)
        Traceback (most recent call last):
        ...
        ValueError: lr must be a finite number > 0.0, got inf
        >>> as_number(2, "gamma", low=0.0, high=1.0)
        Traceback (most recent call last):
        ...
        ValueError: gamma must be in [0.0, 1.0], got 2
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        v = float(value)
    except OverflowError:  # an int beyond float's range
        v = math.inf
    too_low = v <= low if low_open else v < low
    if not math.isfinite(v) or too_low or v > high:
        if math.isinf(high):
            raise ValueError(
                f"{name} must be a finite number {'>' if low_open else '>='} {low}, got {value!r}"
            )
        lo = "(" if low_open else "["
        raise ValueError(f"{name} must be in {lo}{low}, {high}], got {value!r}")
    return v


def as_float(value: Any, name: str, positive: bool = False) -> float:
    """``value`` as a float: any real number but NaN (numpy's too; infinities pass), and
    above 0 when ``positive`` (the model config's numbers).

    Examples:
        >>> as_float(np.float32(2.0), "attention_init_gru_gate_bias")
        2.0
        >>> as_float(-1.0, "log_std_clip_param", positive=True)
        Traceback (most recent call last):
        ...
        ValueError: log_std_clip_param must be a positive number, got -1.0
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if math.isnan(out) or (positive and out <= 0):
        raise ValueError(f"{name} must be a {'positive ' if positive else ''}number, got {value!r}")
    return out


def as_schedule(value: Any, name: str) -> list[list[float]]:
    """``[[timestep, value], ...]``: a non-empty list of pairs of numbers >= 0, timesteps
    not decreasing (a piecewise-linear schedule).

    Examples:
        >>> as_schedule([[0, 1], [100, 0.05]], "epsilon")
        [[0.0, 1.0], [100.0, 0.05]]
        >>> as_schedule([[10, 1], [5, 0]], "epsilon")
        Traceback (most recent call last):
        ...
        ValueError: epsilon: timesteps must not decrease, got 5.0 after 10.0
    """
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(
            f"{name} must be a non-empty list of [timestep, value] pairs, got {value!r}"
        )
    out: list[list[float]] = []
    for i, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"{name}[{i}] must be a [timestep, value] pair, got {pair!r}")
        t = as_number(pair[0], f"{name}[{i}] timestep", low=0.0)
        v = as_number(pair[1], f"{name}[{i}] value", low=0.0)
        if out and t < out[-1][0]:
            raise ValueError(f"{name}: timesteps must not decrease, got {t} after {out[-1][0]}")
        out.append([t, v])
    return out


def one_of(value: Any, name: str, allowed: Iterable[Any]) -> Any:
    """``value`` if it is one of ``allowed``.

    Examples:
        >>> one_of("threads", "vector_mode", ("sync", "async"))
        Traceback (most recent call last):
        ...
        ValueError: vector_mode must be one of 'sync', 'async', got 'threads'
    """
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def optional(check: Check) -> Check:
    """``check`` that lets None through.

    Examples:
        >>> optional(as_int)(None, "encoder_latent_dim") is None
        True
    """

    def run(value: Any, name: str) -> Any:
        return None if value is None else check(value, name)

    return run


def unknown_key_message(
    key: Any,
    known: Iterable[str],
    what: str,
    *,
    aliases: Mapping[str, str] | None = None,
    cutoffs: tuple[float, ...] = (0.5,),
    list_known: bool = True,
    no_match: str = "",
) -> str:
    """The one line refusing ``key`` in a ``what`` config: another library's name for a key
    (``aliases``) or the closest known keys (tried at each of ``cutoffs`` in turn), else
    ``no_match``; then, when ``list_known``, every known key.

    Examples:
        >>> unknown_key_message("gama", ["lr", "gamma"], "PPO config")
        "unknown PPO config key 'gama'; did you mean 'gamma'? (known keys: gamma, lr)"
        >>> unknown_key_message("n_envs", ["num_envs"], "DQN", aliases={"n_envs": "num_envs"})
        "unknown DQN key 'n_envs'; did you mean 'num_envs'? (known keys: num_envs)"
    """
    known = list(known)
    close: list[str] = []
    if aliases and key in aliases:
        close = [aliases[key]]
    for cutoff in () if close else cutoffs:
        close = difflib.get_close_matches(str(key), known, n=3, cutoff=cutoff)
        if close:
            break
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else no_match
    listing = f" (known keys: {', '.join(sorted(known))})" if list_known else ""
    return f"unknown {what} key {key!r}{hint}{listing}"


def option(default: Any, check: Check, key: str | None = None) -> Any:
    """One row of a config table: a dataclass field with ``default`` (copied per instance
    when mutable) whose metadata holds its ``check`` and, when it differs from the
    attribute's name, its config ``key``.

    Examples:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Sub:
        ...     dim: int = option(64, as_int)
        >>> checks_of(Sub)["dim"](0, "sub.dim")
        Traceback (most recent call last):
        ...
        ValueError: sub.dim must be an int >= 1, got 0
    """
    metadata = {"check": check, "key": key}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def int_at_least(minimum: int, maximum: int | None = None) -> Check:
    """The check :func:`as_int` with these bounds."""
    return lambda value, name: as_int(value, name, minimum, maximum)


def number_in(low: float = -math.inf, high: float = math.inf, low_open: bool = False) -> Check:
    """The check :func:`as_number` with these bounds."""
    return lambda value, name: as_number(value, name, low, high, low_open)


def choice(*allowed: Any) -> Check:
    """The check :func:`one_of` these values."""
    return lambda value, name: one_of(value, name, allowed)


def dict_of(refusal: str) -> Check:
    """A check that takes any mapping (returned as a fresh dict) and refuses anything
    else with ``"{refusal}, got {value!r}"``."""

    def check(value: Any, name: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ValueError(f"{refusal}, got {value!r}")
        return dict(value)

    return check


def _field_check(cls: Any, name: str) -> tuple[Check, str] | None:
    """The check of field ``name`` and its config key: the nearest class in the MRO that
    declares the field with :func:`option` (a subclass may change just the default)."""
    for base in cls.__mro__:
        f = base.__dict__.get("__dataclass_fields__", {}).get(name)
        if f is not None and "check" in f.metadata:
            return f.metadata["check"], f.metadata.get("key") or name
    return None


def config_keys(cls: Any) -> dict[str, str]:
    """Config key -> attribute name, for every field of the dataclass ``cls``."""
    out = {}
    for f in dataclasses.fields(cls):
        found = _field_check(cls, f.name)
        out[found[1] if found else f.name] = f.name
    return out


def checks_of(cls: Any) -> dict[str, Check]:
    """Config key -> check, for the fields of a dataclass declared with :func:`option`."""
    out = {}
    for f in dataclasses.fields(cls):
        found = _field_check(cls, f.name)
        if found is not None:
            out[found[1]] = found[0]
    return out


def run_checks(config: Any) -> None:
    """Replaces each field of the dataclass instance ``config`` declared with :func:`option`
    by its check's typed value (in field order; the first bad value raises)."""
    for f in dataclasses.fields(config):
        found = _field_check(type(config), f.name)
        if found is not None:
            object.__setattr__(config, f.name, found[0](getattr(config, f.name), found[1]))


#: reStructuredText roles and literals in a docstring, for the plain text of ``--help``.
_ROLE = re.compile(r":[a-z]+:`(?:~?[\w.]*\.)?([^`<]*?)\s*(?:<[^>]*>)?`")


def _plain(text: str) -> str:
    """One line of plain text: the first sentence of ``text``, RST roles and literals
    shown as their text.

    Examples:
        >>> _plain("Uses :class:`~rlblocks.config.ModelConfig` (``lr``). More here.")
        'Uses ModelConfig (lr).'
    """
    text = _ROLE.sub(r"\1", " ".join(text.split())).replace("``", "")
    end = re.search(r"(?<![.])(?<!e\.g)(?<!i\.e)\.(\s|$)", text)
    return text[: end.start() + 1] if end else text


def _class_docs(klass: Any) -> dict[str, str]:
    """Attribute name -> the docstring written under it in ``klass``'s own body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):  # no source (a frozen or generated class)
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for stmt, after in zip(body, body[1:], strict=False):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            out[stmt.target.id] = _plain(after.value.value)
    return out


def field_docs(cls: Any) -> dict[str, str]:
    """Config key -> the one-line doc of its row: the first sentence of the docstring under
    the field in the nearest class of ``cls``'s MRO that documents it ("" when none)."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            docs.update(_class_docs(base))
    return {key: docs.get(name, "") for key, name in config_keys(cls).items()}


def option_rows(cls: Any) -> list[tuple[str, Any, str]]:
    """``(key, default, one-line doc)`` for every field of the config table ``cls``, in
    field order: what ``rlblocks train --help`` lists.

    Examples:
        >>> @dataclasses.dataclass
        ... class Sub:
        ...     dim: int = option(64, as_int)
        >>> option_rows(Sub)
        [('dim', 64, '')]
    """
    docs = field_docs(cls)
    rows = []
    for key, name in config_keys(cls).items():
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        rows.append((key, default, docs[key]))
    return rows
