#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "rlblocks native kernels (batched, GIL released, threaded).";
  rlblocks::bindings::register_threads(m);
  rlblocks::bindings::register_activations(m);
  rlblocks::bindings::register_categorical(m);
  rlblocks::bindings::register_diag_gaussian(m);
  rlblocks::bindings::register_dense(m);
  rlblocks::bindings::register_flatten(m);
  rlblocks::bindings::register_filters(m);
  rlblocks::bindings::register_frame_stack(m);
  rlblocks::bindings::register_image(m);
  rlblocks::bindings::register_sequences(m);
  rlblocks::bindings::register_replay(m);
  rlblocks::bindings::register_her(m);
  rlblocks::bindings::register_squashed_gaussian(m);
}
