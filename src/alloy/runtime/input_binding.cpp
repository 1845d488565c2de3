#include "alloy/runtime/input_binding.h"

#include <unordered_map>

namespace alloy {
namespace {

std::string sizes_str(const Tensor& t) {
  std::string out(dtype_name(t.dtype()));
  out += "[";
  for (int i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "]";
}

}  // namespace

Bindings bind_inputs(const Fusion& fusion, const std::vector<Tensor>& inputs) {
  const auto& declared = fusion.inputs();
  if (inputs.size() != declared.size()) {
    std::string names;
    for (Value* v : declared) names += (names.empty() ? "" : ", ") + v->name;
    user_error_at("fusion '" + fusion.name() + "'", "expected ", declared.size(), " inputs (", names, "), found ",
                  inputs.size());
  }
  Bindings bindings;
  std::unordered_map<std::string, std::string> bound_by;  // symbol -> "input 'x', axis 1"
  for (size_t i = 0; i < declared.size(); ++i) {
    const Value* decl = declared[i];
    const Tensor& t = inputs[i];
    std::string where = "input '" + decl->name + "'";
    if (!t.defined()) user_error_at(where, "no tensor given");
    if (decl->is_scalar()) {
      if (t.numel() != 1) user_error_at(where, "expected a scalar ", dtype_name(decl->dtype()), ", found ", sizes_str(t));
      continue;
    }
    if (t.dtype() != decl->dtype())
      user_error_at(where, "expected dtype ", dtype_name(decl->dtype()), " (declared ", decl->type_str(), "), found ",
                    dtype_name(t.dtype()));
    if (t.dim() != decl->rank())
      user_error_at(where, "expected ", decl->rank(), " dims (", decl->type_str(), "), found ", t.dim(), " dims ",
                    sizes_str(t));
    for (int axis = 0; axis < t.dim(); ++axis) {
      const Extent& e = decl->shape()[axis];
      int64_t found = t.size(axis);
      std::string place = where + ", axis " + std::to_string(axis);
      if (auto c = e.constant_value()) {
        if (*c != found) user_error_at(place, "expected size ", *c, " (declared ", decl->type_str(), "), found ", found);
        continue;
      }
      auto name = e.as_symbol();
      ALLOY_CHECK(name.has_value(), "declared extent ", e.str(), " is not a symbol");
      auto it = bindings.find(*name);
      if (it == bindings.end()) {
        bindings[*name] = found;
        bound_by[*name] = place;
      } else if (it->second != found) {
        user_error_at(place, "expected ", e.str(true), " = ", it->second, " (bound by ", bound_by[*name], "), found ", found);
      }
    }
  }
  fusion.complete_bindings(bindings);
  return bindings;
}

}  // namespace alloy
