// The closed set of op kinds. Each kind's meaning (text name, arity, attributes, shape and
// dtype rule) is one row of the table in op_table.cpp; its CPU reference is one row in
// backend/cpu/reference_ops.cpp.
#pragma once

#include <cstdint>

namespace alloy {

#define ALLOY_OP_KINDS(X)                                                                     \
  /* unary pointwise */                                                                     \
  X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(tanh) X(sigmoid) X(relu) X(silu) X(erf)    \
  X(reciprocal) X(gelu)                                                                     \
  /* binary pointwise */                                                                    \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum)                                  \
  X(eq) X(ne) X(lt) X(le) X(gt) X(ge)                                                       \
  /* other pointwise */                                                                     \
  X(where) X(cast) X(gelu_backward) X(relu_backward)                                        \
  /* ReLU bit masks: 1 bit per element of the last axis, packed in i32 words */             \
  X(relu_mask) X(relu_backward_mask)                                                        \
  /* reductions */                                                                          \
  X(sum) X(max) X(min) X(mean) X(var_mean)                                                  \
  /* shape */                                                                               \
  X(broadcast_in_dim) X(expand) X(reshape) X(permute) X(slice) X(squeeze) X(unsqueeze)      \
  X(cat)                                                                                    \
  /* indexing: gather reads x at positions an index tensor holds; iota makes 0..N-1 */      \
  X(gather) X(iota)                                                                         \
  /* matmul */                                                                              \
  X(matmul) X(linear)                                                                       \
  /* composites */                                                                          \
  X(softmax) X(layer_norm) X(rms_norm)                                                      \
  /* segmentation control */                                                                \
  X(segment_set)                                                                            \
  /* resharding (inserted by passes/insert_resharding; identities on global shapes) */      \
  X(all_gather) X(reduce_scatter) X(all_reduce) X(all_to_all) X(shard_slice)

enum class OpKind : uint8_t {
#define ALLOY_ENUM_ITEM(name) name,
  ALLOY_OP_KINDS(ALLOY_ENUM_ITEM)
#undef ALLOY_ENUM_ITEM
};

}  // namespace alloy
