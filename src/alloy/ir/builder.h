// A C++ API for building Fusions that reads like the `.fusion` text:
//
//   FusionBuilder fb("mlp");
//   TensorHandle x = fb.input("x", DType::bf16, {sym("B"), 768});
//   TensorHandle w1 = fb.input("w1", DType::bf16, {3072, 768});
//   TensorHandle h = gelu(linear(x, w1), "tanh");
//   fb.output(add(h, 1.0));
//   std::unique_ptr<Fusion> fusion = fb.build();
//
// One function per op, each a thin wrapper over Fusion::add_op (which checks and infers types);
// user errors name the C++ call site (builder_test.cpp:12:7). The functions are named like the ops
// (exp, log, max, ...) in namespace alloy, so code inside namespace alloy that includes this header
// should call the <cmath> functions qualified (std::exp).
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

using CallSite = std::source_location;

// A value of a fusion under construction (a tensor or a scalar).
class TensorHandle {
 public:
  TensorHandle() = default;
  TensorHandle(Value* value, Fusion* fusion) : value_(value), fusion_(fusion) {}

  Value* value() const { return value_; }
  Fusion* fusion() const { return fusion_; }
  bool valid() const { return value_ && fusion_; }
  const std::string& name() const { return value_->name; }
  DType dtype() const { return value_->dtype(); }
  int rank() const { return value_->rank(); }
  bool is_scalar() const { return value_->is_scalar(); }
  const std::vector<Extent>& shape() const { return value_->shape(); }
  std::string type_str() const { return value_->type_str(); }

  // Renames the value so that prints read well; a user error when the name is taken or invalid.
  TensorHandle named(const std::string& name) const;

 private:
  Value* value_ = nullptr;
  Fusion* fusion_ = nullptr;
};

// A size symbol (`B`) for shapes.
Extent sym(std::string name);

// One entry of a shape: an integer (-1 where an op allows it), a symbol name, or an Extent.
struct Dim {
  Extent extent;
  template <std::integral I>
  Dim(I value) : extent(Extent::constant(int64_t(value))) {}
  Dim(Extent e) : extent(std::move(e)) {}
  Dim(const char* symbol) : extent(Extent::symbol(symbol)) {}
};

// An op argument: a value of the fusion, or a literal scalar (`add(x, 1.0)`, `where(c, x, 0)`).
struct Operand {
  std::optional<TensorHandle> handle;
  std::optional<Literal> literal;

  Operand(TensorHandle value) : handle(value) {}
  Operand(double value) : literal(Literal{Literal::Kind::real, 0, value, false}) {}
  template <std::integral I>
  Operand(I value) {
    if constexpr (std::same_as<I, bool>) literal = Literal{Literal::Kind::boolean, 0, 0, value};
    else literal = Literal{Literal::Kind::integer, int64_t(value), 0, false};
  }
};

class FusionBuilder {
 public:
  explicit FusionBuilder(std::string name = "fusion");

  TensorHandle input(std::string name, DType dtype, std::vector<Dim> shape, std::optional<Sharding> sharding = {},
                     CallSite site = CallSite::current());
  TensorHandle scalar(std::string name, DType dtype, CallSite site = CallSite::current());
  TensorHandle literal(Operand value, CallSite site = CallSite::current());
  Extent dynamic();  // a fresh unnamed size, `?` in the text format
  void output(const TensorHandle& value, CallSite site = CallSite::current());

  Fusion& fusion();
  // The finished fusion; the builder is empty afterwards. A fusion needs at least one output.
  std::unique_ptr<Fusion> build(CallSite site = CallSite::current());

 private:
  std::unique_ptr<Fusion> fusion_;
};

// Any op, by kind: the generic form the functions below wrap. Errors are reported at `loc`.
std::vector<TensorHandle> apply_op(OpKind kind, const std::vector<Operand>& inputs, std::vector<NamedAttr> attrs,
                                   const SourceLoc& loc = {});
// A C++ call site as a SourceLoc ("builder_test.cpp", line, column).
SourceLoc call_site(const CallSite& site);

// The one-input and two-input pointwise ops, one function each (declared here, defined in
// builder.cpp from the same list).
#define ALLOY_BUILDER_POINTWISE_OPS(U, B)                                                     \
  U(neg) U(abs) U(exp) U(log) U(sqrt) U(rsqrt) U(tanh) U(sigmoid) U(relu) U(silu) U(erf)      \
  U(reciprocal) U(segment_set)                                                                \
  B(add) B(sub) B(mul) B(div) B(pow) B(maximum) B(minimum) B(eq) B(ne) B(lt) B(le) B(gt) B(ge)

#define ALLOY_BUILDER_UNARY(name) TensorHandle name(const TensorHandle& x, CallSite site = CallSite::current());
#define ALLOY_BUILDER_BINARY(name) \
  TensorHandle name(const Operand& a, const Operand& b, CallSite site = CallSite::current());
ALLOY_BUILDER_POINTWISE_OPS(ALLOY_BUILDER_UNARY, ALLOY_BUILDER_BINARY)
#undef ALLOY_BUILDER_UNARY
#undef ALLOY_BUILDER_BINARY

TensorHandle gelu(const TensorHandle& x, std::string approximate = "none", CallSite site = CallSite::current());
TensorHandle where(const Operand& condition, const Operand& a, const Operand& b, CallSite site = CallSite::current());
TensorHandle cast(const TensorHandle& x, DType dtype, CallSite site = CallSite::current());
TensorHandle gelu_backward(const TensorHandle& grad, const TensorHandle& x, std::string approximate = "none",
                           CallSite site = CallSite::current());
TensorHandle relu_backward(const TensorHandle& grad, const TensorHandle& x, CallSite site = CallSite::current());
// ReLU bit masks: relu_mask(x) is i32[..., ceil(N / 32)] with bit j of word k set where
// x[..., 32k + j] > 0; relu_backward_mask(grad, mask) is grad where the mask's bit is set, else 0.
TensorHandle relu_mask(const TensorHandle& x, CallSite site = CallSite::current());
TensorHandle relu_backward_mask(const TensorHandle& grad, const TensorHandle& mask, CallSite site = CallSite::current());

// Reductions; empty `dims` reduces every axis.
TensorHandle sum(const TensorHandle& x, std::vector<int64_t> dims = {}, bool keepdim = false,
                 CallSite site = CallSite::current());
TensorHandle max(const TensorHandle& x, std::vector<int64_t> dims = {}, bool keepdim = false,
                 CallSite site = CallSite::current());
TensorHandle min(const TensorHandle& x, std::vector<int64_t> dims = {}, bool keepdim = false,
                 CallSite site = CallSite::current());
TensorHandle mean(const TensorHandle& x, std::vector<int64_t> dims = {}, bool keepdim = false,
                  CallSite site = CallSite::current());
// Returns {var, mean}.
std::pair<TensorHandle, TensorHandle> var_mean(const TensorHandle& x, std::vector<int64_t> dims = {},
                                               double correction = 0, bool keepdim = false,
                                               CallSite site = CallSite::current());

TensorHandle broadcast_in_dim(const TensorHandle& x, std::vector<Dim> shape, std::vector<int64_t> broadcast_dims,
                              CallSite site = CallSite::current());
TensorHandle expand(const TensorHandle& x, std::vector<Dim> shape, CallSite site = CallSite::current());
TensorHandle reshape(const TensorHandle& x, std::vector<Dim> shape, CallSite site = CallSite::current());
TensorHandle permute(const TensorHandle& x, std::vector<int64_t> dims, CallSite site = CallSite::current());
// Empty `steps` means step 1 on every sliced axis.
TensorHandle slice(const TensorHandle& x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                   std::vector<int64_t> steps = {}, CallSite site = CallSite::current());
// Empty `dims` squeezes every axis of size 1.
TensorHandle squeeze(const TensorHandle& x, std::vector<int64_t> dims = {}, CallSite site = CallSite::current());
TensorHandle unsqueeze(const TensorHandle& x, int64_t dim, CallSite site = CallSite::current());
TensorHandle cat(const std::vector<TensorHandle>& inputs, int64_t dim = 0, CallSite site = CallSite::current());

// torch.gather: index (i64 or i32) of x's rank; the result has index's shape.
TensorHandle gather(const TensorHandle& x, const TensorHandle& index, int64_t dim, CallSite site = CallSite::current());
// 0, 1, ..., length-1 (an integer or a size symbol an input declares); no inputs, so it names its fusion.
TensorHandle iota(FusionBuilder& fb, Dim length, DType dtype = DType::i64, CallSite site = CallSite::current());

TensorHandle matmul(const TensorHandle& a, const TensorHandle& b, CallSite site = CallSite::current());
TensorHandle linear(const TensorHandle& x, const TensorHandle& weight, std::optional<TensorHandle> bias = {},
                    CallSite site = CallSite::current());

TensorHandle softmax(const TensorHandle& x, int64_t dim = -1, CallSite site = CallSite::current());
TensorHandle layer_norm(const TensorHandle& x, std::optional<TensorHandle> weight = {},
                        std::optional<TensorHandle> bias = {}, int64_t normalized_ndim = 1, double eps = 1e-5,
                        CallSite site = CallSite::current());
TensorHandle rms_norm(const TensorHandle& x, std::optional<TensorHandle> weight = {}, int64_t normalized_ndim = 1,
                      double eps = 1e-6, CallSite site = CallSite::current());

// Arithmetic operators for expressions such as `x * 0.5 + b` (errors carry no call site).
#define ALLOY_BUILDER_OPERATOR(sym, fn)                                                                  \
  inline TensorHandle operator sym(const TensorHandle& a, const TensorHandle& b) {                       \
    return apply_op(OpKind::fn, {a, b}, {})[0];                                                         \
  }                                                                                                     \
  inline TensorHandle operator sym(const TensorHandle& a, const Operand& b) {                            \
    return apply_op(OpKind::fn, {a, b}, {})[0];                                                         \
  }                                                                                                     \
  inline TensorHandle operator sym(const Operand& a, const TensorHandle& b) {                            \
    return apply_op(OpKind::fn, {a, b}, {})[0];                                                         \
  }
ALLOY_BUILDER_OPERATOR(+, add) ALLOY_BUILDER_OPERATOR(-, sub) ALLOY_BUILDER_OPERATOR(*, mul)
ALLOY_BUILDER_OPERATOR(/, div)
#undef ALLOY_BUILDER_OPERATOR
inline TensorHandle operator-(const TensorHandle& x) { return apply_op(OpKind::neg, {x}, {})[0]; }

}  // namespace alloy
