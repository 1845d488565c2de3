// What each op means to the IR: one row per OpKind with its text-format name, arity, attributes
// (with defaults) and its shape/dtype rule. Shape rules report user errors at the op's location
// and may record run-time constraints on the fusion.
#pragma once

#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

struct AttrSpec {
  std::string_view name;
  // extent: one size, an integer >= 0 or a size symbol an input declares (iota's length=V)
  enum class Type { integer, real, boolean, string, dtype, int_list, extent_list, optional_int_list, extent } type;
  bool required = false;
  std::optional<Attr> default_value;  // used when not required and not given
};

struct InferContext {
  OpKind kind;
  std::span<Value* const> inputs;
  const std::vector<NamedAttr>& attrs;
  const SourceLoc& loc;
  Fusion& fusion;

  const Attr* attr(std::string_view name) const;
  [[noreturn]] void fail(const std::string& message) const;  // "<loc>: <op>: <message>"
};

using InferFn = std::function<std::vector<ValueType>(const InferContext&)>;

// bitmask: relu_mask and relu_backward_mask, whose last axis is packed 32 elements to an i32 word
// (not pointwise: the mask's last axis is ceil(N / 32) for the tensor's N).
// indexing: gather and iota, whose loads and values depend on element positions (in generated
// kernels: iota a leaf of positions, gather a range-checked load; segment/schedulers/kernel_analysis.h).
enum class OpClass { unary, binary, pointwise, bitmask, reduction, shape, matmul, composite, control, communication, indexing };

struct OpRow {
  OpKind kind;
  std::string_view name;
  OpClass op_class;
  int min_inputs;
  int max_inputs;   // -1: any number
  int num_outputs;
  std::vector<AttrSpec> attrs;
  InferFn infer;
};

const OpRow& op_row(OpKind kind);
const OpRow* find_op(std::string_view name);  // nullptr when no op has that name
std::string_view op_name(OpKind kind);
std::vector<std::string_view> all_op_names();

// Helpers shared by the shape rules and the backends.
int normalize_axis(int64_t axis, int rank, const InferContext& ctx, std::string_view what);
bool is_pointwise(OpKind kind);
bool is_view(OpKind kind);  // shape ops that never move data on their own

// The length Python slicing gives an axis of size n (negative indices count from the end,
// out-of-range ones clamp; step > 0): shape inference, derived sizes and the reference share it.
int64_t slice_length(int64_t n, int64_t start, int64_t end, int64_t step);
// The axes a reduction op reduces, sorted and non-negative: its `dims`, or every axis where
// `dims` is absent or empty (torch.sum(x, dim=[]) reduces every axis too).
std::vector<int> reduced_axes(const Op& op);
// Resharding ops: each changes a value's sharding, not its (global) shape; a collective runs in a
// segment of its own (shard_slice, replicated -> shard, only takes this device's part).
bool is_communication(OpKind kind);

}  // namespace alloy
