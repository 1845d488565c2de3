#include "alloy/runtime/input_binding.h"

#include "alloy/ir/op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>


namespace alloy {
namespace {

std::string sizes_str(const Tensor& t) {
  std::string out(dtype_name(t.dtype()));
  out += "[";
  for (int i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "]";
}

// An i64 scalar input whose value int32 cannot hold, read by an op with an i32 tensor operand (and
// none of a wider or floating dtype): it meets that tensor as an i32 (a wrapped scalar in
// PyTorch's promotion) and would wrap, so it is refused there, as such a literal is at definition.
void check_scalar_meets_no_i32(const Fusion& fusion, const Value* scalar, int64_t value, const std::string& where) {
  for (const auto& op : fusion.ops()) {
    const OpClass kind = op_row(op->kind).op_class;
    if (kind != OpClass::binary && kind != OpClass::pointwise) continue;
    if (std::find(op->inputs.begin(), op->inputs.end(), scalar) == op->inputs.end()) continue;
    bool meets_i32 = false, wider = false;
    for (const Value* in : op->inputs) {
      if (!in || in == scalar || in->is_scalar() || in->literal) continue;
      if (in->dtype() == DType::i32) meets_i32 = true;
      else if (in->dtype() != DType::boolean) wider = true;
    }
    if (meets_i32 && !wider)
      user_error_at(where, "the value ", value, " does not fit i32, the dtype of the tensor it meets in ", op_name(op->kind), " at ",
                    op->loc.str(), " (expected ", std::numeric_limits<int32_t>::min(), " to ", std::numeric_limits<int32_t>::max(),
                    "; a wider value needs an i64 tensor there)");
  }
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
  // Error messages are built only on failure: this runs on every cached run.
  auto where = [&](size_t i) { return "input '" + declared[i]->name + "'"; };
  auto place = [&](size_t i, int axis) { return where(i) + ", axis " + std::to_string(axis); };
  auto bound_by = [&](const std::string& symbol) {
    for (size_t i = 0; i < declared.size(); ++i)
      for (int axis = 0; axis < declared[i]->rank(); ++axis)
        if (declared[i]->shape()[axis].as_symbol() == symbol) return place(i, axis);
    return std::string("?");
  };
  for (size_t i = 0; i < declared.size(); ++i) {
    const Value* decl = declared[i];
    const Tensor& t = inputs[i];
    if (!t.defined()) user_error_at(where(i), "no tensor given");
    if (decl->is_scalar()) {
      // one element with no axes: a [1] would carry its axis into the ops that read the scalar
      if (t.numel() != 1 || t.dim() != 0)
        user_error_at(where(i), "expected a scalar ", dtype_name(decl->dtype()), " (a number, or a tensor of 0 dims), found ", sizes_str(t));
      if (decl->dtype() == DType::i64 && t.dtype() == DType::i64 && t.device().kind == DeviceKind::cpu) {
        const int64_t value = load_as_int(t.data(), t.dtype(), 0);
        if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
          check_scalar_meets_no_i32(fusion, decl, value, where(i));
      }
      continue;
    }
    if (t.dtype() != decl->dtype())
      user_error_at(where(i), "expected dtype ", dtype_name(decl->dtype()), " (declared ", decl->type_str(), "), found ",
                    dtype_name(t.dtype()));
    if (t.dim() != decl->rank())
      user_error_at(where(i), "expected ", decl->rank(), " dims (", decl->type_str(), "), found ", t.dim(), " dims ",
                    sizes_str(t));
    for (int axis = 0; axis < t.dim(); ++axis) {
      const Extent& e = decl->shape()[axis];
      int64_t found = t.size(axis);
      if (auto c = e.constant_value()) {
        if (*c != found) user_error_at(place(i, axis), "expected size ", *c, " (declared ", decl->type_str(), "), found ", found);
        continue;
      }
      const std::string& name = e.powers().begin()->first;  // a declared size is one symbol
      // a device's part of a sharded input is the symbol times a fraction (T/2): bind T
      int64_t num = e.numerator(), den = e.denominator();
      if (num != 1 || den != 1) {
        if ((found * den) % num != 0)
          user_error_at(place(i, axis), "expected a size ", e.str(true), " for a whole ", name, ", found ", found);
        found = found * den / num;
      }
      auto [it, inserted] = bindings.try_emplace(name, found);
      if (!inserted && it->second != found)
        user_error_at(place(i, axis), "expected ", e.str(true), " = ", it->second, " (bound by ", bound_by(name), "), found ", found);
    }
  }
  fusion.complete_bindings(bindings);
  return bindings;
}

void check_run_sizes(const Fusion& fusion, const Bindings& bindings, int64_t memory_bytes, const std::string& device,
                     bool in_doubles) {
  // The CPU reference holds every value of a run until the run ends, each element as a double:
  // what they take together must fit too (each alone fitting is not enough).
  int64_t together = 0;
  for (auto& v : fusion.values()) {
    if (v->is_scalar()) continue;
    auto where = [&] { return v->producer && v->producer->loc.known() ? v->producer->loc.str() : "value '" + v->name + "'"; };
    std::vector<int64_t> sizes;
    double approximate = 1;  // the size as a double, to tell a size too large from one not whole
    bool bound = true;
    for (size_t axis = 0; axis < v->shape().size(); ++axis) {
      const Extent& e = v->shape()[axis];
      double d = double(e.numerator()) / double(e.denominator());
      bool axis_bound = true;
      std::string symbols;  // "N = 6, S = 4"
      for (auto& [name, p] : e.powers()) {
        auto it = bindings.find(name);
        if (it == bindings.end()) {
          axis_bound = false;
        } else {
          d *= std::pow(double(it->second), p);
          symbols += (symbols.empty() ? "" : ", ") + name + " = " + std::to_string(it->second);
        }
      }
      bound = bound && axis_bound;
      approximate *= d;
      auto n = e.evaluate(bindings);
      // a derived size such as reshape's N/4 must come out whole (a size too large is told below)
      if (axis_bound && !n && std::fabs(d) < 0x1p61 && d != std::floor(d))
        user_error_at(where(), v->producer ? std::string(op_name(v->producer->kind)) + "'s result " : std::string(), "'", v->name, "' (",
                      v->type_str(), ") has axis ", axis, " of size ", e.str(true), " = ", d,
                      " for the bound sizes (", symbols, "), not a whole number");
      sizes.push_back(n.value_or(0));
    }
    if (!bound) continue;  // reported where the sizes are evaluated
    auto count = checked_elements(sizes);
    if (!count || approximate > double(kMaxTensorElements))
      user_error_at(where(), "'", v->name, "' (", v->type_str(), ") has about ", approximate, " elements for the bound sizes; a tensor has at most 2^48");
    // A view shares its input's memory, unless every element is loaded as a double anyway.
    bool view = v->producer && is_view(v->producer->kind);
    int64_t bytes = *count * (in_doubles ? std::max<int64_t>(8, dtype_size(v->dtype())) : dtype_size(v->dtype()));
    if (memory_bytes > 0 && bytes > memory_bytes && (in_doubles || !view))
      user_error_at(where(), "'", v->name, "' (", v->type_str(), ") needs ", bytes, " bytes for the bound sizes",
                    in_doubles ? " (the CPU reference holds each element as a double)" : "", "; ", device, " has ", memory_bytes);
    if (in_doubles) together += bytes;  // (each within the memory, checked above: no overflow)
  }
  if (in_doubles && memory_bytes > 0 && together > memory_bytes)
    user_error_at("fusion '" + fusion.name() + "'", "its values need ", together, " bytes together for the bound sizes (the CPU "
                  "reference holds every value of a run, each element as a double); ", device, " has ", memory_bytes);
}

}  // namespace alloy
