#include "alloy/segment/schedulers/matmul_epilogue.h"

#include <cstdlib>

#include <algorithm>
#include <map>

#include "alloy/common/settings.h"
#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }

// ALLOY_DISABLE_EPILOGUES="bgrad_a,dgelu_bgrad" turns those kinds off (read at each segmentation).
// A disabled bias-gradient kind leaves its sum to a generated kernel and keeps the rest of the
// match (dgelu_bgrad becomes dgelu); any other disabled kind leaves the GEMM plain.
// Unset, the bias-gradient kinds are off: on an H100 the column-reduction kernel beside a plain or
// dGELU GEMM beat cuBLASLt's BGRAD epilogues (bench/results/*-notes.md). Set to "" for all kinds.
// (The default is the setting's: "dgelu_bgrad,drelu_bgrad,bgrad_a,bgrad_b", common/settings.cpp.)
bool epilogue_disabled(EpilogueKind kind) {
  std::string list = "," + settings::text("ALLOY_DISABLE_EPILOGUES") + ",";
  return list.find("," + std::string(epilogue_kind_name(kind)) + ",") != std::string::npos;
}
std::string dt(DType t) { return std::string(dtype_name(t)); }
std::string dt(const Value* v) { return dt(v->dtype()); }

// Who reads each value (each reader once), the fusion's outputs, and the ops' positions.
struct UseMap {
  std::map<const Value*, std::vector<const Op*>> readers;
  std::set<const Value*> outputs;
  std::map<const Op*, size_t> position;

  explicit UseMap(const Fusion& fusion) {
    for (size_t i = 0; i < fusion.ops().size(); ++i) {
      const Op* op = fusion.ops()[i].get();
      position[op] = i;
      for (Value* in : op->inputs) {
        auto& r = readers[in];
        if (std::find(r.begin(), r.end(), op) == r.end()) r.push_back(op);
      }
    }
    outputs.insert(fusion.outputs().begin(), fusion.outputs().end());
  }

  const std::vector<const Op*>& of(const Value* v) const {
    static const std::vector<const Op*> none;
    auto it = readers.find(v);
    return it == readers.end() ? none : it->second;
  }
  // v is read by `op` alone and is not returned.
  bool only_reader(const Value* v, const Op* op) const {
    return !outputs.count(v) && of(v).size() == 1 && of(v)[0] == op;
  }
};

bool depends_on(const Value* v, const Value* target) {
  std::vector<const Value*> stack{v};
  std::set<const Value*> seen;
  while (!stack.empty()) {
    const Value* x = stack.back();
    stack.pop_back();
    if (x == target) return true;
    if (!seen.insert(x).second || !x->producer) continue;
    for (Value* in : x->producer->inputs) stack.push_back(in);
  }
  return false;
}

// For each axis of v: whether its values can change along it (false where v has extent 1 or is
// a broadcast made by broadcast_in_dim / expand / unsqueeze).
std::vector<bool> varying_axes(const Value* v) {
  const Op* p = v->producer;
  std::vector<bool> out(v->rank(), false);
  if (p && p->kind == OpKind::broadcast_in_dim) {
    std::vector<bool> in = varying_axes(p->inputs[0]);
    std::vector<int64_t> dims = p->ints_attr("broadcast_dims");
    for (size_t i = 0; i < dims.size(); ++i) out[dims[i]] = in[i];
    return out;
  }
  if (p && p->kind == OpKind::expand) {
    const Value* x = p->inputs[0];
    std::vector<bool> in = varying_axes(x);
    int offset = v->rank() - x->rank();
    for (int i = 0; i < x->rank(); ++i) out[offset + i] = in[i];
    return out;
  }
  if (p && p->kind == OpKind::unsqueeze) {
    std::vector<bool> in = varying_axes(p->inputs[0]);
    int64_t dim = p->int_attr("dim");
    in.insert(in.begin() + (dim < 0 ? dim + v->rank() : dim), false);
    return in;
  }
  for (int i = 0; i < v->rank(); ++i) out[i] = !v->shape()[i].is_one();
  return out;
}

// Why v, added to `product`-shaped values, is not a bias over the output features ("" when it is).
std::string why_not_feature_vector(const Value* v, const Value* product) {
  std::vector<bool> varies = varying_axes(v);
  int last = product->rank() - 1, offset = product->rank() - v->rank();
  bool along_features = false, along_others = false;
  for (int i = 0; i < v->rank(); ++i) {
    if (!varies[i]) continue;
    (offset + i == last ? along_features : along_others) = true;
  }
  if (along_features && along_others) return "add of a full tensor (" + v->name + ": " + v->type_str() + ") is not a bias";
  if (along_others) return "add of " + v->name + " (" + v->type_str() + "), which varies along the rows, is not a bias";
  if (!along_features) return "add of " + v->name + " (" + v->type_str() + "), constant over the output features, is not a bias vector";
  return "";
}

// cuBLASLt's GELU (and dGELU) may use an approximate tanh: good to 16-bit rounding, not to f32's
// (the cuBLASLt tests need 10x the f32 tolerance), so f32 results keep GELU in a generated kernel.
std::string why_not_gelu_for(DType result) {
  if (result != DType::f32) return "";
  return "f32 result: cuBLASLt's GELU may use an approximate tanh, coarser than f32 rounding";
}

// cuBLASLt's ReLU bit mask has its rows aux_ld bits apart, aux_ld a multiple of 128
// (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); relu_mask's rows are ceil(N / 32) words apart. They agree
// when N, the output features, is a multiple of 128 (then no bits pad a row either); a symbol is
// taken when its coefficient is (128 * K), checked again when the GEMM runs.
std::string why_not_mask_rows(const Value* product) {
  const Extent& n = product->shape().back();
  if ((n / Extent::constant(128)).denominator() == 1) return "";
  return "cuBLASLt's ReLU bit mask needs " + n.str(true) + " output features to be a multiple of 128 (its rows are a " +
         "multiple of 128 bits apart; relu_mask's rows are packed)";
}

bool is_transpose(const Op* op) {
  return op && op->kind == OpKind::permute && op->inputs[0]->rank() == 2 && op->ints_attr("dims") == std::vector<int64_t>{1, 0};
}

// What a taken op does in the epilogue.
enum class Role { widen, narrow, identity_cast, bias, activation, dgelu, drelu };

struct Step {
  Step(const Op* op, Role role, Value* aux = nullptr) : op(op), role(role), aux(aux) {}
  const Op* op;
  Role role;
  Value* aux = nullptr;               // Role::activation (pre-activation or relu mask written), dgelu, drelu
  const Op* mask_op = nullptr;        // Role::activation of relu: the relu_mask(pre) the GEMM writes
  std::vector<const Op*> bias_views;  // Role::bias: broadcasts of the bias taken with the add
  Value* bias = nullptr;              // Role::bias: the vector read
};

class Matcher {
 public:
  Matcher(const Fusion& fusion, const Op& matmul, const std::set<const Op*>& taken)
      : uses_(fusion), mm_(matmul), taken_(taken) {
    m_.matmul = &matmul;
    m_.product = matmul.outputs[0];
  }

  EpilogueMatch run() {
    if (gemm_takes_epilogue()) {
      follow_chain();
      trim_wide_result();
      if (steps_.empty() && !linear_bias_) take_operand_bias_gradient();
    }
    take_operand_views();
    finish();
    return std::move(m_);
  }

 private:
  using Rule = std::string (Matcher::*)(const Op&, Value*);  // "" when the op is taken

  // The ops an epilogue can take, by kind; every other pointwise op is refused by name.
  static const std::map<OpKind, Rule>& rules() {
    static const std::map<OpKind, Rule> table = {
        {OpKind::cast, &Matcher::take_cast},
        {OpKind::add, &Matcher::take_bias_add},
        {OpKind::relu, &Matcher::take_activation},
        {OpKind::gelu, &Matcher::take_activation},
        {OpKind::gelu_backward, &Matcher::take_gelu_backward},
        {OpKind::relu_backward, &Matcher::refuse_relu_backward},
        {OpKind::relu_backward_mask, &Matcher::take_relu_backward_mask},
    };
    return table;
  }

  DType product_dtype() const { return m_.product->dtype(); }
  void refuse(const Op* op, std::string why) { m_.not_taken.push_back({op, std::move(why)}); }
  bool has_rule(const Op* op) const { return rules().count(op->kind) || is_pointwise(op->kind); }

  // Only one GEMM with a 2-D right operand has an output-feature axis for the epilogue.
  bool gemm_takes_epilogue() {
    const Value *a = mm_.inputs[0], *b = mm_.inputs[1];
    bool any_candidate = false;
    for (const Op* r : uses_.of(m_.product)) any_candidate = any_candidate || has_rule(r);
    if (b->rank() != 2) {
      if (any_candidate)
        refuse(&mm_, mm_.kind == OpKind::linear ? "linear with a 1-D weight has no output-feature axis for an epilogue"
                                                : "batched or vector right operand (" + b->type_str() +
                                                      "): epilogues are taken for a single GEMM with a 2-D right operand");
      return false;
    }
    if (mm_.kind == OpKind::linear && mm_.inputs.size() == 3) {
      Value* bias = mm_.inputs[2];
      if (bias->rank() != 1 || !(bias->shape()[0] == b->shape()[0])) {
        refuse(&mm_, "linear's bias " + bias->type_str() + " is broadcast over the output features: not a cuBLASLt bias vector");
        return false;
      }
      linear_bias_ = bias;
    }
    gemm_2d_ = a->rank() == 2;
    return true;
  }

  void follow_chain() {
    Value* cur = m_.product;
    while (!ended_) {
      const Op* next = next_op(cur);
      if (!next) return;
      auto rule = rules().find(next->kind);
      std::string why = rule != rules().end() ? (this->*rule->second)(*next, cur)
                                              : std::string(op_name(next->kind)) + " has no cuBLASLt epilogue";
      if (!why.empty()) return refuse(next, std::move(why));
      cur = next->outputs[0];
    }
  }

  // The op that reads `cur` next in the epilogue, or nullptr. A value read by several ops (or
  // returned) can only continue into an activation, which then saves it as the aux output.
  const Op* next_op(const Value* cur) {
    const auto& readers = uses_.of(cur);
    shared_ = readers.size() != 1 || uses_.outputs.count(cur);
    if (!shared_) {
      const Op* next = readers[0];
      return taken_.count(next) || !has_rule(next) ? nullptr : next;
    }
    for (const Op* r : readers)
      if ((r->kind == OpKind::gelu || r->kind == OpKind::relu) && !taken_.count(r)) return r;
    for (const Op* r : readers)
      if (!taken_.count(r) && has_rule(r)) {
        refuse(r, cur->name + " is also used outside the GEMM, which writes only its result");
        break;
      }
    return nullptr;
  }

  std::string push(Step step) {
    steps_.push_back(std::move(step));
    return "";
  }

  std::string take_cast(const Op& op, Value* cur) {
    DType from = cur->dtype(), to = op.outputs[0]->dtype();
    if (from == to) return push(Step(&op, Role::identity_cast));
    if (is_16bit(from) && to == DType::f32 && !widened_) {
      widened_ = true;
      return push(Step(&op, Role::widen));
    }
    if (from == DType::f32 && widened_ && to == product_dtype()) {
      ended_ = true;  // the output cast ends the epilogue
      return push(Step(&op, Role::narrow));
    }
    return "cast to " + dt(to) + ": cuBLASLt writes the product's dtype (" + dt(product_dtype()) + ")" +
           (is_16bit(product_dtype()) ? ", or f32 between a widening cast and a cast back" : "");
  }

  std::string take_bias_add(const Op& op, Value* cur) {
    if (linear_bias_ || has_bias_) return "a second bias add: cuBLASLt adds one bias vector";
    if (activated_) return "add after the activation: cuBLASLt adds the bias before it";
    if (op.inputs[0] == cur && op.inputs[1] == cur) return "add of " + cur->name + " to itself is not a bias";
    Value* v = op.inputs[op.inputs[0] == cur ? 1 : 0];
    if (v->is_scalar()) return "add of a scalar is not a bias vector";
    if (!(op.outputs[0]->shape() == cur->shape()))
      return "add broadcasts the product to " + op.outputs[0]->type_str() + ": not a bias";
    if (std::string why = why_not_feature_vector(v, cur); !why.empty()) return why;
    if (v->dtype() != product_dtype() && v->dtype() != DType::f32)
      return "the bias " + v->name + " is " + dt(v) + ": cuBLASLt takes a bias of the result's dtype (" + dt(product_dtype()) +
             ") or f32";
    if (depends_on(v, m_.product)) return "the bias " + v->name + " is computed from the product";
    Step step(&op, Role::bias);
    // Broadcasts that only bring the bias here join the segment; the GEMM reads the vector itself.
    Value* root = v;
    const Op* reader = &op;
    auto is_bias_view = [](OpKind k) { return k == OpKind::broadcast_in_dim || k == OpKind::expand || k == OpKind::unsqueeze; };
    while (root->producer && is_bias_view(root->producer->kind) && !taken_.count(root->producer) &&
           uses_.only_reader(root, reader)) {
      reader = root->producer;
      step.bias_views.push_back(reader);
      root = reader->inputs[0];
    }
    step.bias = root;
    has_bias_ = true;
    if (is_16bit(cur->dtype()) && op.outputs[0]->dtype() == DType::f32) widened_ = true;
    return push(std::move(step));
  }

  std::string take_activation(const Op& op, Value* cur) {
    if (activated_) return "a second activation: cuBLASLt applies one";
    bool gelu = op.kind == OpKind::gelu;
    if (gelu && op.string_attr("approximate") != "tanh")
      return "gelu approximate=\"" + op.string_attr("approximate") + "\": cuBLASLt's GELU is the tanh approximation";
    if (std::string why = gelu ? why_not_gelu_for(product_dtype()) : ""; !why.empty()) return why;
    Step step(&op, Role::activation);
    if (shared_ && !gelu) {
      const Op* mask = relu_mask_reader(cur, op);
      if (!mask)
        return "relu: " + cur->name + " is also used outside the GEMM, and cuBLASLt's relu_aux saves a bit mask, not " +
               cur->name + " (a GEMM writes relu_mask(" + cur->name + ") when only it and relu read " + cur->name + ")";
      if (std::string why = why_not_mask_rows(m_.product); !why.empty()) return "relu with relu_mask(" + cur->name + "): " + why;
      EpilogueKind kind = has_bias_ || linear_bias_ ? EpilogueKind::relu_aux_bias : EpilogueKind::relu_aux;
      if (epilogue_disabled(kind))  // refused here, so the GEMM keeps the bias
        return "relu with relu_mask(" + cur->name + "): " + std::string(epilogue_kind_name(kind)) +
               " is off (ALLOY_DISABLE_EPILOGUES): the mask runs as a bitmask kernel";
      step.mask_op = mask;
      step.aux = mask->outputs[0];
    } else if (shared_) {
      if (cur->dtype() != product_dtype())
        return "gelu: " + cur->name + " (" + dt(cur) + ") is also used outside the GEMM, and cuBLASLt saves the " +
               "pre-activation only in the result's dtype (" + dt(product_dtype()) + ")";
      step.aux = cur;
    }
    activated_ = true;
    return push(std::move(step));
  }

  // The relu_mask of `cur`, when it and `relu` are cur's only readers and cur is not returned.
  const Op* relu_mask_reader(const Value* cur, const Op& relu) const {
    if (uses_.outputs.count(cur)) return nullptr;
    const Op* mask = nullptr;
    for (const Op* r : uses_.of(cur)) {
      if (r == &relu) continue;
      if (r->kind != OpKind::relu_mask || mask || taken_.count(r)) return nullptr;
      mask = r;
    }
    return mask;
  }

  std::string take_relu_backward_mask(const Op& op, Value* cur) {
    if (!steps_.empty() || linear_bias_)
      return "relu_backward_mask after other epilogue ops: cuBLASLt's dReLU applies to the product itself";
    if (op.inputs[0] != cur) return "relu_backward_mask reads the product as its mask, not as its gradient: no cuBLASLt epilogue";
    Value* mask = op.inputs[1];
    if (std::string why = why_not_mask_rows(m_.product); !why.empty()) return "relu_backward_mask: " + why;
    if (depends_on(mask, m_.product)) return "relu_backward_mask's mask " + mask->name + " is computed from the product";
    ended_ = true;
    push(Step(&op, Role::drelu, mask));
    take_activation_bias_gradient(op.outputs[0], EpilogueKind::drelu_bgrad);
    return "";
  }

  std::string take_gelu_backward(const Op& op, Value* cur) {
    if (!steps_.empty() || linear_bias_) return "gelu_backward after other epilogue ops: cuBLASLt's dGELU applies to the product itself";
    if (op.inputs[0] != cur || op.inputs[1] == cur)
      return "gelu_backward reads the product as its input, not as its gradient: no cuBLASLt epilogue";
    if (op.string_attr("approximate") != "tanh")
      return "gelu_backward approximate=\"" + op.string_attr("approximate") +
             "\": cuBLASLt's dGELU is the derivative of the tanh approximation";
    if (std::string why = why_not_gelu_for(product_dtype()); !why.empty()) return why;
    Value* pre = op.inputs[1];
    if (pre->is_scalar() || !(pre->shape() == cur->shape()))
      return "gelu_backward's input " + pre->name + " (" + pre->type_str() + ") is broadcast: the aux matrix has the product's shape";
    if (pre->dtype() != product_dtype() || op.outputs[0]->dtype() != product_dtype())
      return "gelu_backward's input " + pre->name + " is " + dt(pre) + ": cuBLASLt's aux matrix has the result's dtype (" +
             dt(product_dtype()) + ")";
    if (depends_on(pre, m_.product)) return "gelu_backward's input " + pre->name + " is computed from the product";
    ended_ = true;
    push(Step(&op, Role::dgelu, pre));
    take_activation_bias_gradient(op.outputs[0], EpilogueKind::dgelu_bgrad);
    return "";
  }

  // sum(dgrad, dims=<every axis but the last>) beside dGELU or dReLU: the bias gradient
  // (dgelu_bgrad, drelu_bgrad).
  void take_activation_bias_gradient(const Value* d, EpilogueKind kind) {
    std::vector<int> want;
    for (int i = 0; i + 1 < d->rank(); ++i) want.push_back(i);
    if (want.empty()) return;
    for (const Op* r : uses_.of(d))
      if (r->kind == OpKind::sum && !taken_.count(r) && r->inputs[0] == d && reduced_axes(*r) == want &&
          (r->outputs[0]->dtype() == d->dtype() || r->outputs[0]->dtype() == DType::f32)) {
        if (epilogue_disabled(kind)) {
          refuse(r, std::string(epilogue_kind_name(kind)) +
                        " is off (ALLOY_DISABLE_EPILOGUES): the bias gradient runs as a generated column reduction");
          return;
        }
        bias_gradient_ = r;
        return;
      }
  }

  std::string refuse_relu_backward(const Op& op, Value*) {
    const Value* pre = op.inputs[1];
    std::string source = pre->producer ? "computed by " + pre->producer->outputs[0]->name + " = " +
                                             std::string(op_name(pre->producer->kind))
                                       : "an input";
    return "relu_backward: cuBLASLt's dReLU reads the ReLU bit mask that a relu_aux forward GEMM writes, not the "
           "pre-activation (" + pre->name + " is " + source + "); save relu_mask(pre) in the forward and use "
           "relu_backward_mask(dy, mask)";
  }

  // The fusion rounds P to its dtype; an f32 result from a 16-bit P would skip that rounding.
  void trim_wide_result() {
    bool noted = false;
    while (!steps_.empty() && steps_.back().op->outputs[0]->dtype() != product_dtype()) {
      const Op* last = steps_.back().op;
      if (!noted)
        refuse(last, "the GEMM's result would be " + dt(last->outputs[0]) + " from a " + dt(product_dtype()) +
                         " product with no cast back: writing it directly would skip rounding the product to " +
                         dt(product_dtype()));
      noted = true;
      steps_.pop_back();
    }
    if (steps_.empty() || (steps_.back().role != Role::dgelu && steps_.back().role != Role::drelu)) bias_gradient_ = nullptr;
  }

  // The weight gradient dW = dy^T @ x usually comes with the bias gradient sum(dy, dims=[0]): the
  // sum of op(A) over k, which cuBLASLt computes as it reads A (bgrad_a); likewise for B.
  void take_operand_bias_gradient() {
    if (!gemm_2d_) return;
    struct Candidate {
      const Value* source;
      int axis;
      EpilogueKind kind;
    };
    std::vector<Candidate> candidates;
    const Value *a = mm_.inputs[0], *b = mm_.inputs[1];
    bool linear = mm_.kind == OpKind::linear;  // op(B) = w^T
    candidates.push_back({a, 1, EpilogueKind::bgrad_a});
    if (is_transpose(a->producer)) candidates.push_back({a->producer->inputs[0], 0, EpilogueKind::bgrad_a});
    candidates.push_back({b, linear ? 1 : 0, EpilogueKind::bgrad_b});
    if (is_transpose(b->producer)) candidates.push_back({b->producer->inputs[0], linear ? 0 : 1, EpilogueKind::bgrad_b});
    for (const Candidate& c : candidates)
      for (const Op* r : uses_.of(c.source))
        if (r->kind == OpKind::sum && !taken_.count(r) && reduced_axes(*r) == std::vector<int>{c.axis} &&
            (r->outputs[0]->dtype() == product_dtype() || r->outputs[0]->dtype() == DType::f32)) {
          if (epilogue_disabled(c.kind)) {
            refuse(r, std::string(epilogue_kind_name(c.kind)) + " is off (ALLOY_DISABLE_EPILOGUES): the bias gradient runs as a generated column reduction");
            continue;
          }
          bias_gradient_ = r;
          operand_bgrad_ = c.kind;
          return;
        }
  }

  // A transpose feeding the matmul and nothing else is a host-side view inside the segment.
  void take_operand_views() {
    for (int i = 0; i < 2; ++i) {
      const Value* operand = mm_.inputs[i];
      const Op* p = operand->producer;
      if (p && p->kind == OpKind::permute && !taken_.count(p) && uses_.only_reader(operand, &mm_) &&
          std::find(m_.operand_views.begin(), m_.operand_views.end(), p) == m_.operand_views.end())
        m_.operand_views.push_back(p);
    }
  }

  void finish() {
    bool bias = linear_bias_ != nullptr;
    const Step* activation = nullptr;
    bool dgelu = false, drelu = false;
    m_.bias = linear_bias_;
    for (const Step& s : steps_) {
      m_.epilogue_ops.push_back(s.op);
      m_.epilogue_ops.insert(m_.epilogue_ops.end(), s.bias_views.begin(), s.bias_views.end());
      if (s.mask_op) m_.epilogue_ops.push_back(s.mask_op);
      if (s.role == Role::bias) bias = true, m_.bias = s.bias;
      if (s.role == Role::activation) activation = &s;
      if (s.role == Role::dgelu) dgelu = true, m_.aux = s.aux;
      if (s.role == Role::drelu) drelu = true, m_.aux = s.aux;
    }
    m_.result = steps_.empty() ? m_.product : steps_.back().op->outputs[0];
    using K = EpilogueKind;
    if (activation && activation->op->kind == OpKind::relu) {
      m_.aux = activation->aux;
      m_.kind = activation->aux ? (bias ? K::relu_aux_bias : K::relu_aux) : (bias ? K::relu_bias : K::relu);
    } else if (activation) {
      m_.aux = activation->aux;
      m_.kind = activation->aux ? (bias ? K::gelu_aux_bias : K::gelu_aux) : (bias ? K::gelu_bias : K::gelu);
    } else if (dgelu) {
      m_.kind = bias_gradient_ ? K::dgelu_bgrad : K::dgelu;
    } else if (drelu) {
      m_.kind = bias_gradient_ ? K::drelu_bgrad : K::drelu;
    } else if (bias_gradient_) {
      m_.kind = operand_bgrad_;
    } else {
      m_.kind = bias ? K::bias : K::none;
    }
    if (bias_gradient_) {
      m_.epilogue_ops.push_back(bias_gradient_);
      m_.bias = bias_gradient_->outputs[0];
    }
    auto by_position = [this](const Op* x, const Op* y) { return uses_.position.at(x) < uses_.position.at(y); };
    std::sort(m_.epilogue_ops.begin(), m_.epilogue_ops.end(), by_position);
    m_.ops = m_.epilogue_ops;
    m_.ops.insert(m_.ops.end(), m_.operand_views.begin(), m_.operand_views.end());
    m_.ops.push_back(&mm_);
    std::sort(m_.ops.begin(), m_.ops.end(), by_position);
  }

  UseMap uses_;
  const Op& mm_;
  const std::set<const Op*>& taken_;
  EpilogueMatch m_;
  std::vector<Step> steps_;
  Value* linear_bias_ = nullptr;
  const Op* bias_gradient_ = nullptr;
  EpilogueKind operand_bgrad_ = EpilogueKind::none;
  bool gemm_2d_ = false;
  bool shared_ = false;  // the value the chain is at is read by several ops or returned
  bool widened_ = false, has_bias_ = false, activated_ = false, ended_ = false;
};

}  // namespace

std::string_view epilogue_kind_name(EpilogueKind kind) {
  switch (kind) {
    case EpilogueKind::none: return "none";
    case EpilogueKind::bias: return "bias";
    case EpilogueKind::relu: return "relu";
    case EpilogueKind::relu_bias: return "relu_bias";
    case EpilogueKind::gelu: return "gelu";
    case EpilogueKind::gelu_bias: return "gelu_bias";
    case EpilogueKind::gelu_aux: return "gelu_aux";
    case EpilogueKind::gelu_aux_bias: return "gelu_aux_bias";
    case EpilogueKind::relu_aux: return "relu_aux";
    case EpilogueKind::relu_aux_bias: return "relu_aux_bias";
    case EpilogueKind::dgelu: return "dgelu";
    case EpilogueKind::dgelu_bgrad: return "dgelu_bgrad";
    case EpilogueKind::drelu: return "drelu";
    case EpilogueKind::drelu_bgrad: return "drelu_bgrad";
    case EpilogueKind::bgrad_a: return "bgrad_a";
    case EpilogueKind::bgrad_b: return "bgrad_b";
  }
  return "?";
}

std::string EpilogueMatch::note() const {
  std::vector<std::string> parts;
  bool writes_bias = kind == EpilogueKind::dgelu_bgrad || kind == EpilogueKind::drelu_bgrad || kind == EpilogueKind::bgrad_a ||
                     kind == EpilogueKind::bgrad_b;
  if (bias) parts.push_back((writes_bias ? "bias gradient: " : "bias: ") + bias->name);
  if (aux) parts.push_back("aux: " + aux->name);
  if (result && result != product) parts.push_back("result: " + result->name);
  std::string out = "epilogue: " + std::string(epilogue_kind_name(kind));
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : " (") + parts[i];
  return parts.empty() ? out : out + ")";
}

EpilogueMatch match_matmul_epilogue(const Fusion& fusion, const Op& matmul, const std::set<const Op*>& taken) {
  ALLOY_CHECK(matmul.kind == OpKind::matmul || matmul.kind == OpKind::linear, "not a matmul: ", op_name(matmul.kind));
  EpilogueMatch match = Matcher(fusion, matmul, taken).run();
  if (match.kind != EpilogueKind::none && epilogue_disabled(match.kind)) {
    EpilogueMatch plain;
    plain.matmul = match.matmul;
    plain.operand_views = match.operand_views;
    plain.ops = match.operand_views;
    plain.ops.push_back(match.matmul);
    plain.product = plain.result = match.product;
    plain.not_taken.push_back({match.epilogue_ops.empty() ? match.matmul : match.epilogue_ops.front(),
                               std::string(epilogue_kind_name(match.kind)) + " disabled by ALLOY_DISABLE_EPILOGUES"});
    return plain;
  }
  return match;
}

}  // namespace alloy
