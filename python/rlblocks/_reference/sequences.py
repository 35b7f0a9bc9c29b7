"""Pure-numpy twins of the sequence kernels (``rlblocks._core.seq_lens_from_ids`` and
``rlblocks._core.pad_sequences``).

They are vectorised (no per-row Python loop): the oracle for the parity tests and the
baseline the benchmark compares the C++ kernel with.

Examples:
    >>> import numpy as np
    >>> seq_lens_from_ids(np.array([1, 1, 5, 5, 5, 5]), None, None, 3)
    array([2, 3, 1], dtype=int32)
    >>> pad_sequences([np.arange(6)], np.array([2, 3, 1]), 3, False)[0]
    array([0, 1, 0, 2, 3, 4, 5, 0, 0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["gather_rows", "pad_sequences", "seq_lens_from_ids"]


def _int_vector(x: object, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iub":
        raise ValueError(f"{what}: expected integers, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D array, got shape {a.shape}")
    return a.astype(np.int64, copy=False)


def seq_lens_from_ids(
    episode_ids: object, agent_indices: object, unroll_ids: object, max_seq_len: int
) -> np.ndarray:
    """Lengths of runs of equal (episode, agent, unroll) ids, split every ``max_seq_len`` rows.

    Args:
        episode_ids: ``[N]`` integer ids.
        agent_indices: ``[N]`` integer ids or None.
        unroll_ids: ``[N]`` integer ids or None.
        max_seq_len: the longest sequence (>= 1).

    Returns:
        int32 ``seq_lens`` summing to N.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    if max_seq_len > 2**31 - 1:  # the lengths are int32, as natively
        raise ValueError(
            f"max_seq_len: {max_seq_len} does not fit (allowed -2147483648..2147483647)"
        )
    if episode_ids is None:
        raise ValueError("episode_ids are required when seq_lens are not given")
    eps = _int_vector(episode_ids, "episode_ids")
    n = len(eps)
    if n == 0:
        return np.zeros(0, np.int32)
    change = eps[1:] != eps[:-1]
    for name, ids in (("agent_indices", agent_indices), ("unroll_ids", unroll_ids)):
        if ids is None:
            continue
        v = _int_vector(ids, name)
        if len(v) != n:
            raise ValueError(f"{name} has {len(v)} rows, episode_ids has {n}")
        change |= v[1:] != v[:-1]
    run_starts = np.concatenate(([0], np.flatnonzero(change) + 1))
    run_lens = np.diff(np.append(run_starts, n))
    # Split each run into chunks of max_seq_len: q full chunks plus a remainder.
    chunks = -(-run_lens // max_seq_len)
    lens = np.full(int(chunks.sum()), max_seq_len, dtype=np.int64)
    last = np.cumsum(chunks) - 1
    lens[last] = run_lens - (chunks - 1) * max_seq_len
    return lens.astype(np.int32)


def pad_sequences(
    leaves: Sequence[np.ndarray],
    seq_lens: object,
    max_seq_len: int,
    pad_last: bool,
    order: object = None,
) -> list[np.ndarray]:
    """Pads every leaf's rows into ``[len(seq_lens) * max_seq_len, ...]`` blocks.

    Slot ``s`` holds sequence ``order[s]`` (identity when ``order`` is None); the rows after
    a sequence are zeros, or copies of its last row when ``pad_last`` (empty sequences: zeros).

    Args:
        leaves: arrays whose first dimension is ``sum(seq_lens)``.
        seq_lens: non-negative integer lengths, each at most ``max_seq_len``.
        max_seq_len: the padded length of every sequence.
        pad_last: repeat the last row instead of zero padding.
        order: an optional permutation of ``range(len(seq_lens))``.

    Returns:
        One padded array per leaf, same dtype and trailing shape.
    """
    if max_seq_len < 0:
        raise ValueError(f"max_seq_len must be >= 0, got {max_seq_len}")
    lens = _int_vector(seq_lens, "seq_lens")
    bad = np.flatnonzero((lens < 0) | (lens > max_seq_len))
    if len(bad):
        k = int(bad[0])
        raise ValueError(f"seq_lens[{k}] = {lens[k]} is outside [0, max_seq_len={max_seq_len}]")
    num_seq = len(lens)
    rows = int(lens.sum())
    if order is not None:
        perm = _int_vector(order, "order")
        if len(perm) != num_seq or not np.array_equal(np.sort(perm), np.arange(num_seq)):
            raise ValueError(f"order must be a permutation of range({num_seq})")
        slot_of = np.empty(num_seq, np.int64)
        slot_of[perm] = np.arange(num_seq)
    else:
        perm = slot_of = np.arange(num_seq)
    starts = np.cumsum(lens) - lens
    # Destination row of every source row: slot * T + offset within its sequence.
    seq_of_row = np.repeat(np.arange(num_seq), lens)
    dst = slot_of[seq_of_row] * max_seq_len + (np.arange(rows) - starts[seq_of_row])
    if pad_last:
        t = np.arange(max_seq_len)
        plen = lens[perm]
        src = starts[perm][:, None] + np.minimum(t[None, :], np.maximum(plen - 1, 0)[:, None])
        src = np.minimum(src.reshape(-1), max(rows - 1, 0))
        empty = np.repeat(plen == 0, max_seq_len)
    out = []
    for i, leaf in enumerate(leaves):
        a = np.asarray(leaf)
        if a.dtype == object:
            raise ValueError(f"leaf {i}: object arrays are not supported by the native kernel")
        if a.ndim < 1 or a.shape[0] != rows:
            raise ValueError(
                f"leaf {i}: expected {rows} rows (the sum of seq_lens), got shape {a.shape}"
            )
        if pad_last and rows:
            o = a[src]
            o[empty] = 0
        else:
            o = np.zeros((num_seq * max_seq_len,) + a.shape[1:], dtype=a.dtype)
            o[dst] = a
        out.append(o)
    return out


def gather_rows(leaves: Sequence[np.ndarray], index: object) -> list[np.ndarray]:
    """``leaf[index]`` for every leaf, bounds-checked (each sequence's initial state).

    Examples:
        >>> gather_rows([np.arange(5) * 10], np.array([0, 3]))[0].tolist()
        [0, 30]
    """
    idx = _int_vector(index, "index")
    out = []
    for i, leaf in enumerate(leaves):
        a = np.asarray(leaf)
        if a.dtype == object:
            raise ValueError(f"leaf {i}: object arrays are not supported by the native kernel")
        if a.ndim < 1:
            raise ValueError(f"leaf {i}: expected rows, got a scalar")
        bad = np.flatnonzero((idx < 0) | (idx >= a.shape[0]))
        if len(bad):
            k = int(bad[0])
            raise ValueError(
                f"index[{k}] = {idx[k]} is outside [0, {a.shape[0]}) for leaf {i} of shape "
                f"{a.shape}"
            )
        out.append(a[idx])
    return out
