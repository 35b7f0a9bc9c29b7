"""RNN / attention sequencing: chop a batch into padded sequences and add a time dimension.

Mirrors RLlib's ``policy/rnn_sequencing.py`` (same arguments, same outputs), with the
padding done by the C++ kernel (``rlblocks._core.pad_sequences``; all leaves in one call,
GIL released) and one deliberate fix: sequence ids never collide (RLlib adds episode id and
agent index, so (eps 1, agent 0) and (eps 0, agent 1) were one sequence; here a sequence
ends whenever the (episode, agent, unroll) tuple changes).

Examples:
    >>> import numpy as np
    >>> feats, states, lens = chop_into_sequences(
    ...     episode_ids=[1, 1, 5, 5, 5, 5], unroll_ids=[4, 4, 4, 4, 4, 4],
    ...     agent_indices=[0, 0, 0, 0, 0, 0],
    ...     feature_columns=[[4, 4, 8, 8, 8, 8], [1, 1, 0, 1, 1, 0]],
    ...     state_columns=[[4, 5, 4, 5, 5, 5]], max_seq_len=3)
    >>> [f.tolist() for f in feats]
    [[4, 4, 0, 8, 8, 8, 8, 0, 0], [1, 1, 0, 0, 1, 1, 0, 0, 0]]
    >>> [s.tolist() for s in states], lens.tolist()
    ([[4, 4, 5]], [2, 3, 1])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlblocks import _impl
from rlblocks._reference import sequences as _ref
from rlblocks.nest import tree_flatten, tree_leaves, tree_map, tree_unflatten

__all__ = [
    "PaddedBatch",
    "add_time_dimension",
    "chop_into_sequences",
    "pad_batch_to_sequences_of_same_size",
    "sequence_mask",
]

_PADDINGS = ("zero", "last")


# ------------------------------------------------------------------ nested data helpers
# Nested columns are flattened with dict keys sorted: RLlib's rnn_sequencing flattens with
# dm-tree, and the feature leaves chop_into_sequences returns come in that order.


def _leaves(x: Any) -> list[Any]:
    return tree_leaves(x, sort_keys=True)


def _unflatten(structure: Any, leaves: list[Any]) -> Any:
    """``structure`` with ``leaves`` in :func:`_leaves`' order (dicts keep their order)."""
    return tree_unflatten(tree_flatten(structure, sort_keys=True)[1], leaves)


def _column_leaves(col: Any, rows: int, what: str) -> list[np.ndarray]:
    """The leaves of a column (a list is one array), each checked to have ``rows`` rows."""
    if isinstance(col, list):
        col = np.array(col)
    leaves = [f if isinstance(f, np.ndarray) else np.asarray(f) for f in _leaves(col)]
    for j, leaf in enumerate(leaves):
        if leaf.ndim < 1 or leaf.shape[0] != rows:
            raise ValueError(
                f"{what} leaf {j}: expected {rows} rows (the sum of seq_lens), "
                f"got shape {leaf.shape}"
            )
    return leaves


def _as_int_array(x: Any, what: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what}: expected integers, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D array, got shape {a.shape}")
    return a


# ------------------------------------------------------------------ kernels (C++ or numpy)


def _pad_object(
    a: np.ndarray,
    lens: np.ndarray,
    max_len: int,
    pad_last: bool,
    order: np.ndarray | None,
    fill_empty_dicts: bool,
) -> np.ndarray:
    """Pads an object/str leaf (None, or fresh ``{}`` for info dicts, in the padding)."""
    num_seq = len(lens)
    out = np.empty((num_seq * max_len,) + a.shape[1:], dtype=object)
    is_infos = fill_empty_dicts and a.size > 0 and isinstance(a.reshape(-1)[0], dict)
    if is_infos:
        for i in range(out.size):
            out.reshape(-1)[i] = {}
    perm = np.arange(num_seq) if order is None else order
    starts = np.cumsum(lens) - lens
    for s, k in enumerate(perm):
        n = int(lens[k])
        base = s * max_len
        out[base : base + n] = a[starts[k] : starts[k] + n]
        if pad_last and n > 0:
            for t in range(n, max_len):
                out[base + t] = a[starts[k] + n - 1]
    return out


def _is_numeric(a: np.ndarray) -> bool:
    return a.dtype != object and a.dtype.kind not in "US"


def _pad_leaves(
    leaves: list[np.ndarray],
    lens: np.ndarray,
    max_len: int,
    pad_last: bool,
    order: np.ndarray | None,
    fill_empty_dicts: bool,
) -> list[np.ndarray]:
    """Pads all leaves (numeric ones in ONE native call, object/str ones in Python)."""
    numeric_idx = [i for i, a in enumerate(leaves) if _is_numeric(a)]
    numeric = [leaves[i] for i in numeric_idx]
    if _impl.native():
        from rlblocks import _core

        padded = _core.pad_sequences(numeric, lens, max_len, pad_last, order)
    else:
        padded = _ref.pad_sequences(numeric, lens, max_len, pad_last, order)
    out: list[np.ndarray] = [None] * len(leaves)  # type: ignore[list-item]
    for i, p in zip(numeric_idx, padded, strict=True):
        out[i] = p
    for i, a in enumerate(leaves):
        if out[i] is None:
            out[i] = _pad_object(a, lens, max_len, pad_last, order, fill_empty_dicts)
    return out


def _gather(leaves: list[np.ndarray], index: np.ndarray) -> list[np.ndarray]:
    numeric_idx = [i for i, a in enumerate(leaves) if _is_numeric(a)]
    numeric = [leaves[i] for i in numeric_idx]
    if _impl.native():
        from rlblocks import _core

        got = _core.gather_rows(numeric, index)
    else:
        got = _ref.gather_rows(numeric, index)
    out: list[np.ndarray] = [None] * len(leaves)  # type: ignore[list-item]
    for i, g in zip(numeric_idx, got, strict=True):
        out[i] = g
    return [a[index] if o is None else o for a, o in zip(leaves, out, strict=True)]


def _seq_lens_from_ids(eps: Any, agents: Any, unrolls: Any, max_seq_len: int) -> np.ndarray:
    if _impl.native():
        from rlblocks import _core

        return _core.seq_lens_from_ids(eps, agents, unrolls, int(max_seq_len))
    return _ref.seq_lens_from_ids(eps, agents, unrolls, int(max_seq_len))


# ------------------------------------------------------------------ public API


def chop_into_sequences(
    *,
    feature_columns: Sequence[Any],
    state_columns: Sequence[Any],
    max_seq_len: int,
    episode_ids: Any = None,
    unroll_ids: Any = None,
    agent_indices: Any = None,
    dynamic_max: bool = True,
    shuffle: bool = False,
    seq_lens: Any = None,
    states_already_reduced_to_init: bool = False,
    handle_nested_data: bool = False,
    _extra_padding: int = 0,
    padding: str = "zero",
    pad_infos_with_empty_dicts: bool = False,
) -> tuple[list[Any], list[Any], np.ndarray]:
    """Truncates and pads a batch of rows into sequences of the same length.

    Rows are walked in order; a sequence ends when the (episode, agent, unroll) id tuple
    changes or when it reaches ``max_seq_len`` rows. Given ``seq_lens`` are used as they are
    (the ids are then ignored). Sequence ``k`` occupies rows ``[k*T, k*T + len_k)`` of every
    output leaf; the rest of its block is zeros (``padding="zero"``) or copies of its last
    row (``padding="last"``). Object / str leaves pad with None (info dicts with ``{}`` when
    ``pad_infos_with_empty_dicts``) and come back as object arrays.

    Args:
        feature_columns: columns of N rows (arrays, lists, or nested dicts/tuples of arrays
            when ``handle_nested_data``).
        state_columns: state columns of N rows (nested allowed); the row at each sequence
            start becomes that sequence's initial state.
        max_seq_len: the longest sequence (>= 1); also the padded length T unless
            ``dynamic_max``.
        episode_ids: ``[N]`` integer episode ids (needed unless ``seq_lens`` is given).
        unroll_ids: ``[N]`` integer unroll ids or None.
        agent_indices: ``[N]`` integer agent indices or None.
        dynamic_max: pad to ``max(seq_lens) + _extra_padding`` instead of ``max_seq_len``.
        shuffle: permute the sequences (``np.random.permutation``, global RNG, as RLlib).
        seq_lens: precomputed lengths (non-negative, summing to N); None or empty to derive.
        states_already_reduced_to_init: return ``state_columns`` unchanged.
        handle_nested_data: return a list of flattened leaves per feature column.
        _extra_padding: extra steps added to the dynamic max.
        padding: ``"zero"`` or ``"last"``.
        pad_infos_with_empty_dicts: pad object leaves of dicts with ``{}`` instead of None.

    Returns:
        ``(feature_sequences, initial_states, seq_lens)``; ``seq_lens`` is int32.

    Raises:
        ValueError: unknown padding, non-integer or negative lengths, a sequence longer than
            the padded length, or a column whose row count differs from ``sum(seq_lens)``.

    Examples:
        >>> f, s, lens = chop_into_sequences(feature_columns=[np.arange(5.0)], state_columns=[],
        ...     max_seq_len=2, seq_lens=[2, 1, 2], padding="last")
        >>> f[0].tolist(), lens.tolist()
        ([0.0, 1.0, 2.0, 2.0, 3.0, 4.0], [2, 1, 2])
    """
    if padding not in _PADDINGS:
        raise ValueError(f"padding must be one of {_PADDINGS}, got {padding!r}")
    max_seq_len = int(max_seq_len)
    if max_seq_len < 1 and not (dynamic_max and seq_lens is not None and len(seq_lens) > 0):
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    if int(_extra_padding) < 0:
        raise ValueError(f"_extra_padding must be >= 0, got {_extra_padding}")

    if seq_lens is None or len(seq_lens) == 0:
        lens = _seq_lens_from_ids(
            _as_int_array(episode_ids, "episode_ids") if episode_ids is not None else None,
            None if agent_indices is None else _as_int_array(agent_indices, "agent_indices"),
            None if unroll_ids is None else _as_int_array(unroll_ids, "unroll_ids"),
            max_seq_len,
        )
    else:
        lens = _as_int_array(seq_lens, "seq_lens")
        if len(lens) and lens.min() < 0:
            k = int(np.argmin(lens))
            raise ValueError(f"seq_lens[{k}] = {lens[k]} is negative; lengths must be >= 0")
        lens = lens.astype(np.int32)

    if dynamic_max:
        max_len = (int(lens.max()) if len(lens) else 0) + int(_extra_padding)
    else:
        max_len = max_seq_len
        if len(lens) and lens.max() > max_len:
            k = int(np.argmax(lens))
            raise ValueError(
                f"seq_lens[{k}] = {lens[k]} exceeds max_seq_len={max_len} (dynamic_max=False)"
            )
    rows = int(lens.sum())

    order = np.random.permutation(len(lens)) if shuffle else None  # noqa: NPY002 (as RLlib)

    all_leaves: list[np.ndarray] = []
    counts: list[int] = []
    for c, col in enumerate(feature_columns):
        leaves = _column_leaves(col, rows, f"feature_columns[{c}]")
        all_leaves.extend(leaves)
        counts.append(len(leaves))
    padded = _pad_leaves(
        all_leaves, lens, max_len, padding == "last", order, pad_infos_with_empty_dicts
    )
    feature_sequences: list[Any] = []
    pos = 0
    for n in counts:
        feature_sequences.append(padded[pos : pos + n])
        pos += n

    if states_already_reduced_to_init:
        initial_states = list(state_columns)
    else:
        starts = np.cumsum(lens, dtype=np.int64) - lens
        if order is not None:
            starts = starts[order]
        structures, state_leaves, state_counts = [], [], []
        for c, col in enumerate(state_columns):
            if isinstance(col, list):
                col = np.array(col)
            leaves = _column_leaves(col, rows, f"state_columns[{c}]")
            structures.append(col)
            state_leaves.extend(leaves)
            state_counts.append(len(leaves))
        if state_leaves and len(lens) and int(lens.min()) == 0:
            raise ValueError("initial states need every sequence to have length >= 1")
        gathered = _gather(state_leaves, starts)
        initial_states = []
        pos = 0
        for col, n in zip(structures, state_counts, strict=True):
            initial_states.append(_unflatten(col, gathered[pos : pos + n]))
            pos += n

    if order is not None:
        lens = lens[order]
    if not handle_nested_data:
        feature_sequences = [f[0] for f in feature_sequences]
    return feature_sequences, initial_states, lens


def add_time_dimension(
    padded_inputs: Any,
    *,
    seq_lens: Any = None,
    max_seq_len: int | None = None,
    framework: str = "torch",
    time_major: bool = False,
) -> Any:
    """Reshapes ``[B*T, ...]`` into ``[B, T, ...]`` (``[T, B, ...]`` when ``time_major``).

    ``B = len(seq_lens)`` and ``T = rows // B`` (RLlib's torch rule); or, when only
    ``max_seq_len`` is given, ``T = max_seq_len``.

    Args:
        padded_inputs: a torch tensor or numpy array padded to equal-length sequences.
        seq_lens: the sequence lengths (only their count is used).
        max_seq_len: the padded length, used when ``seq_lens`` is None.
        framework: ``"torch"`` or ``"np"``/``"numpy"`` (informational; the input type decides).
        time_major: put time first.

    Returns:
        The reshaped tensor/array (a view when possible).

    Raises:
        ValueError: the rows do not split into ``B`` sequences of equal length.

    Examples:
        >>> import torch
        >>> add_time_dimension(torch.arange(6), seq_lens=torch.tensor([3, 1])).tolist()
        [[0, 1, 2], [3, 4, 5]]
    """
    if framework not in ("torch", "np", "numpy"):
        raise ValueError(f"framework must be 'torch' or 'np', got {framework!r}")
    # shape entries are ints already; no int() so that torch.export keeps a dynamic batch
    rows = padded_inputs.shape[0]
    if seq_lens is not None:
        b = seq_lens.shape[0] if hasattr(seq_lens, "shape") else len(seq_lens)
        if b == 0 or rows % b:
            raise ValueError(f"{rows} rows do not split into {b} sequences of equal length")
        t = rows // b
    elif max_seq_len is not None:
        t = int(max_seq_len)
        if t <= 0 or rows % t:
            raise ValueError(f"{rows} rows do not split into sequences of length {t}")
        b = rows // t
    else:
        raise ValueError("add_time_dimension needs seq_lens or max_seq_len")
    out = padded_inputs.reshape((b, t) + tuple(padded_inputs.shape[1:]))
    if time_major:
        out = (
            out.transpose(0, 1)
            if hasattr(out, "transpose") and not isinstance(out, np.ndarray)
            else np.swapaxes(out, 0, 1)
        )
    return out


def sequence_mask(seq_lens: Any, max_seq_len: int | None = None, time_major: bool = False) -> Any:
    """Boolean ``[B, T]`` mask (``[T, B]`` when ``time_major``): True on real steps.

    Use it to keep padded steps out of losses.

    Args:
        seq_lens: ``[B]`` lengths (torch tensor, numpy array or list).
        max_seq_len: T; defaults to ``max(seq_lens)``.
        time_major: transpose the mask.

    Returns:
        A torch bool tensor.

    Examples:
        >>> sequence_mask([2, 0, 3], 3).int().tolist()
        [[1, 1, 0], [0, 0, 0], [1, 1, 1]]
    """
    import torch

    lens = torch.as_tensor(seq_lens)
    if lens.dim() != 1:
        raise ValueError(f"seq_lens must be 1-D, got shape {tuple(lens.shape)}")
    t = int(lens.max()) if max_seq_len is None and lens.numel() else int(max_seq_len or 0)
    mask = torch.arange(t, device=lens.device)[None, :] < lens[:, None]
    return mask.t() if time_major else mask


class PaddedBatch(dict):
    """A training batch (column name -> array) padded to equal-length sequences.

    Attributes:
        max_seq_len: the padded length T (None when it was not set dynamically).
        zero_padded: always True; padding a PaddedBatch again is a no-op.
    """

    zero_padded: bool = True

    def __init__(self, data: Mapping[str, Any], max_seq_len: int | None) -> None:
        super().__init__(data)
        self.max_seq_len = max_seq_len


def pad_batch_to_sequences_of_same_size(
    batch: Mapping[str, Any],
    max_seq_len: int,
    shuffle: bool = False,
    batch_divisibility_req: int = 1,
    feature_keys: Sequence[str] | None = None,
    view_requirements: Mapping[str, Any] | None = None,
    padding: str = "zero",
) -> Mapping[str, Any]:
    """Pads a training batch (a mapping of columns) into equal-length sequences.

    RLlib's rules: batches with ``state_in_0``/``state_out_0`` are chopped by
    ``(eps_id, agent_index, unroll_id)`` (or by their ``seq_lens``); ``state_in_*`` columns
    become the initial state of each sequence (unless they already have one row per
    sequence), ``state_out_*`` are left alone, and ``seq_lens`` is set. The padded length is
    dynamic (``max(seq_lens)``) unless ``view_requirements["state_in_0"].shift_from`` is set
    (attention memories). A batch without states is only padded when
    ``batch_divisibility_req > 1`` is not met (then into chunks of that size); otherwise it
    is returned as is (columns permuted together when ``shuffle``).

    Args:
        batch: column name -> array of N rows (``eps_id`` needed unless ``seq_lens`` given).
        max_seq_len: the longest sequence.
        shuffle: shuffle sequences (or rows, for unpadded batches).
        batch_divisibility_req: required divisibility of the row count.
        feature_keys: the columns to pad (default: all but ``state_in_*``, ``state_out_*``,
            ``seq_lens``).
        view_requirements: the model's view requirements (for ``state_in_0``'s shift).
        padding: ``"zero"`` or ``"last"``.

    Returns:
        A :class:`PaddedBatch` (a dict) with the padded columns; the input is not modified.
        A batch that is already a PaddedBatch is returned unchanged.

    Examples:
        >>> b = pad_batch_to_sequences_of_same_size(
        ...     {"obs": np.arange(5.0), "eps_id": np.array([0, 0, 0, 1, 1]),
        ...      "state_in_0": np.zeros((5, 2))}, max_seq_len=2)
        >>> b["obs"].tolist(), b["seq_lens"].tolist(), b["state_in_0"].shape, b.max_seq_len
        ([0.0, 1.0, 2.0, 0.0, 3.0, 4.0], [2, 1, 2], (3, 2), 2)
    """
    if getattr(batch, "zero_padded", False):
        return batch
    if batch_divisibility_req < 1:
        raise ValueError(f"batch_divisibility_req must be >= 1, got {batch_divisibility_req}")
    has_states = "state_in_0" in batch or "state_out_0" in batch
    seq_lens = batch.get("seq_lens")
    rows = len(batch["obs"]) if "obs" in batch else None
    meets = True
    if batch_divisibility_req > 1:
        agent = batch.get("agent_index")
        multi = agent is not None and len(agent) and int(np.max(agent)) != 0
        meets = rows is not None and rows % batch_divisibility_req == 0 and not multi
    reduced = False
    if has_states:
        if (
            seq_lens is not None
            and "state_in_0" in batch
            and len(batch["state_in_0"]) == len(seq_lens)
        ):
            reduced = True
        vr = (view_requirements or {}).get("state_in_0")
        dynamic_max = vr is None or getattr(vr, "shift_from", None) is None
        padded_max: int | None = None
    elif not meets:
        max_seq_len = batch_divisibility_req
        dynamic_max = False
        padded_max = max_seq_len
    else:
        out = PaddedBatch(batch, None)
        if shuffle:
            n = len(next(iter(batch.values())))
            perm = np.random.permutation(n)  # noqa: NPY002 (global RNG, as RLlib)
            for k, v in out.items():
                out[k] = tree_map(lambda x: np.asarray(x)[perm], v)
        return out

    state_keys = [k for k in batch if k.startswith("state_in_")]
    if feature_keys:
        keys = list(feature_keys)
    else:
        keys = [
            k for k in batch if not k.startswith(("state_in_", "state_out_")) and k != "seq_lens"
        ]
    feats, states, lens = chop_into_sequences(
        feature_columns=[batch[k] for k in keys],
        state_columns=[batch[k] for k in state_keys],
        episode_ids=batch.get("eps_id"),
        unroll_ids=batch.get("unroll_id"),
        agent_indices=batch.get("agent_index"),
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        dynamic_max=dynamic_max,
        states_already_reduced_to_init=reduced,
        shuffle=shuffle,
        handle_nested_data=True,
        padding=padding,
    )
    out = PaddedBatch(batch, padded_max)
    for k, leaves in zip(keys, feats, strict=True):
        out[k] = _unflatten(batch[k], leaves) if not isinstance(batch[k], list) else leaves[0]
    for k, s in zip(state_keys, states, strict=True):
        out[k] = s
    out["seq_lens"] = np.asarray(lens)
    if dynamic_max:
        out.max_seq_len = int(lens.max()) if len(lens) else 0
    return out
