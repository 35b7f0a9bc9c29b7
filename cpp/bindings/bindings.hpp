// Each binding file registers one concept on the module; module.cpp calls them all.
#pragma once
#include <pybind11/pybind11.h>

namespace rlblocks::bindings {
void register_threads(pybind11::module_& m);
void register_activations(pybind11::module_& m);
void register_flatten(pybind11::module_& m);
void register_filters(pybind11::module_& m);
void register_frame_stack(pybind11::module_& m);
void register_image(pybind11::module_& m);
void register_sequences(pybind11::module_& m);
}  // namespace rlblocks::bindings
