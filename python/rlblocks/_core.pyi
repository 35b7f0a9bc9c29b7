"""Type stubs of rlblocks._core (the native kernels: batched, GIL released, threaded).

Hand-maintained next to cpp/bindings/; tests/test_core_stub.py checks that it declares, and
lists in ``__all__``, exactly what the extension exports.
"""

from __future__ import annotations
import numpy
import numpy.typing
import typing

__all__: list[str] = [
    "FlattenPlan",
    "FrameStacker",
    "ReplayCore",
    "RunningStat",
    "categorical_draw",
    "check_out",
    "dense_forward",
    "diag_gaussian_draw",
    "gather_rows",
    "get_num_threads",
    "her_relabel",
    "image_crop",
    "image_generic_pixel",
    "image_max_last_two",
    "image_palette_resize",
    "image_palette_unknown",
    "image_resize",
    "image_rgb_to_gray",
    "masked_categorical_draw",
    "mean_std_filter",
    "pad_sequences",
    "seq_lens_from_ids",
    "set_num_threads",
    "squashed_gaussian_grad",
    "squashed_gaussian_sample",
    "tanh",
]

class FlattenPlan:
    """
    A space compiled into a flat float32 layout (built by rlblocks.preprocessors).
    """
    def __init__(self, nodes: list, root: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def transform(self, obs: typing.Any) -> numpy.typing.NDArray[numpy.float32]: ...
    def transform_batched(
        self, obs: typing.Any, out: typing.Any = None
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def transform_list(
        self, obs_list: typing.Any, out: typing.Any = None
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def write(
        self, obs: typing.Any, array: typing.Any, offset: typing.SupportsInt | typing.SupportsIndex
    ) -> None: ...
    @property
    def size(self) -> int: ...

class RunningStat:
    """
    Running mean/variance (float64) with exact batched updates and merges.
    """
    def __init__(self, shape: typing.Any) -> None: ...
    def copy(self) -> RunningStat: ...
    def get_state(self) -> dict: ...
    def push(self, x: typing.Any) -> None: ...
    def push_batch(self, x: typing.Any) -> None: ...
    def reset(self) -> None: ...
    def set_state(self, state: typing.Any) -> None: ...
    def update(self, other: RunningStat) -> None: ...
    @property
    def mean(self) -> numpy.typing.NDArray[numpy.float64]: ...
    @property
    def n(self) -> int: ...
    @property
    def n_delta(self) -> int: ...
    @property
    def shape(self) -> tuple: ...
    @property
    def std(self) -> numpy.typing.NDArray[numpy.float32]: ...
    @property
    def var(self) -> numpy.typing.NDArray[numpy.float32]: ...

class FrameStacker:
    """
    Ring-buffer frame stacking for B envs x k frames.
    """
    def __init__(
        self,
        num_envs: typing.Any,
        k: typing.Any,
        frame_shape: typing.Any,
        dtype: typing.Any,
        channels_last: bool,
    ) -> None: ...
    def get_state(self) -> dict: ...
    def observation(self, out: typing.Any = None) -> typing.Any: ...
    def push(
        self,
        frames: typing.Any,
        reset_mask: typing.Any = None,
        out: typing.Any = None,
        copy: bool = True,
    ) -> typing.Any: ...
    def reset(
        self, frames: typing.Any, env_ids: typing.Any = None, out: typing.Any = None
    ) -> typing.Any: ...
    def set_state(self, state: typing.Any) -> None: ...
    @property
    def channels_last(self) -> bool: ...
    @property
    def dtype(self) -> numpy.dtype[typing.Any]: ...
    @property
    def frame_shape(self) -> tuple: ...
    @property
    def k(self) -> int: ...
    @property
    def num_envs(self) -> int: ...
    @property
    def observation_shape(self) -> tuple: ...

class ReplayCore:
    """
    Replay storage: per-env rings, sum tree, n-step and frame-once assembly.
    """
    def __init__(
        self,
        capacity: typing.Any,
        num_envs: typing.Any,
        obs_shape: typing.Any,
        obs_dtype: typing.Any,
        action_shape: typing.Any,
        action_dtype: typing.Any,
        n_step: typing.Any,
        gamma: typing.Any,
        frame_stack: typing.Any,
        stack_axis: typing.Any,
        prioritized: typing.Any,
    ) -> None: ...
    def add(
        self,
        obs: typing.Any,
        actions: typing.Any,
        rewards: typing.Any,
        terminated: typing.Any,
        truncated: typing.Any,
        next_obs: typing.Any,
        valid: typing.Any = None,
    ) -> None: ...
    def get_state(self) -> dict: ...
    def sample(self, u: typing.Any, out: typing.Any = None) -> tuple: ...
    def set_leaves(self, indices: typing.Any, values: typing.Any) -> None: ...
    def set_state(self, state: typing.Any) -> None: ...
    @property
    def action_dtype(self) -> numpy.dtype[typing.Any]: ...
    @property
    def action_shape(self) -> tuple: ...
    @property
    def capacity(self) -> int: ...
    @property
    def frame_stack(self) -> int: ...
    @property
    def gamma(self) -> float: ...
    @property
    def n_step(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def num_envs(self) -> int: ...
    @property
    def obs_dtype(self) -> numpy.dtype[typing.Any]: ...
    @property
    def obs_shape(self) -> tuple: ...
    @property
    def prioritized(self) -> bool: ...
    @property
    def stack_axis(self) -> int: ...

def _flatten_scratch_bytes() -> int: ...
def _image_allow_simd(allowed: bool) -> bool:
    """
    Allows or forbids the AVX2 image paths (for tests: both paths compute the same integers); returns the previous setting.
    """

def categorical_draw(
    logits: typing.Any, uniforms: typing.Any = None
) -> tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.float32]]:
    """(index int64 [B], logp float32 [B]) for float32 logits [B, K]: the inverse-CDF draw for uniforms [B] in [0, 1), or the first maximum when uniforms is None. Non-finite logits raise ValueError."""

def check_out(
    out: typing.Any,
    dtype: typing.Any,
    shape: typing.Sequence[typing.SupportsInt],
    input: typing.Any,
    fn: str,
) -> typing.Any:
    """out, validated as every kernel validates its out= argument (writeable, C-contiguous, exact dtype and shape, not overlapping input); ValueError naming fn otherwise."""

def dense_forward(x: typing.Any, layers: typing.Any) -> numpy.typing.NDArray[numpy.float32]:
    """A stack of dense layers over a float32 batch x [B, in]: for each (weight [out, in], bias [out], activation None / 'tanh' / 'relu') of layers, x = activation(x @ weight.T + bias); returns the last x (float32 [B, out], a new array; x itself copied without layers)."""

def diag_gaussian_draw(
    inputs: typing.Any, noise: typing.Any = None, bound: typing.SupportsFloat = 20.0
) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
    """(actions float32 [B, d], logp float32 [B]) for float32 inputs [B, 2d] (means, then log-stds clamped to [-bound, bound]): mean + exp(log_std) * noise for standard-normal noise [B, d], or the mean when noise is None, and the diagonal Gaussian's log-density of the action."""

def gather_rows(leaves: list, index: typing.Any) -> list:
    """
    Rows leaf[index] of every leaf (bounds-checked), e.g. the initial state of each sequence.
    """

def get_num_threads() -> int: ...
def her_relabel(
    replay: typing.Any,
    strategy: typing.Any,
    achieved_offset: typing.Any,
    desired_offset: typing.Any,
    goal_size: typing.Any,
    indices: typing.Any,
    u: typing.Any,
    n_relabel: typing.Any,
    obs: typing.Any,
    next_obs: typing.Any,
) -> numpy.typing.NDArray[numpy.int64]:
    """
    Hindsight relabelling of a sampled batch of `replay` (n_step=1, flat observations): rows b < n_relabel get, at desired_offset, the achieved goal (at achieved_offset) of a step of their episode chosen by `strategy` ('future', 'final', 'episode') with the uniforms u, in obs and next_obs (written in place). Returns the goal steps' leaves (-1: row left alone).
    """

def image_crop(
    frames: typing.Any,
    top: typing.SupportsInt | typing.SupportsIndex,
    left: typing.SupportsInt | typing.SupportsIndex,
    height: typing.SupportsInt | typing.SupportsIndex,
    width: typing.SupportsInt | typing.SupportsIndex,
    out: typing.Any,
) -> None:
    """
    Copies a window of (B, H, W, C) frames into out.
    """

def image_generic_pixel(
    frames: typing.Any,
    dim: typing.SupportsInt | typing.SupportsIndex,
    grayscale: bool,
    zero_mean: bool,
    out: typing.Any,
) -> None:
    """
    RLlib GenericPixelPreprocessor maths (float32 out).
    """

def image_max_last_two(
    frames: typing.Any, axis: typing.SupportsInt | typing.SupportsIndex, out: typing.Any
) -> None:
    """
    Element-wise max of the last two entries along axis.
    """

def image_palette_resize(
    index: typing.Any,
    palette: typing.Any,
    height: typing.SupportsInt | typing.SupportsIndex,
    width: typing.SupportsInt | typing.SupportsIndex,
    gray: bool,
    out: typing.Any,
    max_with: typing.Any = None,
) -> None:
    """
    INTER_AREA resize (gray fused if gray) of (B, H, W) palette-index screens expanded through a (256, 3) uint8 RGB palette; max_with (same shape) is max-pooled in RGB first.
    """

def image_palette_unknown(index: typing.Any, known: typing.Any) -> bool:
    """
    Whether the uint8 index array holds an index i with known[i] == 0 (known: (256,) uint8).
    """

def image_resize(
    frames: typing.Any,
    height: typing.SupportsInt | typing.SupportsIndex,
    width: typing.SupportsInt | typing.SupportsIndex,
    gray: bool,
    out: typing.Any,
    max_with: typing.Any = None,
) -> None:
    """
    INTER_AREA resize of (B, H, W, C) frames into out; gray fuses RGB->gray (uint8 only); max_with (uint8, same shape) is max-pooled with the frames first.
    """

def image_rgb_to_gray(frames: typing.Any, out: typing.Any) -> None:
    """
    OpenCV fixed-point RGB->gray of (B, H, W, 3) uint8 frames into out (B, H, W, 1).
    """

def masked_categorical_draw(
    logits: typing.Any, mask: typing.Any, uniforms: typing.Any = None
) -> tuple[
    numpy.typing.NDArray[numpy.float32],
    numpy.typing.NDArray[numpy.int64],
    numpy.typing.NDArray[numpy.float32],
]:
    """(masked float32 [B, K], index int64 [B], logp float32 [B]) for float32 logits [B, K] and mask [B, K]: masked is the logits with FLOAT_MIN where mask <= 0; the draw is categorical_draw's on masked with every value <= -1e8 at FLOAT_MIN. ValueError (nothing drawn) for a mask row without an entry > 0, then a row with no value above -1e8, then non-finite logits."""

def mean_std_filter(
    running: RunningStat,
    buffer: RunningStat,
    x: typing.Any,
    update: bool,
    demean: bool,
    destd: bool,
    clip: typing.SupportsFloat | typing.SupportsIndex,
    out: typing.Any = None,
) -> numpy.typing.NDArray[numpy.float32]:
    """
    Push x (one observation or a batch) into running and buffer, then normalise it with the running stats; float32 output of x's shape.
    """

def pad_sequences(
    leaves: list,
    seq_lens: typing.Any,
    max_seq_len: typing.SupportsInt | typing.SupportsIndex,
    pad_last: bool,
    order: typing.Any = None,
) -> list:
    """
    Pads every leaf's rows into [len(seq_lens) * max_seq_len, ...] blocks (slot s holds sequence order[s]).
    """

def seq_lens_from_ids(
    episode_ids: typing.Any,
    agent_indices: typing.Any,
    unroll_ids: typing.Any,
    max_seq_len: typing.SupportsInt | typing.SupportsIndex,
) -> numpy.typing.NDArray[numpy.int32]:
    """
    int32 lengths of consecutive runs of equal (episode, agent, unroll) ids, split every max_seq_len rows.
    """

def set_num_threads(n: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Threads used by every batched kernel (the caller counts as one).
    """

def squashed_gaussian_grad(
    inputs: typing.Any,
    noise: typing.Any,
    d_action: typing.Any,
    coef: typing.SupportsFloat | typing.SupportsIndex,
    log_std_low: typing.SupportsFloat | typing.SupportsIndex,
    log_std_high: typing.SupportsFloat | typing.SupportsIndex,
) -> numpy.typing.NDArray[numpy.float32]:
    """float32 [B, 2d]: the gradient, with respect to inputs, of sum(d_action * action) + coef * sum(logp) for squashed_gaussian_sample's draw from the same inputs and noise."""

def squashed_gaussian_sample(
    inputs: typing.Any,
    noise: typing.Any,
    log_std_low: typing.SupportsFloat | typing.SupportsIndex,
    log_std_high: typing.SupportsFloat | typing.SupportsIndex,
) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
    """(action float32 [B, d], logp float32 [B]) of SAC's squashed Gaussian over [-1, 1]: inputs [B, 2d] (means, then log-stds clamped to [log_std_low, log_std_high]), noise [B, d] standard-normal draws."""

def tanh(x: typing.Any, out: typing.Any = None) -> numpy.typing.NDArray[numpy.float32]:
    """
    Elementwise tanh of a float32 array (AVX2 where available, about 1 ulp), into out (which may be x) or a new array.
    """
