"""A string repeated in a batch (MiniGrid's mission: constant within an episode and across
envs) is encoded once per distinct string (issue 46, item 4), with the same encodings and
gradients as encoding every row; a changed string is encoded on its own, and an exported
model still takes any batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from rlblocks.models.entity import _FINGERPRINTS, TextEncoder, distinct_rows

OPTS = {"type": "attention", "dim": 8, "heads": 2, "layers": 1, "pool": "mean"}


def _flat(words: list[str], charset: str = "abcd", max_len: int = 5) -> torch.Tensor:
    rows = []
    for word in words:
        ids = [charset.index(c) for c in word] + [0] * (max_len - len(word))
        rows.append([float(len(word)), *map(float, ids)])
    return torch.tensor(rows)


def _encoder() -> tuple[TextEncoder, list[int]]:
    torch.manual_seed(0)
    enc = TextEncoder(4, 5, "ids", OPTS)
    seen: list[int] = []

    def record(module: torch.nn.Module, args: Any, output: Any) -> None:
        seen.append(int(args[0].shape[0]))

    enc.entities.register_forward_hook(record)
    return enc, seen


def test_a_repeated_string_is_encoded_once_and_a_changed_one_again() -> None:
    enc, seen = _encoder()
    # Two envs' missions over three steps: env 0's changes at step 2.
    words = ["abc", "dd", "abc", "dd", "cab", "dd"]
    flat = _flat(words)
    out = enc.forward_flat(flat)
    assert seen == [3]  # "abc", "dd", "cab": each distinct string once
    singles = torch.cat([enc.forward_flat(_flat([w])) for w in words])
    torch.testing.assert_close(out, singles)
    assert not torch.allclose(out[0], out[4])  # the changed string has its own encoding
    torch.testing.assert_close(out[0], out[2])


def test_gradients_equal_encoding_every_row() -> None:
    enc, _ = _encoder()
    flat = _flat(["abc", "abc", "dd", "abc"])
    weights = torch.arange(1.0, 5.0).unsqueeze(1)  # rows weigh differently in the loss
    (enc.forward_flat(flat) * weights).sum().backward()
    shared = {n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None}
    enc.zero_grad()
    rows = torch.cat([enc.forward_flat(flat[i : i + 1]) for i in range(4)])
    (rows * weights).sum().backward()
    for name, param in enc.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(shared[name], param.grad, msg=name)


def test_distinct_rows_never_groups_different_rows() -> None:
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    key = (2, rows.dtype, rows.device)
    distinct_rows(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))  # caches the 2-float projection
    saved = _FINGERPRINTS[key]
    try:
        _FINGERPRINTS[key] = torch.zeros(2)  # every row now shares one fingerprint
        assert distinct_rows(rows) is None  # the exact comparison refuses the grouping
        found = distinct_rows(torch.ones(3, 2))
        assert found is not None and found[0].tolist() == [0]
    finally:
        _FINGERPRINTS[key] = saved
    nan = torch.tensor([[float("nan"), 1.0], [float("nan"), 1.0]])
    assert distinct_rows(nan) is None  # NaN equals nothing: encoded row by row


def test_export_with_repeated_rows_takes_any_batch() -> None:
    import gymnasium as gym
    from rlblocks.catalog import ModelCatalog
    from rlblocks.preprocessors import get_preprocessor

    space = gym.spaces.Dict(
        {"mission": gym.spaces.Text(5, charset="abcd"), "x": gym.spaces.Box(-1, 1, (2,))}
    )
    config = {"entity_encoder": {"dim": 8, "heads": 2}}
    prep = get_preprocessor(space)(space, config)
    torch.manual_seed(0)
    model = ModelCatalog.get_model_v2(
        prep.observation_space, gym.spaces.Discrete(2), 2, config, framework="torch"
    ).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, flat: torch.Tensor) -> torch.Tensor:
            return self.model({"obs": flat})[0]

    def batch(words: list[str]) -> torch.Tensor:
        rows = [prep.transform({"mission": w, "x": [0.5, -0.5]}) for w in words]
        return torch.as_tensor(np.stack(rows))

    dim = torch.export.Dim("batch", min=1)
    example = batch(["abc", "abc", "abc"])  # repeated: the dedup must not be traced
    program = torch.export.export(Logits(), (example,), dynamic_shapes=({0: dim},), strict=False)
    other = batch(["dd", "abc", "cab", "dd"])
    with torch.no_grad():
        torch.testing.assert_close(program.module()(other), Logits()(other))


@pytest.mark.parametrize("encoding", ["one_hot", "ids"])
def test_minigrid_mission_batch_encodes_once(encoding: str) -> None:
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("minigrid")
    from rlblocks.catalog import ModelCatalog
    from rlblocks.models.complex_input import ComplexInputNetwork
    from rlblocks.preprocessors import get_preprocessor

    env = gym.make("minigrid:MiniGrid-Empty-5x5-v0")
    obs = [env.reset(seed=s)[0] for s in range(4)]
    space = env.observation_space
    config = {"text_encoding": encoding, "entity_encoder": {"dim": 8, "heads": 2}}
    prep = get_preprocessor(space)(space, config)
    flat = torch.as_tensor(np.stack([prep.transform(o) for o in obs]))
    torch.manual_seed(0)
    model = ModelCatalog.get_model_v2(
        prep.observation_space, env.action_space, 3, config, framework="torch"
    )
    assert isinstance(model, ComplexInputNetwork)
    texts = [m for m in model.modules() if isinstance(m, TextEncoder)]
    seen: list[int] = []
    for text in texts:
        text.entities.register_forward_hook(lambda m, a, o: seen.append(int(a[0].shape[0])))
    logits, _ = model({"obs": flat})
    assert seen and set(seen) == {1}  # one mission, four observations
    one = torch.cat([model({"obs": flat[i : i + 1]})[0] for i in range(4)])
    torch.testing.assert_close(logits, one)


def test_a_block_changed_in_place_is_grouped_again() -> None:
    def groups(rows: torch.Tensor) -> list[int]:
        found = distinct_rows(rows)
        assert found is not None
        first, inverse = found
        assert torch.equal(rows[first][inverse], rows)
        return [int(first[i]) for i in inverse]  # each row's first equal row

    rows = _flat(["abc", "abc", "dd"])
    assert groups(rows) == [0, 0, 2]
    assert groups(rows) == [0, 0, 2]  # the same block again (the value function's encoder)
    rows[1] = _flat(["dd"])[0]  # written in place: its version changes
    assert groups(rows) == [0, 1, 1]


def test_rollout_encodings_are_remembered_until_a_parameter_changes() -> None:
    enc, seen = _encoder()
    flat = _flat(["abc", "dd"])
    with torch.no_grad():
        first = enc.forward_flat(flat)
        again = enc.forward_flat(_flat(["dd", "abc", "dd"]))  # both strings remembered
        assert seen == [2]
        torch.testing.assert_close(again, first[[1, 0, 1]])
        enc.forward_flat(_flat(["cab", "abc"]))  # a new string: only it is encoded
        assert seen == [2, 1]
        enc.position.data.add_(0.5)  # an update the tensor's version does not show
        changed = enc.forward_flat(flat)
        assert seen == [2, 1, 2]
    torch.testing.assert_close(changed, enc.forward_flat(flat))  # with gradients: no memo
    assert not torch.allclose(changed, first)
