"""The numpy actor's heads against the torch module path: MultiCategorical, masked heads
(``action_mask`` observations), Tuple / Dict multi-action, and the heads torch draws on
the numpy forward (Beta, squashed Gaussian, Deterministic, tempered Categorical); same
seed, same actions and log-probs, the torch generator in the same state after."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import Beta, Categorical, Deterministic, SquashedGaussian
from rlblocks.masks import apply_action_mask, check_action_mask, mask_layout, masked_dist
from rlblocks.nest import tree_leaves
from rlblocks.train.actor import ActorInput
from rlblocks.train.fast import FCActor
from rlblocks.train.fast.choice import numpy_acting
from rlblocks.train.fast.squashed_actor import SquashedActor
from rlblocks.train.policy import Policy
from rlblocks.train.trainer_config import PPOConfig

pytestmark = pytest.mark.native  # the categorical draws run on the C++ kernel (and its twin)

OBS = Box(-2.0, 2.0, (5,), np.float32)


def policy(obs_space: gym.Space, action_space: gym.Space, seed: int = 0) -> Policy:
    """A policy with larger weights (outputs far from the initial near-uniform ones)."""
    torch.manual_seed(seed)
    config = PPOConfig.from_dict({"model": {"fcnet_hiddens": [16, 8]}})
    pol = Policy(obs_space, action_space, config)
    with torch.no_grad():
        for p in pol.model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return pol


def both_paths(pol: Policy, obs: np.ndarray, explore: bool) -> list[tuple[dict, float]]:
    """``(act's result, the next torch uniform)`` of the numpy actor, then of the module."""
    fast = pol.actor.fc if isinstance(pol.actor, SquashedActor) else pol.actor
    assert isinstance(fast, FCActor) and fast.numpy, fast.description
    results = []
    for actor in (fast, fast.fallback):
        torch.manual_seed(7)
        out = actor.act(ActorInput(obs, [], None, None), explore, True)
        results.append((out, torch.rand(1).item()))
    return results


def assert_same(pol: Policy, obs: np.ndarray, explore: bool) -> None:
    (fast, after_fast), (ref, after_ref) = both_paths(pol, obs, explore)
    assert after_fast == after_ref  # the same number of draws
    got, want = tree_leaves(fast["actions"]), tree_leaves(ref["actions"])
    assert type(fast["actions"]) is type(ref["actions"]) and len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        if np.issubdtype(b.dtype, np.integer):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in ("logp", "vf_preds", "dist_inputs"):
        assert fast[key].dtype == np.float32, key
        np.testing.assert_allclose(fast[key], ref[key], rtol=1e-5, atol=1e-4, err_msg=key)


def observations(space: gym.Space, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (n, *space.shape)).astype(np.float32)


@settings(max_examples=15)
@given(
    nvec=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    start=st.integers(-2, 2),
    explore=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_multicategorical_equals_the_torch_path(nvec, start, explore, seed):
    space = MultiDiscrete(nvec, start=[start] * len(nvec))
    assert_same(policy(OBS, space), observations(OBS, 32, seed), explore)


@pytest.mark.parametrize("explore", [True, False])
def test_integer_box_with_per_element_bounds_and_2d_nvec(explore, impl):
    """Categories outside an element's own bounds are never drawn; a 2-D nvec keeps its
    shape."""
    box = Box(np.array([0, -1, 2]), np.array([3, 1, 2]), (3,), np.int64)
    assert_same(policy(OBS, box), observations(OBS, 64, 1), explore)
    assert_same(policy(OBS, MultiDiscrete([[2, 3], [4, 2]])), observations(OBS, 64, 2), explore)


@pytest.mark.parametrize("explore", [True, False])
def test_multi_action_equals_the_torch_path(explore, impl):
    tup = Tuple((Discrete(3), Box(-1, 1, (2,)), MultiDiscrete([2, 2])))
    assert_same(policy(OBS, tup), observations(OBS, 32, 3), explore)
    dct = Dict({"move": Box(-1, 1, ()), "pick": Discrete(4, start=1)})
    assert_same(policy(OBS, dct), observations(OBS, 32, 4), explore)


@pytest.mark.parametrize("explore", [True, False])
@pytest.mark.parametrize("shape", [(3,), ()], ids=["vector", "scalar"])
def test_diag_gaussian_equals_the_torch_path(shape, explore, impl):
    """Box actions: the Gaussian drawn by ``_core.diag_gaussian_draw`` (or its twin) on
    torch's normals, as DiagGaussian draws and scores it."""
    assert_same(policy(OBS, Box(-1.0, 1.0, shape, np.float32)), observations(OBS, 32, 6), explore)


def masked_obs(space: Dict, masks: np.ndarray, seed: int) -> tuple[Any, np.ndarray]:
    """``(preprocessed space, flat observations)`` of the Dict with these masks."""
    prep = ModelCatalog.get_preprocessor_for_space(space)
    inner = observations(space["observations"], len(masks), seed)
    pairs = zip(masks, inner, strict=True)
    rows = [prep.transform({"action_mask": m, "observations": o}) for m, o in pairs]
    return prep.observation_space, np.stack(rows).astype(np.float32)


def random_masks(rng: np.random.Generator, n: int, nvec: list[int]) -> np.ndarray:
    """Masks with at least one legal action per component."""
    blocks = []
    for k in nvec:
        block = rng.random((n, k)) < 0.5
        block[np.arange(n), rng.integers(0, k, n)] = True
        blocks.append(block)
    return np.concatenate(blocks, 1).astype(np.int8)


@settings(max_examples=15)
@given(
    nvec=st.lists(st.integers(2, 5), min_size=1, max_size=3),
    discrete=st.booleans(),
    explore=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_masked_heads_equal_the_torch_path(nvec, discrete, explore, seed):
    """``action_mask`` observations: the mask is applied in numpy as the model applies it;
    a masked action is never drawn."""
    action_space = Discrete(nvec[0]) if discrete else MultiDiscrete(nvec)
    nvec = nvec[:1] if discrete else nvec
    space = Dict({"action_mask": MultiBinary(sum(nvec)), "observations": OBS})
    masks = random_masks(np.random.default_rng(seed), 48, nvec)
    obs_space, obs = masked_obs(space, masks, seed)
    pol = policy(obs_space, action_space)
    assert_same(pol, obs, explore)
    torch.manual_seed(seed)
    actions = pol.act(obs, [], explore=True)["actions"].reshape(len(obs), -1)
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    assert masks[np.arange(len(obs))[:, None], actions + offsets].all()


@pytest.mark.parametrize("explore", [True, False])
def test_masked_multicategorical_on_the_kernel_and_its_twin(explore, impl):
    space = Dict({"action_mask": MultiBinary(7), "observations": OBS})
    masks = random_masks(np.random.default_rng(0), 64, [3, 4])
    obs_space, obs = masked_obs(space, masks, 0)
    assert_same(policy(obs_space, MultiDiscrete([3, 4])), obs, explore)


def test_a_row_without_a_legal_action_is_refused_as_the_module_refuses_it():
    space = Dict({"action_mask": MultiBinary(3), "observations": OBS})
    masks = np.array([[1, 0, 0], [0, 0, 0]], np.int8)
    obs_space, obs = masked_obs(space, masks, 0)
    pol = policy(obs_space, Discrete(3))
    messages = []
    for actor in (pol.actor, pol.actor.fallback):
        with pytest.raises(ValueError) as err:
            actor.act(ActorInput(obs, [], None, None), True, True)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "action_mask row 1" in messages[0]


def test_a_hook_on_the_mask_model_takes_the_module_path():
    space = Dict({"action_mask": MultiBinary(3), "observations": OBS})
    obs_space, obs = masked_obs(space, np.ones((2, 3), np.int8), 0)
    pol = policy(obs_space, Discrete(3))
    calls = []
    handle = pol.model.register_forward_hook(lambda *args: calls.append(1))
    pol.act(obs, [])
    handle.remove()
    assert calls


BOX = Box(-1.0, 2.0, (2,), np.float32)
TORCH_HEADS = {
    "beta": partial(Beta, action_space=BOX),
    "squashed": partial(SquashedGaussian, action_space=BOX),
    "tempered": partial(Categorical, temperature=0.5),
    "deterministic": Deterministic,
}


@pytest.mark.parametrize("explore", [True, False])
@pytest.mark.parametrize("name", sorted(TORCH_HEADS))
def test_heads_drawn_by_torch_on_the_numpy_forward(name, explore):
    """Beta, squashed Gaussian, a tempered Categorical, Deterministic: the numpy forward,
    then the torch distribution itself (same draws, same log-probs and dist inputs)."""
    base = policy(OBS, BOX)  # 4 outputs: the heads below read them as they need
    pol = Policy(OBS, BOX, PPOConfig(), model=base.model, dist_class=TORCH_HEADS[name])
    if name == "deterministic" and not explore:  # a point mass has no density: both refuse
        for actor in (pol.actor, pol.actor.fallback):
            with pytest.raises(NotImplementedError, match="Deterministic.logp is undefined"):
                actor.act(ActorInput(observations(OBS, 4, 0), [], None, None), False, True)
        return
    assert_same(pol, observations(OBS, 32, 5), explore)
    assert "drawn by torch" in pol.actor.description or name == "squashed"


def mask_beside(action_space: gym.Space, deep: bool) -> tuple[Policy, FCActor, Any]:
    """RLlib's form: a policy's FC model with the mask handed next to the observation (no
    mask model); ``deep``: action 1's logit pushed below the masked rule's -1e8."""
    pol = policy(OBS, action_space)
    nvec = np.asarray(getattr(action_space, "nvec", [getattr(action_space, "n", 0)]))
    lay = mask_layout(action_space, pol.model.num_outputs, MultiBinary(int(nvec.sum())))
    actor = numpy_acting(pol.model, masked_dist(action_space), None, lay)
    assert isinstance(actor, FCActor), actor
    if deep:
        assert actor.layers.logits is not None
        with torch.no_grad():
            actor.layers.logits.bias[1] -= 5e8
    return pol, actor, lay


@pytest.mark.parametrize("explore", [True, False])
@pytest.mark.parametrize("deep", [False, True], ids=["plain", "below_the_floor"])
@pytest.mark.parametrize("action_space", [Discrete(4), MultiDiscrete([3, 2])], ids=str)
def test_sample_with_the_mask_beside_the_observation_equals_the_torch_path(
    action_space, deep, explore
):
    """``FCActor.sample`` (what RLlib's runner calls): the model's masked output, the masked
    distribution's draw scored by ``logp(actions)``, the generator left in the same
    state; also where a legal logit is below -1e8 (the draw applies the masked rule)."""
    pol, actor, lay = mask_beside(action_space, deep)
    # a masked Discrete masks and draws in one kernel call (masked_categorical_draw)
    assert actor._fused == isinstance(action_space, Discrete)
    nvec = list(np.asarray(getattr(action_space, "nvec", [4])))
    masks = random_masks(np.random.default_rng(3), 48, nvec).astype(np.float32)
    masks[:, 0] = 1.0  # a legal action above the floor in every row
    x = observations(OBS, 48, 3)
    torch.manual_seed(11)
    logits, actions, logp = actor.sample({"observations": x, "action_mask": masks}, explore)
    after_fast = torch.rand(1).item()
    with torch.no_grad():
        out, _ = pol.model({"obs": torch.from_numpy(x)}, [], None)
        want_logits = apply_action_mask(out, torch.from_numpy(masks), lay)
        dist = masked_dist(action_space)(want_logits, pol.model)
        torch.manual_seed(11)
        want = dist.sample() if explore else dist.deterministic_sample()
        want_logp = dist.logp(want)
    assert torch.rand(1).item() == after_fast
    np.testing.assert_array_equal(actions, want.numpy())
    np.testing.assert_allclose(logits, want_logits.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(logp, want_logp.numpy(), rtol=1e-5, atol=1e-4)
    flat = np.asarray(actions).reshape(len(x), -1) + np.concatenate([[0], np.cumsum(nvec)[:-1]])
    assert masks[np.arange(len(x))[:, None], flat].all()  # never a masked action


def test_sample_refuses_a_row_without_a_legal_action_with_the_doors_message():
    _, actor, lay = mask_beside(Discrete(4), False)
    masks = np.array([[1, 0, 0, 1], [0, 0, 0, 0]], np.float32)
    with pytest.raises(ValueError) as want:
        check_action_mask(masks, lay)
    with pytest.raises(ValueError) as got:
        actor.sample({"observations": observations(OBS, 2, 0), "action_mask": masks}, True)
    assert str(got.value) == str(want.value) and "action_mask row 1" in str(got.value)


@pytest.mark.parametrize("explore", [True, False])
@pytest.mark.parametrize("action_space", [Discrete(4), MultiDiscrete([3, 2])], ids=str)
def test_legal_logits_all_below_the_floor_are_refused_as_the_torch_draw_refuses_them(
    action_space, explore
):
    """The masked rule (a logit <= -1e8 counts as masked) can leave a row, or one of its
    components, with no legal action although its mask has one: the torch distribution
    raises there, and so must the numpy draw, never a masked action."""
    pol, actor, lay = mask_beside(action_space, deep=False)
    assert actor.layers.logits is not None
    with torch.no_grad():  # action 1 (component 0's only legal one below) deep under -1e8
        actor.layers.logits.bias[1] -= 5e8
    nvec = list(np.asarray(getattr(action_space, "nvec", [4])))
    masks = np.ones((2, sum(nvec)), np.float32)
    masks[1, : nvec[0]] = 0.0
    masks[1, 1] = 1.0  # row 1: the first block's one legal action is action 1
    x = observations(OBS, 2, 3)
    with torch.no_grad():
        out, _ = pol.model({"obs": torch.from_numpy(x)}, [], None)
        logits = apply_action_mask(out, torch.from_numpy(masks), lay)
    with pytest.raises(ValueError) as want:
        masked_dist(action_space)(logits).sample()
    with pytest.raises(ValueError) as got:
        actor.sample({"observations": x, "action_mask": masks}, explore)
    assert str(got.value) == str(want.value) and "fully masked" in str(got.value)
