// Seeded random fusions for the emulated kernels (emulated_kernels_test.cpp): small .fusion texts
// the CUDA segmenter turns into generated kernels, written by nobody — chains of pointwise ops
// (broadcasts of size-1 and leading axes, where, casts across f32/bf16/f16/i32/bool, literals),
// reductions over inner, outer and middle axes, normalizations, views at the inputs (permute,
// strided slice, expand, broadcast_in_dim, reshape), cat (of one-input pointwise chains too),
// odd and symbolic sizes. The same seed gives the same fusion, so a failing one is a seed and a
// text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "alloy/ir/extent.h"

namespace alloy::testing {

struct RandomFusion {
  std::string text;
  Bindings sizes;
  int sm_count = 4;  // shapes the column kernels' splits
};

class RandomFusionWriter {
 public:
  explicit RandomFusionWriter(uint64_t seed) : rng_(seed) {}

  RandomFusion write() {
    pick_shape();
    Val cur = input_of_shape(shape_, pick({"f32", "f32", "bf16", "f16"}), true);
    if (chance(0.15) && rank() >= 1) cur = cat_of(cur);
    cur = to_f32(cur);
    std::vector<Val> outputs;
    int steps = int(uniform(1, 5));
    for (int i = 0; i < steps; ++i) cur = pointwise_step(cur);
    if (chance(0.25)) outputs.push_back(maybe_cast_out(cur));
    switch (uniform(0, 5)) {
      case 0: outputs.push_back(maybe_cast_out(cur)); break;
      case 1: case 2: reductions(cur, outputs); break;
      case 3: softmax(cur, outputs); break;
      case 4: norm(cur, outputs); break;
      default: var_mean(cur, outputs); break;
    }
    std::ostringstream o;
    o << "fusion random(";
    for (size_t i = 0; i < params_.size(); ++i) o << (i ? ", " : "") << params_[i];
    o << ") {\n";
    for (const std::string& s : statements_) o << "  " << s << "\n";
    o << "  return ";
    for (size_t i = 0; i < outputs.size(); ++i) o << (i ? ", " : "") << outputs[i].name;
    o << "\n}\n";
    int sm_count = int(std::vector<int64_t>{1, 4, 16, 132}[uniform(0, 3)]);
    return {o.str(), sizes_, sm_count};
  }

 private:
  struct Dim {
    int64_t size;
    std::string symbol;  // empty: a literal size
  };
  struct Val {
    std::string name, dtype;
    std::vector<Dim> shape;
  };

  std::mt19937_64 rng_;
  std::vector<Dim> shape_;
  std::vector<std::string> params_, statements_;
  Bindings sizes_;
  int counter_ = 0;

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::string pick(std::initializer_list<const char*> options) { return *(options.begin() + uniform(0, int64_t(options.size()) - 1)); }
  int rank() const { return int(shape_.size()); }
  std::string fresh(const char* stem) { return stem + std::to_string(counter_++); }
  static bool concrete(const std::vector<Dim>& s) {
    return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d.symbol.empty(); });
  }
  static std::string dims_str(const std::vector<Dim>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + (s[i].symbol.empty() ? std::to_string(s[i].size) : s[i].symbol);
    return t + "]";
  }
  static std::string ints_str(const std::vector<int64_t>& v) {
    std::string t = "[";
    for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
    return t + "]";
  }
  std::string literal() { return pick({"0.5", "-1.25", "2.0", "0.0", "3", "1.0e-3"}); }

  Val emit(const std::string& dtype, const std::vector<Dim>& shape, const std::string& call) {
    Val v{fresh("v"), dtype, shape};
    statements_.push_back(v.name + " = " + call);
    return v;
  }
  Val param(const std::string& dtype, const std::vector<Dim>& shape) {
    Val v{fresh("p"), dtype, shape};
    params_.push_back(v.name + ": " + dtype + dims_str(shape));
    return v;
  }

  // Ranks 1 to 3, odd sizes, at most ~40k elements; a size may be a symbol.
  void pick_shape() {
    int r = int(uniform(1, 3));
    for (;;) {
      shape_.clear();
      int64_t total = 1;
      for (int i = 0; i < r; ++i) {
        int64_t s = uniform(0, 9) < 2 ? int64_t(std::vector<int64_t>{1003, 1030, 2049}[uniform(0, 2)])
                                      : std::vector<int64_t>{1, 3, 37, 130, 5, 64, 17, 33}[uniform(0, 7)];
        total *= s;
        shape_.push_back({s, ""});
      }
      if (total <= 40000 && total > 1) break;
    }
    if (chance(0.3)) {
      int k = int(uniform(0, r - 1));
      if (shape_[k].size != 1) {
        shape_[k].symbol = std::string(1, char('N' + k));
        sizes_[shape_[k].symbol] = shape_[k].size;
      }
    }
  }

  // An input seen as `shape`, through a view where `views` allows.
  Val input_of_shape(const std::vector<Dim>& shape, const std::string& dtype, bool views) {
    int64_t kind = views ? uniform(0, 9) : 0;
    int r = int(shape.size());
    if (kind == 1 && r >= 2) {  // permute
      std::vector<int64_t> p(r);
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), rng_);
      std::vector<Dim> declared(r);
      for (int i = 0; i < r; ++i) declared[p[i]] = shape[i];
      Val x = param(dtype, declared);
      return emit(dtype, shape, "permute(" + x.name + ", dims=" + ints_str(p) + ")");
    }
    if (kind == 2 && concrete(shape)) {  // slice with steps
      std::vector<int64_t> starts, ends, steps;
      std::vector<Dim> declared;
      for (const Dim& d : shape) {
        int64_t start = uniform(0, 2), step = uniform(1, 3), end = start + (d.size - 1) * step + 1;
        starts.push_back(start);
        ends.push_back(end);
        steps.push_back(step);
        declared.push_back({end + uniform(0, 2), ""});
      }
      Val x = param(dtype, declared);
      return emit(dtype, shape, "slice(" + x.name + ", starts=" + ints_str(starts) + ", ends=" + ints_str(ends) + ", steps=" + ints_str(steps) + ")");
    }
    if (kind == 3) {  // expand of size-1 axes and missing leading axes
      std::vector<Dim> declared;
      int lead = concrete(shape) ? int(uniform(0, r - 1)) : 0;  // a symbol must be declared
      for (int i = lead; i < r; ++i) declared.push_back(chance(0.5) && shape[i].symbol.empty() ? Dim{1, ""} : shape[i]);
      if (declared.empty()) declared.push_back({1, ""});
      Val x = param(dtype, declared);
      return emit(dtype, shape, "expand(" + x.name + ", shape=" + dims_str(shape) + ")");
    }
    if (kind == 4) {  // broadcast_in_dim of a subset of the axes
      std::vector<Dim> declared;
      std::vector<int64_t> kept;
      for (int i = 0; i < r; ++i)
        if (chance(0.5) || !shape[i].symbol.empty()) {
          declared.push_back(shape[i]);
          kept.push_back(i);
        }
      Val x = param(dtype, declared);
      return emit(dtype, shape, "broadcast_in_dim(" + x.name + ", shape=" + dims_str(shape) + ", broadcast_dims=" + ints_str(kept) + ")");
    }
    if (kind == 5 && concrete(shape) && r >= 1) {  // reshape from a flat or regrouped input
      int64_t total = 1;
      for (const Dim& d : shape) total *= d.size;
      std::vector<Dim> declared = {{total, ""}};
      if (r == 3 && chance(0.5)) declared = {{shape[0].size * shape[1].size, ""}, shape[2]};
      Val x = param(dtype, declared);
      return emit(dtype, shape, "reshape(" + x.name + ", shape=" + dims_str(shape) + ")");
    }
    return param(dtype, shape);
  }

  // An operand broadcast against the fusion's shape: trailing axes only, size-1 axes, or whole.
  Val broadcast_operand(const std::string& dtype) {
    std::vector<Dim> s;
    switch (uniform(0, 3)) {
      case 0:
        for (int i = int(uniform(1, rank() - 1 > 0 ? rank() - 1 : 1)); i < rank(); ++i) s.push_back(shape_[i]);
        if (s.empty()) s.push_back(shape_.back());
        break;
      case 1:
        for (const Dim& d : shape_) s.push_back(chance(0.5) ? Dim{1, ""} : d);
        break;
      case 2:
        return input_of_shape(shape_, dtype, true);
      default:
        s = shape_;
    }
    return param(dtype, s);
  }

  Val to_f32(const Val& v) { return v.dtype == "f32" ? v : emit("f32", v.shape, "cast(" + v.name + ", dtype=f32)"); }

  Val maybe_cast_out(const Val& v) {
    if (!chance(0.3)) return v;
    std::string d = pick({"bf16", "f16"});  // not i32: a sum that is 38 - 1e-6 one way and 38 the other truncates apart
    return emit(d, v.shape, "cast(" + v.name + ", dtype=" + d + ")");
  }

  // cat(x, y) along an axis of the fusion's shape: y differs in size there; the result is the
  // fusion's shape from then on.
  Val cat_of(const Val& x) {
    int k = int(uniform(0, rank() - 1));
    if (!shape_[k].symbol.empty()) return x;
    std::vector<Dim> other = shape_;
    other[k].size = std::vector<int64_t>{1, 3, 37}[uniform(0, 2)];
    Val y = param(x.dtype, other);
    Val a = chance(0.4) ? chain_of(x) : x, b = chance(0.3) ? chain_of(y) : y;
    shape_[k].size += other[k].size;
    return emit(x.dtype, shape_, "cat(" + a.name + ", " + b.name + ", dim=" + std::to_string(k) + ")");
  }

  // x through one-input pointwise ops of its dtype (a kernel folds them into the cat's load)
  Val chain_of(const Val& x) {
    switch (uniform(0, 3)) {
      case 0: return emit(x.dtype, x.shape, "neg(" + x.name + ")");
      case 1: return emit(x.dtype, x.shape, "mul(" + x.name + ", " + literal() + ")");
      case 2: {
        Val h = emit(x.dtype, x.shape, "mul(" + x.name + ", 0.25)");
        return emit(x.dtype, x.shape, "exp(" + h.name + ")");
      }
      default: {
        Val f = emit("f32", x.shape, "cast(" + x.name + ", dtype=f32)");
        Val t = emit("f32", x.shape, "tanh(" + f.name + ")");
        return emit(x.dtype, x.shape, "cast(" + t.name + ", dtype=" + x.dtype + ")");
      }
    }
  }

  Val pointwise_step(const Val& x) {
    auto call = [&](const std::string& op, const std::string& args) { return emit("f32", shape_, op + "(" + args + ")"); };
    switch (uniform(0, 9)) {
      case 0: {
        std::string op = pick({"neg", "abs", "tanh", "sigmoid", "relu", "silu", "erf", "exp"});
        if (op == "exp") return call("exp", call("tanh", x.name).name);
        return call(op, x.name);
      }
      case 1: {
        Val a = call("abs", x.name);
        Val b = call("add", a.name + ", 1.0");
        return call(pick({"log", "sqrt", "rsqrt", "reciprocal"}), b.name);
      }
      case 2: return emit("f32", shape_, "gelu(" + x.name + ", approximate=\"" + pick({"none", "tanh"}) + "\")");
      case 3: case 4: {  // binary with a broadcast operand (of any float dtype) or a literal
        std::string op = pick({"add", "sub", "mul", "maximum", "minimum"});
        if (chance(0.3)) return call(op, chance(0.5) ? x.name + ", " + literal() : literal() + ", " + x.name);
        Val y = to_f32(broadcast_operand(pick({"f32", "bf16", "f16"})));
        return call(op, chance(0.5) ? x.name + ", " + y.name : y.name + ", " + x.name);
      }
      case 5: {  // where on a comparison
        std::string cmp = pick({"gt", "lt", "ge", "le", "eq", "ne"});
        Val c = emit("bool", shape_, cmp + "(" + x.name + ", " + pick({"0.0", "0.5", "-0.25"}) + ")");
        Val y = to_f32(broadcast_operand("f32"));
        return call("where", c.name + ", " + x.name + ", " + (chance(0.5) ? y.name : literal()));
      }
      case 6: {  // a bool input as the condition
        Val c = broadcast_operand("bool");
        return call("where", c.name + ", " + (chance(0.5) ? x.name + ", " + literal() : literal() + ", " + x.name));
      }
      case 7: {  // integers: an i32 input, or truncation through i32
        if (chance(0.5)) {
          Val i = broadcast_operand("i32");
          Val j = emit("i32", i.shape, pick({"mul", "add", "sub"}) + "(" + i.name + ", " + pick({"3", "-2", "7"}) + ")");
          return call("add", x.name + ", " + to_f32(j).name);
        }
        Val s = call("mul", x.name + ", 4.0");
        Val i = emit("i32", shape_, "cast(" + s.name + ", dtype=i32)");
        return to_f32(i);
      }
      case 8: {  // a round trip through a half type, maybe computing there
        std::string d = pick({"bf16", "f16"});
        Val h = emit(d, shape_, "cast(" + x.name + ", dtype=" + d + ")");
        if (chance(0.5)) h = emit(d, shape_, pick({"add", "mul"}) + "(" + h.name + ", " + to_f32(broadcast_operand(d)).name + ")");
        return to_f32(h);
      }
      default: {  // bool arithmetic: a comparison summed with the value
        Val c = emit("bool", shape_, pick({"gt", "le"}) + "(" + x.name + ", 0.0)");
        return call("add", x.name + ", " + to_f32(c).name);
      }
    }
  }

  std::vector<int64_t> random_dims() {
    std::vector<int64_t> dims;
    for (int i = 0; i < rank(); ++i)
      if (chance(0.4)) dims.push_back(i);
    if (dims.empty()) dims.push_back(uniform(0, rank() - 1));
    return dims;
  }
  std::vector<Dim> reduced_shape(const std::vector<int64_t>& dims, bool keepdim) const {
    std::vector<Dim> s;
    for (int i = 0; i < rank(); ++i) {
      bool r = std::find(dims.begin(), dims.end(), i) != dims.end();
      if (!r) s.push_back(shape_[i]);
      else if (keepdim) s.push_back({1, ""});
    }
    return s;
  }

  void reductions(const Val& x, std::vector<Val>& outputs) {
    int count = int(uniform(1, 3));
    std::vector<int64_t> dims = random_dims();
    for (int i = 0; i < count; ++i) {
      if (i > 0 && chance(0.5)) dims = random_dims();
      bool keepdim = chance(0.4);
      std::string op = pick({"sum", "max", "min", "mean"});
      Val r = emit("f32", reduced_shape(dims, keepdim),
                   op + "(" + x.name + ", dims=" + ints_str(dims) + ", keepdim=" + (keepdim ? "true" : "false") + ")");
      if (keepdim && chance(0.5)) {
        outputs.push_back(emit("f32", shape_, "sub(" + x.name + ", " + r.name + ")"));
      } else if (!keepdim && chance(0.3)) {  // broadcast back over the reduced axes
        std::vector<int64_t> kept;
        for (int64_t d = 0; d < rank(); ++d)
          if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(d);
        Val b = emit("f32", shape_, "broadcast_in_dim(" + r.name + ", shape=" + dims_str(shape_) + ", broadcast_dims=" + ints_str(kept) + ")");
        outputs.push_back(emit("f32", shape_, "mul(" + x.name + ", " + b.name + ")"));
      } else {
        outputs.push_back(maybe_cast_out(r));
      }
    }
    if (chance(0.2)) {  // a count of a comparison
      Val c = emit("bool", shape_, "gt(" + x.name + ", 0.0)");
      outputs.push_back(emit("i64", reduced_shape(dims, false), "sum(" + c.name + ", dims=" + ints_str(dims) + ")"));
    }
  }

  void softmax(const Val& x, std::vector<Val>& outputs) {
    Val s = emit("f32", shape_, "softmax(" + x.name + ", dim=" + std::to_string(uniform(0, rank() - 1)) + ")");
    if (chance(0.3)) s = pointwise_step(s);
    if (chance(0.3)) return reductions(s, outputs);
    outputs.push_back(maybe_cast_out(s));
  }

  void norm(const Val& x, std::vector<Val>& outputs) {
    int k = int(uniform(1, std::min(2, rank())));
    std::vector<Dim> inner(shape_.end() - k, shape_.end());
    Val w = param(pick({"f32", "bf16"}), inner);
    std::string eps = ", normalized_ndim=" + std::to_string(k) + ", eps=1e-5)";
    if (chance(0.5)) {
      Val b = param(w.dtype, inner);
      outputs.push_back(maybe_cast_out(emit("f32", shape_, "layer_norm(" + x.name + ", " + w.name + ", " + b.name + eps)));
    } else {
      outputs.push_back(maybe_cast_out(emit("f32", shape_, "rms_norm(" + x.name + ", " + w.name + eps)));
    }
  }

  void var_mean(const Val& x, std::vector<Val>& outputs) {
    std::vector<int64_t> dims = random_dims();
    bool keepdim = chance(0.3);
    std::vector<Dim> s = reduced_shape(dims, keepdim);
    std::string v = fresh("v"), m = fresh("v");
    statements_.push_back(v + ", " + m + " = var_mean(" + x.name + ", dims=" + ints_str(dims) + ", correction=" + pick({"0", "1"}) +
                          ", keepdim=" + (keepdim ? "true" : "false") + ")");
    outputs.push_back({v, "f32", s});
    outputs.push_back({m, "f32", s});
  }
};

}  // namespace alloy::testing
