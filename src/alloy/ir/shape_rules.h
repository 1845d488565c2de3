// The shape and dtype rule of every op kind (the `infer` column of op_table.cpp's rows): each
// checks its op's inputs and attributes, reporting a located user error for what the op cannot
// take, and returns the types of its outputs. Internal to ir/ (op_table.cpp builds the table).
#pragma once

#include <vector>

#include "alloy/ir/op_table.h"

namespace alloy::shape_rules {

std::vector<ValueType> infer_activation_backward(const InferContext& ctx);
std::vector<ValueType> infer_binary(const InferContext& ctx);
std::vector<ValueType> infer_broadcast_in_dim(const InferContext& ctx);
std::vector<ValueType> infer_cast(const InferContext& ctx);
std::vector<ValueType> infer_cat(const InferContext& ctx);
std::vector<ValueType> infer_expand(const InferContext& ctx);
std::vector<ValueType> infer_gather(const InferContext& ctx);
std::vector<ValueType> infer_identity(const InferContext& ctx);
std::vector<ValueType> infer_iota(const InferContext& ctx);
std::vector<ValueType> infer_linear(const InferContext& ctx);
std::vector<ValueType> infer_matmul(const InferContext& ctx);
std::vector<ValueType> infer_norm(const InferContext& ctx);
std::vector<ValueType> infer_permute(const InferContext& ctx);
std::vector<ValueType> infer_reduction(const InferContext& ctx);
std::vector<ValueType> infer_relu_backward_mask(const InferContext& ctx);
std::vector<ValueType> infer_relu_mask(const InferContext& ctx);
std::vector<ValueType> infer_reshape(const InferContext& ctx);
std::vector<ValueType> infer_resharding(const InferContext& ctx);
std::vector<ValueType> infer_slice(const InferContext& ctx);
std::vector<ValueType> infer_softmax(const InferContext& ctx);
std::vector<ValueType> infer_squeeze(const InferContext& ctx);
std::vector<ValueType> infer_unary(const InferContext& ctx);
std::vector<ValueType> infer_unsqueeze(const InferContext& ctx);
std::vector<ValueType> infer_where(const InferContext& ctx);

}  // namespace alloy::shape_rules
