// The IR: a Fusion owns its values and ops (an arena); ops are kept in definition order, which
// is a topological order. Values are tensors (rank >= 0) or scalars (scalar inputs and literal
// constants, which do not promote tensors' dtypes).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloy/common/error.h"
#include "alloy/ir/attr.h"
#include "alloy/tensor/dtype.h"
#include "alloy/ir/extent.h"
#include "alloy/ir/op_kind.h"

namespace alloy {

struct Op;

// A pending reduction over the mesh: every device holds a full-size term of the value.
enum class PartialReduce { sum, max, min };

// How a tensor is laid over a 1-D device mesh: replicated, split evenly along one axis, or
// partial (internal, never written by a user: each device holds one term of a reduction over the
// mesh that is still to be done). The IR keeps global shapes; local shapes exist at run time.
struct Sharding {
  std::vector<int64_t> mesh;       // device ids; device K is the process of rank K
  std::optional<int> shard_axis;   // set: split evenly along this axis
  std::optional<PartialReduce> partial;  // set: a pending reduction (shard_axis is then unset)

  bool is_replicated() const { return !shard_axis && !partial; }
  bool operator==(const Sharding&) const = default;
  static Sharding replicated(std::vector<int64_t> mesh) { return Sharding{std::move(mesh), {}, {}}; }
  static Sharding shard(std::vector<int64_t> mesh, int axis) { return Sharding{std::move(mesh), axis, {}}; }
  static Sharding partial_of(std::vector<int64_t> mesh, PartialReduce r) { return Sharding{std::move(mesh), {}, r}; }
};

// Where a value's sharding came from. A user's annotation is never changed by a pass. `pinned`:
// a fusion output's layout decided where no size is bound, kept when the passes decide again at
// a run's sizes (a caller lays out the outputs before it knows them); the passes treat it as an
// annotation, the printer does not print it.
struct ShardingSource {
  enum class Kind { none, user, default_replicated, propagated, resharded, pinned } kind = Kind::none;
  std::string from;  // propagated: the value (and rule) it came from; resharded: the value it reshards
  SourceLoc loc;     // user: where the annotation is written
};

// A literal scalar in the program (`1.0e-5`, `2`, `true`).
struct Literal {
  enum class Kind { integer, real, boolean } kind = Kind::real;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  double as_double() const { return kind == Kind::real ? f : kind == Kind::integer ? double(i) : double(b); }
  bool operator==(const Literal&) const = default;
};

// The type part of a value: what shape inference computes.
struct ValueType {
  DType dtype = DType::f32;
  bool is_scalar = false;        // a scalar (not a tensor)
  std::vector<Extent> shape;     // empty for scalars and 0-dim tensors
  int rank() const { return int(shape.size()); }
};

struct Value {
  int id = 0;
  std::string name;              // unique within the fusion; change it with Fusion::rename_value
  ValueType type;
  std::optional<Literal> literal;  // set for literal constants
  std::optional<Sharding> sharding;
  ShardingSource sharding_source;
  Op* producer = nullptr;        // nullptr for inputs and literals
  bool is_input = false;

  DType dtype() const { return type.dtype; }
  int rank() const { return type.rank(); }
  const std::vector<Extent>& shape() const { return type.shape; }
  bool is_scalar() const { return type.is_scalar; }
  std::string type_str() const;  // "bf16[B, 768]", "f32" for a scalar
  // Takes `other`'s annotations (its sharding and where that came from): the one helper every
  // pass that makes a value "like" another calls, so no rewrite drops a sharding.
  void take_annotations_from(const Value& other) {
    sharding = other.sharding;
    sharding_source = other.sharding_source;
  }
};

struct Op {
  OpKind kind;
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::vector<NamedAttr> attrs;  // in the table's canonical order, defaults filled in
  SourceLoc loc;

  const Attr* attr(std::string_view name) const;
  const Attr& required_attr(std::string_view name) const;  // internal error when missing
  int64_t int_attr(std::string_view name) const;
  double real_attr(std::string_view name) const;  // accepts an integer too
  bool bool_attr(std::string_view name) const;
  const std::string& string_attr(std::string_view name) const;
  std::vector<int64_t> ints_attr(std::string_view name) const;
};

// The most elements one tensor may have: far more than any device holds (2^48 elements of one
// byte are 256 TiB), and small enough that sizes, strides and byte counts never overflow int64.
constexpr int64_t kMaxTensorElements = int64_t(1) << 48;
// The most axes a tensor has (PyTorch's limit too): a generated kernel passes a size and a stride
// per axis of each tensor, and CUDA bounds a kernel's parameters.
constexpr int kMaxRank = 64;

// The element count of `sizes`, or nullopt when it passes kMaxTensorElements (never overflows).
std::optional<int64_t> checked_elements(const std::vector<int64_t>& sizes);

class Fusion {
 public:
  explicit Fusion(std::string name = "fusion") : name_(std::move(name)) {}
  Fusion(const Fusion&) = delete;
  Fusion& operator=(const Fusion&) = delete;
  Fusion(Fusion&&) = default;
  Fusion& operator=(Fusion&&) = default;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  Value* add_input(std::string name, ValueType type, std::optional<Sharding> sharding = {},
                   const SourceLoc& loc = {});
  Value* add_literal(Literal literal);
  // Checks arity and attributes, fills default attributes, infers the outputs' types (user errors
  // are reported at `loc`), names outputs with `output_names` (or fresh names) and appends the op.
  std::vector<Value*> add_op(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs,
                             const SourceLoc& loc = {}, std::vector<std::string> output_names = {});
  // Appends an op whose outputs' types the caller already knows (attributes as canonical as a
  // checked op's), without shape inference: for passes that change what shapes mean, such as
  // the local (per-device) form of a sharded fusion, whose shapes are global ones divided.
  std::vector<Value*> add_op_typed(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs,
                                   std::vector<ValueType> types, std::vector<std::string> output_names,
                                   const SourceLoc& loc = {});
  Value* add_op1(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs = {},
                 const SourceLoc& loc = {}, std::string output_name = {});
  // `alias_input` (optional): a tensor input that the run writes this output into, an in-place
  // update (`return y -> x` in the text); it has the output's dtype and shape, and no other
  // output writes it.
  void add_output(Value* value, const SourceLoc& loc = {}, Value* alias_input = nullptr);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  // Per output, the input it updates in place (nullptr for none); as long as outputs().
  const std::vector<Value*>& output_aliases() const { return output_aliases_; }
  // The in-place outputs of `declared`, a fusion this one was rewritten from (a pass's result: the
  // same inputs and outputs, in the same order), taken by position: passes need not carry them,
  // and the pipeline gives the fusion it segments those of the fusion it was given.
  void take_output_aliases_from(const Fusion& declared);
  // Where output i is returned (the `return` statement's name; unknown for outputs a pass adds).
  SourceLoc output_loc(size_t i) const { return i < output_locs_.size() ? output_locs_[i] : SourceLoc{}; }
  const std::vector<std::unique_ptr<Op>>& ops() const { return ops_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  Value* find_value(std::string_view name) const;
  std::string fresh_name(std::string_view prefix = "t");
  // Renames `value` (a value of this fusion) and keeps the name index right; the caller has
  // checked that `name` is free.
  void rename_value(Value* value, std::string name);
  int next_dynamic_id() { return dynamic_ids_++; }

  // Facts shape inference could not decide alone (two different symbols that must be equal where
  // a binary op broadcasts them): checked when sizes are bound at run time.
  struct Constraint {
    Extent a, b;
    std::string what;  // "add at mlp.fusion:3:7: axis 1"
  };
  const std::vector<Constraint>& constraints() const { return constraints_; }
  void add_constraint(Constraint c) { constraints_.push_back(std::move(c)); }

  // A size that is a sum of extents (cat along axes of different symbols), or a symbolic size
  // divided by a constant and rounded up (the i32 words of a ReLU bit mask, relu_mask), is a fresh
  // symbol, computed from its terms once the inputs' sizes are bound.
  // A slice of a symbolic axis is one too: the length Python slicing gives (negative indices
  // count from the end, out-of-range ones clamp), computed from the axis's bound size.
  struct DerivedSymbol {
    std::string name;
    std::vector<Extent> terms;   // summed
    int64_t ceil_divisor = 1;    // then divided by this, rounded up
    struct Slice {
      int64_t start, end, step;
    };
    std::optional<Slice> slice;  // or, of the one term, this slice's length
  };
  Extent define_sum(std::vector<Extent> terms);
  Extent define_ceil_div(const Extent& size, int64_t divisor);
  Extent define_slice(const Extent& size, int64_t start, int64_t end, int64_t step);
  // `name` bound to `value` (a symbol a rewrite no longer lets any input carry: unify_extents).
  void define_alias(const std::string& name, const Extent& value) { derived_.push_back({name, {value}, 1, std::nullopt}); }
  // Rewrites the terms of every derived size (unify_extents).
  template <class Fn>
  void rewrite_derived_terms(Fn&& fn) {
    for (DerivedSymbol& d : derived_)
      for (Extent& t : d.terms) t = fn(t);
  }
  const std::vector<DerivedSymbol>& derived_symbols() const { return derived_; }

  // Takes `other`'s constraints and derived symbols (a pass that rebuilds a fusion without shape
  // inference keeps the facts the original's inference recorded).
  void take_size_facts_from(const Fusion& other) {
    constraints_ = other.constraints_;
    derived_ = other.derived_;
  }

  // Binds every input symbol from concrete input sizes is the evaluator's job; this completes
  // `bindings` with the derived symbols and checks the constraints (user errors name the op).
  void complete_bindings(Bindings& bindings) const;

  // A deep copy; `map` (optional) receives old value -> new value.
  std::unique_ptr<Fusion> clone() const;

  // Every symbol that appears in the inputs' shapes, in first-use order.
  std::vector<std::string> input_symbols() const;

 private:
  Value* new_value(std::string name, ValueType type);

  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  // name -> value, so that find_value and fresh_name are O(1) and parsing is linear.
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<Value*> output_aliases_;
  std::vector<SourceLoc> output_locs_;
  std::vector<Constraint> constraints_;
  std::vector<DerivedSymbol> derived_;
  int dynamic_ids_ = 0;
  int fresh_counter_ = 0;
};

// The one mesh the fusion's annotations name, or nullopt when it names none. Meshes that differ
// within one fusion are a user error at the second one.
std::optional<std::vector<int64_t>> fusion_mesh(const Fusion& fusion);

// A pow of a floating tensor to the literal 0.5 or -0.5 (that exponent, else 0): PyTorch computes
// it as sqrt or rsqrt (unlike C's pow at -0 and -inf), and so do the CPU reference and
// decompose_composites (for GPU and sharded runs).
double literal_half_exponent(const Op& pow);

}  // namespace alloy
