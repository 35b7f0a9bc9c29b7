"""Entity, text and graph encoders (issue 26), alone and inside ComplexInputNetwork.

Properties checked on random inputs: permutation invariance (items reordered, graph nodes
relabelled consistently), padding invariance (garbage, NaN included, in padded slots
changes nothing), empty lists / graphs encode to zeros, the attention equals torch's own
multi-head attention with the same weights, the graph encoder equals a per-graph loop
written from the GINE formula and PyG's GINEConv / GINConv, every parameter gets a
gradient, one-hot and id text encodings agree; then ComplexInputNetwork on Dict spaces
holding Repeated, Sequence, Graph, Text and OneOf (shared and separate value layers, the
LSTM / attention wrappers) and its ONNX export against onnxruntime.
"""

from __future__ import annotations

import io
import logging
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.catalog import ModelCatalog
from rlblocks.models.complex_input import ComplexInputNetwork
from rlblocks.models.entity import EntityEncoder, MaskedPool, TextEncoder, split_items
from rlblocks.models.graph import GraphEncoder, pyg_available, split_graph
from rlblocks.preprocessors import get_preprocessor
from rlblocks.spaces import Repeated

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete
POOLS = ["mean", "max", "sum", "attention"]
needs_pyg = pytest.mark.skipif(not pyg_available(), reason="needs torch_geometric")


def _entity(kind: str, pool: str, item_size: int = 3) -> EntityEncoder:
    torch.manual_seed(0)
    return EntityEncoder(item_size, dim=8, heads=2, layers=2, pool=pool, type=kind)


def _lists(b: int = 4, n: int = 6, f: int = 3, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    items = torch.randn(b, n, f, generator=g)
    lengths = torch.tensor([n, 3, 1, 0][:b] + [2] * max(0, b - 4))
    return items, torch.arange(n).unsqueeze(0) < lengths.unsqueeze(1)


# ------------------------------------------------------------------------------ entities
@pytest.mark.parametrize("kind", ["attention", "deepsets"])
@pytest.mark.parametrize("pool", POOLS)
def test_entity_encoder_permutation_padding_and_empty(kind: str, pool: str) -> None:
    enc = _entity(kind, pool)
    items, mask = _lists()
    out = enc(items, mask)
    assert out.shape == (4, 9) and torch.isfinite(out).all()
    # The last feature is the fraction of the 6 slots in use: 6, 3, 1 and 0 items.
    torch.testing.assert_close(out[:, -1], torch.tensor([6.0, 3.0, 1.0, 0.0]) / 6)
    # Reorder the valid items of every row (valid items stay in front, as the layout has them).
    permuted = items.clone()
    for row, n in enumerate(mask.sum(1).tolist()):
        permuted[row, :n] = items[
            row, torch.randperm(n, generator=torch.Generator().manual_seed(row))
        ]
    torch.testing.assert_close(enc(permuted, mask), out, atol=1e-5, rtol=1e-5)
    # Garbage (huge values, NaN) in the padded slots changes nothing.
    garbage = torch.where(mask.unsqueeze(-1), items, torch.full_like(items, 1e6))
    garbage[3, 0, 0] = float("nan")
    torch.testing.assert_close(enc(garbage, mask), out)
    # The empty list (row 3) encodes to zeros (deepsets: rho of a zero pool).
    expected = torch.zeros(9)
    if enc.rho is not None:
        expected[:8] = enc.rho(torch.zeros(1, 8))[0]
    torch.testing.assert_close(out[3], expected)
    # But the items matter: changing a valid one changes the output.
    moved = items.clone()
    moved[0, 0] += 1.0
    assert not torch.allclose(enc(moved, mask)[0], out[0])


def test_self_attention_matches_torch_multihead_attention() -> None:
    enc = _entity("attention", "mean")
    attn = enc.blocks[0].attention
    x, mask = _lists(b=3, n=5, f=8)
    mask[2] = True  # rows with no padding at all, and rows with padding
    ours = attn(x, mask)
    ref, _ = torch.nn.functional.multi_head_attention_forward(
        x.transpose(0, 1),
        x.transpose(0, 1),
        x.transpose(0, 1),
        8,
        2,
        attn.qkv.weight,
        attn.qkv.bias,
        None,
        None,
        False,
        0.0,
        attn.out.weight,
        attn.out.bias,
        training=False,
        key_padding_mask=~mask,
        need_weights=False,
    )
    torch.testing.assert_close(ours, ref.transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_masked_pool_closed_form() -> None:
    x = torch.tensor([[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 6.0]] * 3])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert MaskedPool(2, "mean")(x, mask).tolist() == [[2.0, 1.0], [0.0, 0.0]]
    assert MaskedPool(2, "sum")(x, mask).tolist() == [[4.0, 2.0], [0.0, 0.0]]
    assert MaskedPool(2, "max")(x, mask).tolist() == [[3.0, 4.0], [0.0, 0.0]]
    pool = MaskedPool(2, "attention")
    w = torch.softmax(pool.score(x[0, :2]).squeeze(-1), 0)
    torch.testing.assert_close(pool(x, mask)[0], (w.unsqueeze(-1) * x[0, :2]).sum(0))
    assert pool(x, mask)[1].tolist() == [0.0, 0.0]


def test_split_items_and_bad_options() -> None:
    flat = torch.tensor([[2.0, 1, 2, 3, 4, 0, 0], [0.0, 0, 0, 0, 0, 0, 0]])
    items, mask = split_items(flat, 3, 2)
    assert items[0, 1].tolist() == [3.0, 4.0] and mask.tolist() == [
        [True, True, False],
        [False, False, False],
    ]
    with pytest.raises(ValueError, match="1 \\+ 3 \\* 3"):
        split_items(flat, 3, 3)
    with pytest.raises(ValueError, match=r"entity_encoder.dim=6 must be a multiple of .*heads=4"):
        EntityEncoder(3, dim=6, heads=4)
    with pytest.raises(ValueError, match="entity_encoder.pool"):
        EntityEncoder(3, pool="median")
    with pytest.raises(ValueError, match="entity_encoder.type"):
        EntityEncoder(3, type="flatten")
    with pytest.raises(ValueError, match="graph_encoder.layers"):
        GraphEncoder(2, layers=0)
    with pytest.raises(ValueError, match="graph_encoder.backend"):
        GraphEncoder(2, backend="dgl")


# ---------------------------------------------------------------------------------- text
def test_text_encoder_one_hot_equals_ids() -> None:
    opts = {"type": "attention", "dim": 8, "heads": 2, "layers": 1, "pool": "attention"}
    torch.manual_seed(0)
    by_ids = TextEncoder(6, 5, "ids", opts)
    by_one_hot = TextEncoder(6, 5, "one_hot", opts)
    by_one_hot.load_state_dict(by_ids.state_dict())
    ids = torch.tensor([[3, 1, 4, 1, 5], [2, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    lengths = torch.tensor([5.0, 1.0, 0.0])
    one_hot = torch.nn.functional.one_hot(ids, 6).float() * (
        torch.arange(5) < lengths.unsqueeze(1)
    ).unsqueeze(-1)
    ids_flat = torch.cat([lengths.unsqueeze(1), ids.float()], 1)
    one_hot_flat = torch.cat([lengths.unsqueeze(1), one_hot.reshape(3, -1)], 1)
    out = by_ids.forward_flat(ids_flat)
    torch.testing.assert_close(by_one_hot.forward_flat(one_hot_flat), out)
    assert out[2].abs().sum() == 0  # the empty string
    # Order matters for text (position embeddings): "31415" != "13415".
    swapped = ids_flat.clone()
    swapped[0, 1:3] = swapped[0, [2, 1]]
    assert not torch.allclose(by_ids.forward_flat(swapped)[0], out[0])


# --------------------------------------------------------------------------------- graphs
def _graphs(
    b: int = 4, n: int = 6, m: int = 10, f: int = 3, e: int = 2, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random padded graphs: row 0 full, rows with fewer nodes/edges, the last one empty."""
    g = torch.Generator().manual_seed(seed)
    nodes = torch.randn(b, n, f, generator=g)
    edges = torch.randn(b, m, e, generator=g) if e else None
    counts = [(n, m), (4, 7), (2, 1), (0, 0)][:b]
    links = torch.zeros(b, m, 2)
    for row, (nn_, mm) in enumerate(counts):
        if mm:
            links[row, :mm] = torch.randint(0, nn_, (mm, 2), generator=g).float()
    n_nodes = torch.tensor([c[0] for c in counts], dtype=torch.float32)
    n_edges = torch.tensor([c[1] for c in counts], dtype=torch.float32)
    return nodes, edges, links, n_nodes, n_edges


def _reference_graph(enc: GraphEncoder, nodes, edges, links, n_nodes, n_edges) -> torch.Tensor:
    """A per-graph loop of the GINE formula, x_i' = nn((1+eps) x_i + sum relu(x_j + lin e))."""
    outs = []
    for row in range(nodes.shape[0]):
        nn_, mm = int(n_nodes[row]), int(n_edges[row])
        x = enc.embed(nodes[row, :nn_])
        for i, conv in enumerate(enc.convs):
            agg = torch.zeros_like(x)
            for k in range(mm):
                s, d = int(links[row, k, 0]), int(links[row, k, 1])
                msg = x[s]
                if edges is not None:
                    msg = torch.relu(msg + conv.lin(edges[row, k]))
                agg[d] = agg[d] + msg
            x = conv.nn((1 + conv.eps) * x + agg)
            if i + 1 < len(enc.convs):
                x = torch.relu(x)
        outs.append(x.mean(0) if nn_ else torch.zeros(x.shape[1]))
    return torch.stack(outs)


@pytest.mark.parametrize("edge_size", [2, 0])
def test_graph_encoder_matches_a_per_graph_loop(edge_size: int) -> None:
    torch.manual_seed(0)
    enc = GraphEncoder(3, edge_size, dim=8, layers=2, pool="mean", backend="torch")
    batch = _graphs(e=edge_size)
    out = enc(*batch)
    torch.testing.assert_close(out, _reference_graph(enc, *batch), atol=1e-5, rtol=1e-5)
    assert out[3].abs().sum() == 0  # the empty graph


@pytest.mark.parametrize("backend", ["torch", pytest.param("pyg", marks=needs_pyg)])
@pytest.mark.parametrize("pool", POOLS)
def test_graph_encoder_relabelling_and_padding(backend: str, pool: str) -> None:
    torch.manual_seed(0)
    enc = GraphEncoder(3, 2, dim=8, layers=2, pool=pool, backend=backend)
    nodes, edges, links, n_nodes, n_edges = _graphs()
    assert edges is not None
    out = enc(nodes, edges, links, n_nodes, n_edges)
    assert torch.isfinite(out).all() and out[3].abs().sum() == 0
    # Relabel the valid nodes of every graph (new label = perm position) and shuffle edges.
    nodes2, edges2, links2 = nodes.clone(), edges.clone(), links.clone()
    g = torch.Generator().manual_seed(5)
    for row in range(4):
        nn_, mm = int(n_nodes[row]), int(n_edges[row])
        perm = torch.randperm(nn_, generator=g)  # new slot i holds old node perm[i]
        new_label = torch.empty(nn_, dtype=torch.long)
        new_label[perm] = torch.arange(nn_)
        nodes2[row, :nn_] = nodes[row, perm]
        order = torch.randperm(mm, generator=g)
        edges2[row, :mm] = edges[row, order]
        if mm:
            links2[row, :mm] = new_label[links[row, order].long()].float()
    torch.testing.assert_close(
        enc(nodes2, edges2, links2, n_nodes, n_edges), out, atol=1e-5, rtol=1e-5
    )
    # Garbage in padded node / edge / link slots (links out of range, negative, NaN features).
    nodes3, edges3, links3 = nodes.clone(), edges.clone(), links.clone()
    node_pad = torch.arange(6).unsqueeze(0) >= n_nodes.unsqueeze(1)
    edge_pad = torch.arange(10).unsqueeze(0) >= n_edges.unsqueeze(1)
    nodes3[node_pad] = float("nan")
    edges3[edge_pad] = 1e6
    links3[edge_pad] = torch.tensor([[-3.0, 50.0]])
    links3[2, 5] = torch.tensor([1.0, 0.0])  # a padded edge between valid nodes
    torch.testing.assert_close(enc(nodes3, edges3, links3, n_nodes, n_edges), out)
    # Edges matter: dropping one changes graph 0.
    fewer = n_edges.clone()
    fewer[0] -= 1
    assert not torch.allclose(enc(nodes, edges, links, n_nodes, fewer)[0], out[0])


@needs_pyg
@pytest.mark.parametrize("edge_size", [3, 0])
@pytest.mark.parametrize("pool", POOLS)
def test_graph_encoder_pyg_equals_torch(edge_size: int, pool: str) -> None:
    from torch_geometric.nn import GINConv, GINEConv

    torch.manual_seed(0)
    plain = GraphEncoder(4, edge_size, dim=16, layers=3, pool=pool, backend="torch")
    pyg = GraphEncoder(4, edge_size, dim=16, layers=3, pool=pool, backend="pyg")
    assert isinstance(pyg.convs[0], GINEConv if edge_size else GINConv)
    assert list(pyg.state_dict()) == list(plain.state_dict())
    pyg.load_state_dict(plain.state_dict())
    for seed in range(5):
        batch = _graphs(b=4, n=9, m=20, f=4, e=edge_size, seed=seed)
        torch.testing.assert_close(pyg(*batch), plain(*batch), atol=1e-5, rtol=1e-5)


def test_split_graph_reads_the_flat_layout() -> None:
    space = gym.spaces.Graph(Box(-1, 1, (2,)), Discrete(3))
    opts = {"graph_max_nodes": 4, "graph_max_edges": 5}
    prep = get_preprocessor(space)(space, opts)
    inst = gym.spaces.GraphInstance(
        np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], np.float32),
        np.array([2, 0]),
        np.array([[0, 2], [2, 1]]),
    )
    flat = torch.from_numpy(prep.transform(inst)).unsqueeze(0)
    nodes, edges, links, n_nodes, n_edges = split_graph(flat, 2, 3, 4, 5)
    assert (n_nodes.item(), n_edges.item()) == (3.0, 2.0)
    torch.testing.assert_close(nodes[0, :3], torch.from_numpy(inst.nodes))
    assert edges is not None and edges[0, :2].tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    assert links[0, :2].tolist() == [[0.0, 2.0], [2.0, 1.0]]
    assert nodes[0, 3].abs().sum() == 0 and links[0, 2:].abs().sum() == 0


# ------------------------------------------------------------------------------ gradients
def _assert_all_grads(module: torch.nn.Module, loss: torch.Tensor) -> None:
    loss.backward()
    missing = [n for n, p in module.named_parameters() if p.grad is None or not p.grad.any()]
    assert not missing, missing


@pytest.mark.parametrize("kind", ["attention", "deepsets"])
def test_gradients_reach_every_entity_parameter(kind: str) -> None:
    enc = _entity(kind, "attention")
    items, mask = _lists()
    _assert_all_grads(enc, enc(items, mask).pow(2).sum())


def test_gradients_reach_every_text_parameter() -> None:
    opts = {"type": "attention", "dim": 8, "heads": 2, "layers": 1, "pool": "attention"}
    enc = TextEncoder(6, 5, "ids", opts)
    flat = torch.tensor([[5.0, 3, 1, 4, 1, 5], [2.0, 0, 2, 0, 0, 0]])
    loss = enc.forward_flat(flat).pow(2).sum()
    loss.backward()
    # Rows of unused characters get no gradient; every other parameter does.
    assert enc.embedding.weight.grad is not None
    assert enc.embedding.weight.grad[[0, 1, 3, 4, 5]].abs().sum(1).gt(0).all()
    missing = [
        n
        for n, p in enc.named_parameters()
        if n != "embedding.weight" and (p.grad is None or not p.grad.any())
    ]
    assert not missing, missing


@pytest.mark.parametrize("backend", ["torch", pytest.param("pyg", marks=needs_pyg)])
def test_gradients_reach_every_graph_parameter(backend: str) -> None:
    enc = GraphEncoder(3, 2, dim=8, layers=2, pool="attention", backend=backend)
    _assert_all_grads(enc, enc(*_graphs()).pow(2).sum())


# -------------------------------------------------------------------- ComplexInputNetwork
ENC_CFG: dict[str, Any] = {
    "fcnet_hiddens": [16],
    "post_fcnet_hiddens": [16],
    "entity_encoder": {"dim": 8, "heads": 2, "layers": 1, "pool": "max"},
    "graph_encoder": {"dim": 8, "layers": 2, "backend": "torch"},
    "sequence_max_len": 4,
    "graph_max_nodes": 5,
    "graph_max_edges": 6,
    "text_max_length": 6,
}


def _all_kinds_space() -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "me": Box(-1, 1, (2,)),
            "items": Repeated(gym.spaces.Dict({"x": Box(-1, 1, (2,)), "k": Discrete(3)}), 4),
            "seq": gym.spaces.Sequence(Box(-1, 1, (3,))),
            "graph": gym.spaces.Graph(Box(-1, 1, (2,)), Discrete(2)),
            "text": gym.spaces.Text(6, charset="abc"),
            "choice": gym.spaces.OneOf([Discrete(2), Box(-1, 1, (2,))]),
        }
    )


def _all_kinds_obs(rng: np.random.Generator) -> dict[str, Any]:
    n, m = int(rng.integers(0, 6)), int(rng.integers(0, 7))
    links = rng.integers(0, max(n, 1), (m if n else 0, 2))
    return {
        "me": rng.uniform(-1, 1, 2).astype(np.float32),
        "items": [
            {"x": rng.uniform(-1, 1, 2).astype(np.float32), "k": int(rng.integers(3))}
            for _ in range(int(rng.integers(0, 5)))
        ],
        "seq": tuple(rng.uniform(-1, 1, 3).astype(np.float32) for _ in range(rng.integers(0, 5))),
        "graph": gym.spaces.GraphInstance(
            rng.uniform(-1, 1, (n, 2)).astype(np.float32), rng.integers(0, 2, len(links)), links
        ),
        "text": "".join(rng.choice(list("abc"), int(rng.integers(1, 7)))),
        "choice": (1, rng.uniform(-1, 1, 2).astype(np.float32))
        if rng.random() < 0.5
        else (0, int(rng.integers(2))),
    }


def _flat_batch(space: gym.Space, cfg: dict[str, Any], obs: list[Any]) -> tuple[Any, torch.Tensor]:
    prep = get_preprocessor(space)(space, cfg)
    return prep.observation_space, torch.from_numpy(prep.transform_batch(obs))


def test_complex_input_repeated_and_box_end_to_end() -> None:
    space = gym.spaces.Dict({"me": Box(-1, 1, (2,)), "others": Repeated(Box(-1, 1, (3,)), 5)})
    rng = np.random.default_rng(0)
    obs = [
        {"me": rng.uniform(-1, 1, 2), "others": list(rng.uniform(-1, 1, (k, 3)))}
        for k in (0, 1, 3, 5)
    ]
    obs_space, flat = _flat_batch(space, ENC_CFG, obs)
    assert ModelCatalog.default_model_class(obs_space, ENC_CFG) is ComplexInputNetwork
    torch.manual_seed(0)
    m = ComplexInputNetwork(obs_space, Discrete(3), 3, ENC_CFG, "m")
    assert sorted(m.entities) == ["1"] and isinstance(m.entities["1"].encoder, EntityEncoder)
    logits, _ = m({"obs": flat})
    assert logits.shape == (4, 3) and torch.isfinite(logits).all()
    # The items' order does not matter to the model.
    reordered = [{"me": o["me"], "others": o["others"][::-1]} for o in obs]
    torch.testing.assert_close(m({"obs": _flat_batch(space, ENC_CFG, reordered)[1]})[0], logits)
    # A structured input (the restored views) gives the same result as the flat row.
    from rlblocks.restore import restore_original_dimensions

    views = restore_original_dimensions(flat, obs_space)
    torch.testing.assert_close(m({"obs": views})[0], logits)


@pytest.mark.parametrize("share", [True, False])
def test_complex_input_all_kinds(share: bool) -> None:
    space = _all_kinds_space()
    cfg = {**ENC_CFG, "vf_share_layers": share}
    rng = np.random.default_rng(1)
    obs_space, flat = _flat_batch(space, cfg, [_all_kinds_obs(rng) for _ in range(8)])
    torch.manual_seed(0)
    m = ComplexInputNetwork(obs_space, Discrete(2), 2, cfg, "m")
    # Sorted keys: choice, graph, items, me, seq, text.
    assert sorted(m.flatten) == ["0", "3"] and sorted(m.graphs) == ["1"]
    assert sorted(m.entities) == ["2", "4", "5"]
    assert isinstance(m.entities["5"].encoder, TextEncoder)
    assert isinstance(m.graphs["1"].encoder, GraphEncoder)
    logits, _ = m({"obs": flat})
    value = m.value_function()
    assert logits.shape == (8, 2) and value.shape == (8,)
    assert torch.isfinite(logits).all() and torch.isfinite(value).all()
    # The restored structured views (RepeatedValues, GraphValues, ...) give the same result.
    from rlblocks.restore import restore_original_dimensions

    views = restore_original_dimensions(flat, obs_space)
    torch.testing.assert_close(m({"obs": views})[0], logits)
    torch.testing.assert_close(m.value_function(), value)
    names = [n for n, _ in m.named_parameters()]
    if share:
        assert m.value_trunk is None
    else:
        assert m.value_trunk is not None
        for part in ("entities.2.", "entities.5.", "graphs.1.", "flatten.0."):
            assert any(n.startswith(f"value_trunk.{part}") for n in names), part
        # The value loss never reaches the policy's encoders.
        m.zero_grad()
        m({"obs": flat})
        m.value_function().sum().backward()
        policy = [p for n, p in m.named_parameters() if not n.startswith(("value_", "logits_"))]
        assert all(p.grad is None or not p.grad.any() for p in policy)
        assert all(p.grad is not None for n, p in m.named_parameters() if n.startswith("value_"))


def test_catalog_picks_complex_input_for_structured_spaces() -> None:
    graph = gym.spaces.Graph(Box(-1, 1, (2,)), None)
    for space in (
        graph,
        gym.spaces.Text(5),
        gym.spaces.Dict({"a": Box(-1, 1, (2,)), "b": gym.spaces.Sequence(Box(-1, 1, (2,)))}),
        gym.spaces.Tuple((Box(-1, 1, (2,)), gym.spaces.OneOf([Discrete(2)]))),
    ):
        obs_space = get_preprocessor(space)(space).observation_space
        assert ModelCatalog.default_model_class(obs_space) is ComplexInputNetwork, space
    listed = gym.spaces.Dict({"a": Box(-1, 1, (2,)), "b": Repeated(Box(-1, 1, (2,)), 3)})
    obs_space = get_preprocessor(listed)(listed).observation_space
    flat_cfg = {"entity_encoder": {"type": "flatten"}}
    assert ModelCatalog.default_model_class(obs_space, flat_cfg).__name__ == "FullyConnectedNetwork"
    with_graph = gym.spaces.Dict({"a": listed, "g": graph})
    obs_space = get_preprocessor(with_graph)(with_graph).observation_space
    assert ModelCatalog.default_model_class(obs_space, flat_cfg) is ComplexInputNetwork


@pytest.mark.parametrize(
    ("space", "obs"),
    [
        (gym.spaces.Text(5, charset="ab"), ["ab", "b"]),
        (
            gym.spaces.Graph(Box(-1, 1, (2,)), None),
            [gym.spaces.GraphInstance(np.ones((2, 2), np.float32), None, np.array([[0, 1]]))] * 2,
        ),
        (gym.spaces.Sequence(Discrete(3)), [(1, 2), ()]),
        (gym.spaces.OneOf([Discrete(2), Box(-1, 1, (2,))]), [(0, 1), (1, np.zeros(2, np.float32))]),
        (Repeated(Box(-1, 1, (2,)), 3), [[np.zeros(2)], []]),
    ],
    ids=["text", "graph", "sequence", "oneof", "repeated"],
)
def test_structured_space_at_the_top_level(space: gym.Space, obs: list[Any]) -> None:
    obs_space, flat = _flat_batch(space, ENC_CFG, obs)
    model = ModelCatalog.get_model_v2(obs_space, Discrete(2), 2, ENC_CFG)
    assert isinstance(model, ComplexInputNetwork)
    out, _ = model({"obs": flat})
    assert out.shape == (2, 2) and torch.isfinite(out).all()
    assert model.value_function().shape == (2,)


@pytest.mark.parametrize(
    "wrap",
    [
        {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 3},
        {
            "use_attention": True,
            "attention_dim": 8,
            "attention_num_heads": 2,
            "attention_head_dim": 4,
            "attention_memory_inference": 3,
            "attention_memory_training": 3,
            "attention_position_wise_mlp_dim": 8,
        },
    ],
    ids=["lstm", "attention"],
)
def test_complex_input_inside_recurrent_wrappers(wrap: dict[str, Any]) -> None:
    space = _all_kinds_space()
    cfg = {**ENC_CFG, **wrap}
    rng = np.random.default_rng(2)
    obs_space, flat = _flat_batch(space, cfg, [_all_kinds_obs(rng) for _ in range(6)])
    model = ModelCatalog.get_model_v2(obs_space, Discrete(2), 2, cfg)
    assert isinstance(model.wrapped, ComplexInputNetwork)
    state = [s.unsqueeze(0).repeat(2, *([1] * s.dim())) for s in model.get_initial_state()]
    out, state_out = model(
        {"obs": flat, "prev_actions": torch.zeros(6), "prev_rewards": torch.zeros(6)},
        state,
        torch.tensor([3, 3]),
    )
    assert out.shape == (6, 2) and torch.isfinite(out).all()
    assert model.value_function().shape == (6,) and len(state_out) == len(state)


# --------------------------------------------------------------------------------- export
class _LogitsAndValue(torch.nn.Module):
    def __init__(self, model: ComplexInputNetwork):
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, _ = self.model({"obs": obs})
        return logits, self.model.value_function()


def test_onnx_export_matches_torch(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    space = _all_kinds_space()
    cfg = {**ENC_CFG, "vf_share_layers": False}
    rng = np.random.default_rng(3)
    obs_space, flat = _flat_batch(space, cfg, [_all_kinds_obs(rng) for _ in range(7)])
    # the torch backend only: the pyg backend (graph_encoder backend "auto" with the test
    # extra) is exported and compared by tests/test_export.py's structures cases
    for backend in ["torch"]:
        cfg["graph_encoder"] = {**ENC_CFG["graph_encoder"], "backend": backend}
        torch.manual_seed(0)
        m = ComplexInputNetwork(obs_space, Discrete(2), 2, cfg, "m").eval()

        policy = _LogitsAndValue(m)
        batch = torch.export.Dim("batch", min=1)
        path = tmp_path / f"{backend}.onnx"
        with (
            warnings.catch_warnings(),
            redirect_stdout(io.StringIO()),
            redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            program = torch.export.export(
                policy, (flat[:2],), dynamic_shapes=({0: batch},), strict=False
            )
            onnx_program = torch.onnx.export(program, (), dynamo=True, external_data=False)
            assert onnx_program is not None
            onnx_program.save(str(path))
        session = ort.InferenceSession(str(path))
        name = session.get_inputs()[0].name
        for rows in (flat, flat[:1]):
            logits, value = session.run(None, {name: rows.numpy()})
            with torch.no_grad():
                ref_logits, ref_value = policy(rows)
            np.testing.assert_allclose(logits, ref_logits.numpy(), atol=1e-5, rtol=1e-4)
            np.testing.assert_allclose(value, ref_value.numpy(), atol=1e-5, rtol=1e-4)
