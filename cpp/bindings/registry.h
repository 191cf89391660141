// Each bindings file registers itself with a static `Binder`, so adding a family of
// Python entry points never edits module.cc. module.cc runs every binder after Array,
// DataSource and the error translator exist (so binders may return/accept them).
#pragma once
#include <pybind11/pybind11.h>
#include <vector>

namespace podlet_bindings {
using BindFn = void (*)(pybind11::module_&);
std::vector<BindFn>& binders();  // defined in module.cc
struct Binder {
  explicit Binder(BindFn f) { binders().push_back(f); }
};
}  // namespace podlet_bindings
