#include "alloy/runtime/run_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <unordered_map>

#include "alloy/common/error.h"

namespace alloy {
namespace {

// Random inputs past this many bytes are surely a mistaken --bind (16 TiB).
constexpr int64_t kMaxDrawnBytes = int64_t(1) << 44;

std::string input_place(const Value* input, int axis) {
  return "input '" + input->name + "', axis " + std::to_string(axis);
}

// The symbol a request names: "B", or "x.1" for the size of axis 1 of input x.
std::string requested_symbol(const Fusion& fusion, const std::string& key, const std::string& where) {
  size_t dot = key.find('.');
  if (dot == std::string::npos) {
    std::vector<std::string> named;
    for (const std::string& s : fusion.input_symbols())
      if (s.empty() || s[0] != '?') named.push_back(s);
    if (std::find(named.begin(), named.end(), key) != named.end()) return key;
    std::string list;
    for (const std::string& s : named) list += (list.empty() ? "" : ", ") + s;
    user_error_at(where, "fusion '", fusion.name(), "' has no size named '", key, "'; ",
                  named.empty() ? std::string("it has no named sizes") : "its sizes are " + list);
  }
  std::string input_name = key.substr(0, dot), axis_text = key.substr(dot + 1);
  auto input = std::find_if(fusion.inputs().begin(), fusion.inputs().end(), [&](Value* v) { return v->name == input_name; });
  if (input == fusion.inputs().end()) user_error_at(where, "fusion '", fusion.name(), "' has no input named '", input_name, "'");
  int rank = (*input)->rank();
  bool numeric = !axis_text.empty() && axis_text.size() < 4 &&
                 std::all_of(axis_text.begin(), axis_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!numeric || std::stoi(axis_text) >= rank)
    user_error_at(where, "expected INPUT.AXIS with AXIS in 0..", rank - 1, " for input '", input_name, "' (declared ",
                  (*input)->type_str(), "), found '", key, "'");
  const Extent& extent = (*input)->shape()[std::stoi(axis_text)];
  auto symbol = extent.as_symbol();
  if (!symbol) user_error_at(where, "axis ", axis_text, " of input '", input_name, "' has the fixed size ", extent.str(true));
  return *symbol;
}

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 of the pair: nearby (seed, stream) pairs give unrelated generators
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string element_text(const void* data, DType dtype, int64_t element) {
  if (dtype == DType::boolean) return load_as_int(data, dtype, element) ? "true" : "false";
  if (is_integral(dtype)) return std::to_string(load_as_int(data, dtype, element));
  return number(load_as_double(data, dtype, element));
}

}  // namespace

Bindings resolve_input_sizes(const Fusion& fusion, const std::vector<Tensor>& given,
                             const std::vector<SizeRequest>& requested) {
  const auto& inputs = fusion.inputs();
  ALLOY_CHECK(given.size() == inputs.size(), "resolve_input_sizes: ", given.size(), " tensors for ", inputs.size(), " inputs");
  Bindings bindings;
  std::unordered_map<std::string, std::string> bound_by;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* decl = inputs[i];
    const Tensor& t = given[i];
    if (!t.defined() || decl->is_scalar()) continue;
    if (t.dim() != decl->rank())
      user_error_at("input '" + decl->name + "'", "expected ", decl->rank(), " dims (declared ", decl->type_str(),
                    "), found ", t.dim(), " dims ", tensor_type_str(t));
    for (int axis = 0; axis < t.dim(); ++axis) {
      auto symbol = decl->shape()[axis].as_symbol();
      if (symbol && !bindings.count(*symbol)) {
        bindings[*symbol] = t.size(axis);
        bound_by[*symbol] = input_place(decl, axis);
      }
    }
  }
  for (const auto& [key, value] : requested) {
    std::string where = "--bind " + key + "=" + std::to_string(value);
    std::string symbol = requested_symbol(fusion, key, where);
    if (value < 0) user_error_at(where, "expected a size of 0 or more, found ", value);
    if (value > kMaxTensorElements) user_error_at(where, "expected a size of at most 2^48 (", kMaxTensorElements, "), found ", value);
    auto it = bindings.find(symbol);
    if (it != bindings.end() && it->second != value)
      user_error_at(where, "contradicts ", bound_by[symbol], ", which has size ", it->second);
    bindings[symbol] = value;
    bound_by.emplace(symbol, where);
  }
  // Every size an input to draw needs must now be known; list all that are not.
  std::vector<std::string> missing_symbols, missing;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (given[i].defined()) continue;
    for (int axis = 0; axis < inputs[i]->rank(); ++axis) {
      const Extent& e = inputs[i]->shape()[axis];
      auto symbol = e.as_symbol();
      if (!symbol || bindings.count(*symbol)) continue;
      if (std::find(missing_symbols.begin(), missing_symbols.end(), *symbol) != missing_symbols.end()) continue;
      missing_symbols.push_back(*symbol);
      if (e.is_dynamic_symbol())
        missing.push_back(input_place(inputs[i], axis) + ", declared ? (--bind " + inputs[i]->name + "." +
                          std::to_string(axis) + "=N)");
      else
        missing.push_back(*symbol + " (" + input_place(inputs[i], axis) + ")");
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : "; ") + m;
    user_error_at("fusion '" + fusion.name() + "'", "sizes not bound: ", list,
                  ". Give each with --bind SYMBOL=N, or give an input that has it with --input NAME=FILE.npy");
  }
  return bindings;
}

Tensor random_tensor(DType dtype, const std::vector<int64_t>& sizes, uint64_t seed) {
  Tensor t = Tensor::empty(dtype, sizes);
  int64_t n = t.numel();
  if (n == 0) return t;
  std::mt19937_64 rng(seed);
  void* data = t.data();
  if (is_floating(dtype)) {
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t i = 0; i < n; ++i) store_double(data, dtype, i, normal(rng));
  } else if (is_integral(dtype)) {
    std::uniform_int_distribution<int64_t> digit(0, 9);
    for (int64_t i = 0; i < n; ++i) store_int(data, dtype, i, digit(rng));
  } else {
    for (int64_t i = 0; i < n; ++i) store_int(data, dtype, i, int64_t(rng() >> 63));
  }
  return t;
}

std::vector<Tensor> complete_inputs(const Fusion& fusion, std::vector<Tensor> given, const Bindings& bindings,
                                    uint64_t seed) {
  const auto& inputs = fusion.inputs();
  const int64_t memory = host_memory_bytes();
  int64_t drawn = 0;  // bytes of the random inputs so far
  ALLOY_CHECK(given.size() == inputs.size(), "complete_inputs: ", given.size(), " tensors for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (given[i].defined()) continue;
    const Value* decl = inputs[i];
    uint64_t input_seed = mix_seed(seed, i);
    if (decl->is_scalar()) {
      Tensor t = Tensor::empty(decl->dtype(), {});
      std::mt19937_64 rng(input_seed);
      if (is_floating(decl->dtype())) store_double(t.data(), decl->dtype(), 0, std::uniform_real_distribution<double>(0, 1)(rng));
      else store_int(t.data(), decl->dtype(), 0, int64_t(rng() % (decl->dtype() == DType::boolean ? 2 : 10)));
      given[i] = t;
      continue;
    }
    std::vector<int64_t> sizes;
    int64_t bytes = dtype_size(decl->dtype());
    for (const Extent& e : decl->shape()) {
      auto n = e.evaluate(bindings);
      // resolve_input_sizes bound every symbol: no value is a size past 2^62
      if (!n) user_error_at("input '" + decl->name + "'", "declared ", decl->type_str(), ", has an axis ", e.str(), " past 2^62 for the bound sizes");
      sizes.push_back(*n);
      if (__builtin_mul_overflow(bytes, *n, &bytes) || bytes > kMaxDrawnBytes)
        user_error_at("input '" + decl->name + "'", "declared ", decl->type_str(),
                      ", is too large to draw for the bound sizes (more than 2^44 bytes)");
    }
    drawn += bytes;
    if (memory > 0 && drawn > memory)
      user_error_at("input '" + decl->name + "'", "declared ", decl->type_str(), ", needs ", bytes, " bytes to draw for the bound sizes",
                    drawn > bytes ? " (" + std::to_string(drawn) + " with the inputs before it)" : std::string(), "; this machine has ", memory);
    given[i] = random_tensor(decl->dtype(), sizes, input_seed);
  }
  return given;
}

std::string summarize_tensor(const Tensor& tensor) {
  ALLOY_CHECK(tensor.device().kind == DeviceKind::cpu, "summarize_tensor of a ", tensor.device().str(), " tensor");
  int64_t n = tensor.numel();
  if (n == 0) return "empty";
  DType dtype = tensor.dtype();
  const void* data = tensor.data();
  int64_t nans = 0, infs = 0, finite = 0;
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  for_each_element(tensor, [&](int64_t, int64_t e) {
    double v = load_as_double(data, dtype, e);
    if (std::isnan(v)) ++nans;
    else if (std::isinf(v)) ++infs;
    else {
      ++finite;
      sum += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  });
  std::string out;
  if (dtype == DType::boolean) {
    out = "true=" + std::to_string(int64_t(sum)) + "/" + std::to_string(n);
  } else if (finite > 0) {
    double mean = sum / double(finite), squares = 0;
    for_each_element(tensor, [&](int64_t, int64_t e) {
      double v = load_as_double(data, dtype, e);
      if (std::isfinite(v)) squares += (v - mean) * (v - mean);
    });
    out = "mean=" + number(mean) + " std=" + number(std::sqrt(squares / double(finite)));
    if (is_integral(dtype)) out += " min=" + std::to_string(int64_t(lo)) + " max=" + std::to_string(int64_t(hi));
    else out += " min=" + number(lo) + " max=" + number(hi);
  }
  if (nans) out += std::string(out.empty() ? "" : " ") + "nan=" + std::to_string(nans);
  if (infs) out += std::string(out.empty() ? "" : " ") + "inf=" + std::to_string(infs);
  out += " first=[";
  int64_t shown = std::min<int64_t>(n, 4);
  int64_t k = 0;
  for_each_element(tensor, [&](int64_t, int64_t e) { out += (k++ ? ", " : "") + element_text(data, dtype, e); }, shown);
  return out + (n > shown ? ", ...]" : "]");
}

std::string tensor_type_str(const Tensor& tensor) {
  std::string out(dtype_name(tensor.dtype()));
  out += "[";
  for (int i = 0; i < tensor.dim(); ++i) out += (i ? ", " : "") + std::to_string(tensor.size(i));
  return out + "]";
}

}  // namespace alloy
