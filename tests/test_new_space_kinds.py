"""gymnasium Sequence, Graph, Text and OneOf observations (issue 26): the flat forms in
closed form, the C++ core against its numpy twin (bit for bit, same messages) over random
nested spaces, batched against per-env forms, and bad inputs (message text, ``out=`` left
untouched)."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import both_impls
from hypothesis import given
from hypothesis import strategies as st
from rlblocks import _core
from rlblocks._reference.flatten import ReferenceFlattener
from rlblocks.preprocessors import NoPreprocessor, get_preprocessor
from rlblocks.spaces import Repeated
from spaces_strategies import NEW_KIND_OPTIONS, nested_spaces, sample_value, stack_batch

pytestmark = pytest.mark.native

S = gym.spaces
GI = S.GraphInstance
BOX2 = S.Box(-1.0, 1.0, (2,))
ONEOF = S.OneOf((S.Discrete(2), S.Box(-1.0, 1.0, (1,))))


def prep_for(space: gym.Space, **options: Any):
    return get_preprocessor(space)(space, options)


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


# --------------------------------------------------------------------------- closed form


def test_sequence_list_array_and_truncation(impl):
    seq = S.Sequence(S.Discrete(3))
    np.testing.assert_array_equal(
        prep_for(seq, sequence_max_len=3).transform((2, 0)),
        f32(2, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    )
    np.testing.assert_array_equal(
        prep_for(seq, sequence_max_len=3).transform(np.array([1])),
        f32(1, 0, 1, 0, 0, 0, 0, 0, 0, 0),
    )
    cut = prep_for(seq, sequence_max_len=2, sequence_truncate=True)
    np.testing.assert_array_equal(cut.transform([2, 1, 0, 0]), f32(2, 0, 0, 1, 0, 1, 0))
    boxes = S.Sequence(BOX2)
    rows = np.arange(8, dtype=np.float64).reshape(4, 2)
    np.testing.assert_array_equal(
        prep_for(boxes, sequence_max_len=3, sequence_truncate=True).transform(rows),
        f32(3, 0, 1, 2, 3, 4, 5),
    )
    np.testing.assert_array_equal(
        prep_for(boxes, sequence_max_len=3).transform(np.zeros((0, 2))), np.zeros(7, np.float32)
    )


def test_stacked_sequence_of_dicts_and_tuples_is_split_into_items(impl):
    space = S.Sequence(S.Dict(a=BOX2, b=S.Discrete(3)), stack=True)
    obs = {"a": f32(1, 2, 3, 4).reshape(2, 2), "b": np.array([2, 0])}
    np.testing.assert_array_equal(
        prep_for(space, sequence_max_len=3).transform(obs),
        f32(2, 1, 2, 0, 0, 1, 3, 4, 1, 0, 0, 0, 0, 0, 0, 0),
    )
    # the same items as a list of dicts give the same row
    items = [{"a": f32(1, 2), "b": 2}, {"a": f32(3, 4), "b": 0}]
    np.testing.assert_array_equal(
        prep_for(space, sequence_max_len=3).transform(items),
        prep_for(space, sequence_max_len=3).transform(obs),
    )
    tup = S.Sequence(S.Tuple((S.Discrete(2), BOX2)), stack=True)
    obs_t = (np.array([1, 0, 1]), f32(1, 2, 3, 4, 5, 6).reshape(3, 2))
    np.testing.assert_array_equal(
        prep_for(tup, sequence_max_len=2, sequence_truncate=True).transform(obs_t),
        f32(2, 0, 1, 1, 2, 1, 0, 3, 4),
    )


def test_graph_layout(impl):
    space = S.Graph(S.Box(-5.0, 5.0, (2,)), S.Discrete(3))
    prep = prep_for(space, graph_max_nodes=3, graph_max_edges=2)
    assert prep.size == 2 + 3 * 2 + 2 * 3 + 2 * 2
    g = GI(f32(1, 2, 3, 4).reshape(2, 2), np.array([2]), np.array([[1, 0]]))
    expected = np.zeros(prep.size, np.float32)
    expected[:2] = [2, 1]  # counts
    expected[2:6] = [1, 2, 3, 4]  # node features, third node zero
    expected[8 + 2] = 1  # edge 0: one-hot of 2
    expected[14:16] = [1, 0]  # links of edge 0
    np.testing.assert_array_equal(prep.transform(g), expected)
    # gymnasium's samples of a graph without edges carry edges=None, edge_links=None
    bare = np.zeros(prep.size, np.float32)
    bare[:2], bare[2:6] = [2, 0], [1, 2, 3, 4]
    np.testing.assert_array_equal(prep.transform(GI(g.nodes, None, None)), bare)
    with pytest.raises(ValueError, match="graph has 0 edges but 1 edge_links"):
        prep.transform(GI(g.nodes, None, np.array([[1, 0]])))
    # Discrete nodes one-hot, no edge space: the links alone set the edge count
    plain = prep_for(S.Graph(S.Discrete(2), None), graph_max_nodes=2, graph_max_edges=2)
    np.testing.assert_array_equal(
        plain.transform(GI(np.array([1, 0]), None, np.array([[0, 1], [1, 1]]))),
        f32(2, 2, 0, 1, 1, 0, 0, 1, 1, 1),
    )
    np.testing.assert_array_equal(
        plain.transform((np.array([1]), None, None)), f32(1, 0, 0, 1, 0, 0, 0, 0, 0, 0)
    )


def test_text_one_hot_and_ids_beyond_ascii(impl):
    space = S.Text(3, min_length=0, charset="aé☃")
    np.testing.assert_array_equal(
        prep_for(space).transform("☃a"), f32(2, 0, 0, 1, 1, 0, 0, 0, 0, 0)
    )
    np.testing.assert_array_equal(
        prep_for(space, text_encoding="ids").transform(np.str_("é☃é")), f32(3, 1, 2, 1)
    )
    np.testing.assert_array_equal(prep_for(space).transform(""), np.zeros(10, np.float32))
    cut = prep_for(S.Text(2, charset="ab"), text_truncate=True, text_encoding="ids")
    np.testing.assert_array_equal(cut.transform("babb"), f32(2, 1, 0))


def test_oneof_branch_one_hot_then_blocks(impl):
    prep = prep_for(ONEOF)
    np.testing.assert_array_equal(prep.transform((0, 1)), f32(1, 0, 0, 1, 0))
    np.testing.assert_array_equal(prep.transform((np.int64(1), [0.5])), f32(0, 1, 0, 0, 0.5))
    np.testing.assert_array_equal(prep.transform([1.0, np.array([-1.0])]), f32(0, 1, 0, 0, -1))


def test_new_kinds_nested_in_each_other(impl):
    space = S.Dict(
        s=S.Sequence(S.OneOf((S.Text(2, charset="ab"), S.Discrete(2)))),
        r=Repeated(S.Graph(S.Discrete(2), None), max_len=2),
    )
    prep = prep_for(space, sequence_max_len=2, graph_max_nodes=2, graph_max_edges=1)
    obs = {"r": [GI(np.array([1]), None, np.array([[0, 0]]))], "s": [(0, "ba"), (1, 1)]}
    # r: [1, graph(2, 1 node, 1 edge, nodes (0,1),(0,0), link (0,0)), zeros of graph 2]
    graph = [1, 1, 0, 1, 0, 0, 0, 0]
    # s: [2, item 0: branch 0, text "ba" one-hot, Discrete block; item 1: branch 1, 1]
    item0 = [1, 0, 2, 0, 1, 1, 0, 0, 0]
    item1 = [0, 1, 0, 0, 0, 0, 0, 0, 1]
    expected = f32(2, *item0, *item1, 1, *graph, *([0] * 8))  # the space keeps s before r
    np.testing.assert_array_equal(prep.transform(obs), expected)


# --------------------------------------------------------------------------- parity


@given(
    space=nested_spaces(allow_repeated=True, max_leaves=5, new_kinds=True),
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(0, 4),
    truncate=st.booleans(),
)
def test_native_equals_numpy_twin_on_random_nested_new_kinds(space, seed, n, truncate):
    options = dict(NEW_KIND_OPTIONS)
    if truncate:  # shorter than some samples: those are cut
        options.update(sequence_max_len=2, sequence_truncate=True)
    prep = get_preprocessor(space)(space, options)
    rng = np.random.default_rng(seed)
    obs = [sample_value(space, rng) for _ in range(n)]
    native, reference = both_impls(prep.transform_batch, obs)
    np.testing.assert_array_equal(native, reference)
    if isinstance(prep, NoPreprocessor):
        return  # a pass-through space: nothing of the new kinds
    assert native.shape == (n, prep.size)
    for text_arrays in (False, True):
        if n == 0:
            break  # no rows to stack
        batched = stack_batch(space, obs, text_arrays)
        b_native, b_reference = both_impls(prep.transform_batch, batched)
        np.testing.assert_array_equal(b_native, native)
        np.testing.assert_array_equal(b_reference, native)
    for i, o in enumerate(obs):
        single, single_ref = both_impls(prep.transform, o)
        np.testing.assert_array_equal(single.ravel(), native[i])
        np.testing.assert_array_equal(single_ref.ravel(), native[i])
        buf = np.full(prep.size + 2, 7.0, np.float32)
        both_impls(prep.write, o, buf, 1)
        np.testing.assert_array_equal(buf[1:-1], native[i])
        assert buf[0] == 7.0 and buf[-1] == 7.0


def bad_variants(space: gym.Space, value: Any) -> list:
    """Copies of ``value`` with one issue-26 part made invalid (every part, every way)."""
    out: list = []
    if isinstance(space, S.Dict):
        for k, sub in space.spaces.items():
            out += [{**value, k: bad} for bad in bad_variants(sub, value[k])]
    elif isinstance(space, S.Tuple):
        for i, sub in enumerate(space.spaces):
            out += [(*value[:i], bad, *value[i + 1 :]) for bad in bad_variants(sub, value[i])]
    elif isinstance(space, Repeated) or (isinstance(space, S.Sequence) and not space.stack):
        child = space.child_space if isinstance(space, Repeated) else space.feature_space
        for i, item in enumerate(value):
            out += [[*value[:i], bad, *value[i + 1 :]] for bad in bad_variants(child, item)]
        if isinstance(space, S.Sequence) and value:
            out.append(list(value) * 4)  # longer than sequence_max_len
    elif isinstance(space, S.Graph):
        nodes, edges, links = value
        out.append(GI(np.repeat(nodes[:1], 5, axis=0), edges, links))  # 5 > graph_max_nodes
        out.append((nodes, edges))
        if links is not None and len(links):
            bad_links = links.copy()
            bad_links[-1, 1] = len(nodes)
            out.append(GI(nodes, edges, bad_links))
            out.append(GI(nodes, edges, links.astype(np.float64) + 0.5))
    elif isinstance(space, S.Text):
        too_long = value + space.character_list[0] * (space.max_length + 1 - len(value))
        out += [7, "\xff" + value[1:], too_long]
        if space.min_length > 0:
            out.append("")
    elif isinstance(space, S.OneOf):
        branch, item = value
        out += [(len(space.spaces), item), (0.5, item), (branch,)]
        out += [(branch, bad) for bad in bad_variants(space.spaces[int(branch)], item)]
    return out


@given(
    space=nested_spaces(allow_repeated=True, max_leaves=5, new_kinds=True),
    seed=st.integers(0, 2**31 - 1),
)
def test_bad_values_in_random_nests_get_the_same_message_from_both(space, seed):
    prep = get_preprocessor(space)(space, NEW_KIND_OPTIONS)
    rng = np.random.default_rng(seed)
    good = sample_value(space, rng)
    for bad in bad_variants(space, good):
        native, reference = both_impls(_raise_message, prep.transform, bad)
        assert native == reference
        native, reference = both_impls(_raise_message, prep.transform_batch, [good, bad])
        assert native == reference
        assert native.startswith("obs[1]")


# --------------------------------------------------------------------------- bad inputs

SPACE = S.Dict(
    seq=S.Sequence(S.Discrete(3)),
    g=S.Graph(S.Box(-5.0, 5.0, (2,)), S.Discrete(2)),
    t=S.Text(4, charset="abc"),
    m=S.Text(2, min_length=0, charset="ab"),
    o=ONEOF,
    x=S.Box(-1.0, 1.0, (1,)),
)
OPTIONS = {"sequence_max_len": 3, "graph_max_nodes": 3, "graph_max_edges": 2}
ONEOF_LABEL = re.escape(str(ONEOF))


def good_obs() -> dict:
    return {
        "seq": [1, 2],
        "g": GI(np.zeros((2, 2), np.float32), np.array([1]), np.array([[0, 1]])),
        "t": "abc",
        "m": "b",
        "o": (1, f32(0.5)),
        "x": f32(0.25),
    }


def graph(nodes=None, edges=None, links=None) -> GI:
    return GI(
        np.zeros((2, 2), np.float32) if nodes is None else nodes,
        np.array([1]) if edges is None else edges,
        np.array([[0, 1]]) if links is None else links,
    )


BAD = [
    (
        "seq",
        [0, 1, 2, 0],
        r'obs["seq"]: sequence of length 4 is longer than sequence_max_len=3 '
        r"(raise sequence_max_len in the model config, or set sequence_truncate=True)",
    ),
    ("seq", [0, 5], 'obs["seq"][1]: value 5 is out of range for Discrete(3) (allowed 0..2)'),
    ("seq", "ab", 'obs["seq"]: expected a sequence of at most 3 items for'),
    (
        "g",
        graph(nodes=np.zeros((4, 2))),
        'obs["g"]: graph has 4 nodes, more than graph_max_nodes=3',
    ),
    (
        "g",
        graph(edges=np.zeros(3, int), links=np.zeros((3, 2), int)),
        'obs["g"]: graph has 3 edges, more than graph_max_edges=2',
    ),
    ("g", graph(edges=np.array([1, 0])), 'obs["g"]: graph has 2 edges but 1 edge_links'),
    (
        "g",
        graph(links=np.array([[0, 7]])),
        'obs["g"].edge_links[0]: edge 0 links node 7, but the graph has 2 nodes (allowed 0..1)',
    ),
    (
        "g",
        graph(links=np.array([[-1, 0]])),
        'obs["g"].edge_links[0]: edge 0 links node -1, but the graph has 2 nodes',
    ),
    ("g", graph(links=np.array([[0, 1, 0]])), 'obs["g"].edge_links: expected shape (1, 2)'),
    ("g", graph(nodes=np.zeros((2, 3))), 'obs["g"].nodes: expected shape (2, 2) for Box('),
    ("g", graph(nodes=np.array([["a", "b"]] * 2)), 'obs["g"].nodes: expected numbers of shape'),
    (
        "g",
        graph(edges=np.array([2])),
        'obs["g"].edges[0]: value 2 is out of range for Discrete(2) (allowed 0..1)',
    ),
    ("g", np.zeros(3), 'obs["g"]: expected a GraphInstance(nodes, edges, edge_links)'),
    (
        "t",
        "abcab",
        'obs["t"]: string of length 5 is longer than max_length=4 of Text(1, 4, charset=abc) '
        "(set text_truncate=True)",
    ),
    (
        "t",
        "abé",
        "obs[\"t\"]: character 'é' at position 2 is not in the charset of "
        "Text(1, 4, charset=abc) (allowed: 'abc')",
    ),
    ("t", "", 'obs["t"]: string of length 0 is shorter than min_length=1'),
    ("t", 7, 'obs["t"]: expected a str for Text(1, 4, charset=abc), got int'),
    ("t", b"ab", 'obs["t"]: expected a str for Text(1, 4, charset=abc), got bytes'),
    ("o", (2, f32(0.5)), f'obs["o"]: branch index 2 is out of range for {ONEOF} (allowed 0..1)'),
    ("o", (-1, 0), f'obs["o"]: branch index -1 is out of range for {ONEOF} (allowed 0..1)'),
    ("o", (0.5, 0), f'obs["o"]: branch index 0.5 is not an integer; {ONEOF} allows branch'),
    ("o", ("a", 0), f'obs["o"]: expected an integer for the branch index of {ONEOF}'),
    ("o", (0, 3), 'obs["o"][1]: value 3 is out of range for Discrete(2)'),
    ("o", 1, f'obs["o"]: expected (branch index, value) for {ONEOF}, got int'),
    ("o", (1, 2, 3), f'obs["o"]: expected (branch index, value) for {ONEOF}, got a tuple of 3'),
]


def _raise_message(fn, *args) -> str:
    with pytest.raises(ValueError) as err:
        fn(*args)
    return str(err.value)


@pytest.mark.parametrize(("key", "value", "message"), BAD)
def test_bad_values_same_message_on_both_and_out_untouched(key, value, message):
    prep = get_preprocessor(SPACE)(SPACE, OPTIONS)
    obs = good_obs()
    obs[key] = value
    native, reference = both_impls(_raise_message, prep.transform, obs)
    assert native.startswith(message), native
    assert reference == native
    batch = [good_obs(), good_obs(), obs]
    for form in (batch, stack_batch(SPACE, batch)):
        out = np.full((3, prep.size), 3.25, np.float32)
        native, reference = both_impls(_raise_message, prep.transform_batch, form, out)
        assert native.startswith(message.replace("obs", "obs[2]", 1)) or native.startswith(
            message.replace(f'obs["{key}"]', f'obs["{key}"][2]', 1)
        ), native
        assert reference == native
        assert (out == 3.25).all()
    buf = np.full(prep.size, 3.25, np.float32)
    both_impls(_raise_message, prep.write, obs, buf, 0)
    assert (buf == 3.25).all()


def test_truncation_hint_of_non_text_string_spaces_and_text_batches(impl):
    plan = [
        {
            "kind": "text",
            "size": 1 + 2 * 2,
            "label": "MissionSpace",
            "children": [],
            "max_len": 2,
            "min_len": 0,
            "charset": "ab",
            "encoding": "one_hot",
            "truncate": False,
            "length_key": "text_max_length",
        }
    ]
    core = _core.FlattenPlan(plan, 0)
    twin = ReferenceFlattener(plan)
    message = (
        "obs: string of length 3 is longer than max_length=2 of MissionSpace "
        "(raise text_max_length in the model config, or set text_truncate=True)"
    )
    for flattener in (core, twin):
        with pytest.raises(ValueError, match=re.escape(message)):
            flattener.transform("aba")
        rows = flattener.transform_batched(np.array(["ab", "b", ""]))
        np.testing.assert_array_equal(rows, [[2, 1, 0, 0, 1], [1, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
        with pytest.raises(ValueError, match=re.escape("obs: expected a sequence of 2 str")):
            flattener.transform_batched("ab")  # a str is not a batch of two
        with pytest.raises(ValueError, match=re.escape("obs: expected shape (2,) for a batch")):
            flattener.transform_batched(np.array([["a", "b"], ["a", "b"]]))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"kind": "text", "charset": "aa"}, "repeated character"),
        ({"kind": "text", "charset": ""}, "empty charset"),
        ({"kind": "text", "size": 6}, "inconsistent text size"),
        ({"kind": "text", "min_len": 3}, "bad text lengths"),
        ({"kind": "text", "encoding": "bits"}, "unknown text encoding"),
        (
            {"label": "t\ud800"},
            r"node field 'label' must be a str encodable as UTF-8, got 't\\ud800'",
        ),
        ({"encoding": 3}, "node field 'encoding' must be a str encodable"),
    ],
)
def test_plans_with_inconsistent_text_sizes_are_refused(entry, message):
    node = {
        "kind": "text",
        "size": 5,
        "label": "t",
        "children": [],
        "max_len": 2,
        "min_len": 0,
        "charset": "ab",
        "encoding": "one_hot",
        "truncate": False,
        "length_key": "",
    }
    node.update(entry)
    with pytest.raises(ValueError, match=message):
        _core.FlattenPlan([node], 0)


def test_plans_with_inconsistent_graph_or_oneof_sizes_are_refused():
    item = {"kind": "box", "size": 2, "label": "b", "children": [], "shape": [2], "map": "identity"}
    graph = {
        "kind": "graph",
        "size": 2 + 3 * 2 + 2 * 2,
        "label": "g",
        "children": [0],
        "max_nodes": 3,
        "max_edges": 2,
        "node_size": 2,
        "edge_size": 0,
    }
    _core.FlattenPlan([item, graph], 1)
    with pytest.raises(ValueError, match="inconsistent Graph size"):
        _core.FlattenPlan([item, {**graph, "size": graph["size"] + 1}], 1)
    with pytest.raises(ValueError, match="item sizes"):
        _core.FlattenPlan([item, {**graph, "node_size": 3}], 1)
    with pytest.raises(ValueError, match="does not fit in int64"):
        _core.FlattenPlan([item, {**graph, "max_edges": 2**62}], 1)
    oneof = {"kind": "oneof", "size": 2 + 2 + 2, "label": "o", "children": [0, 0]}
    _core.FlattenPlan([item, oneof], 1)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        _core.FlattenPlan([item, {**oneof, "size": 5}], 1)


@pytest.mark.parametrize("charset", ["ab\ud800", "\udfff"])
def test_a_charset_with_a_lone_surrogate_names_the_space_and_character(impl, charset):
    # it failed with pybind11's "Unable to cast Python instance" RuntimeError
    space = gym.spaces.Text(3, charset=charset)
    code = f"U\\+{ord(charset[-1]):04X}"
    with pytest.raises(ValueError, match=rf"^Text\(1, 3, charset=.*\\u.*lone surrogate .*{code}"):
        get_preprocessor(space)(space)
    string_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
    with pytest.raises(ValueError, match=rf"^text_charset: the charset holds .*{code}"):
        get_preprocessor(string_space)(string_space, {"text_charset": "x" + charset})
