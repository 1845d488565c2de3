// The CUDA C++ text of values and ops for the kernel generator: how each dtype is held in
// registers and stored in memory, the conversions between them, literals, PyTorch-exact rounding
// of 16-bit intermediates, and one expression row per pointwise op kind.
#pragma once

#include <string>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy::cuda {

const char* compute_type(DType t);  // in registers: float for f32/f16/bf16, alloy_i64 for integers
const char* storage_type(DType t);  // in memory: alloy_u16 for f16/bf16, ...
std::string load_convert(DType t, const std::string& raw);     // storage -> register value
std::string store_convert(DType t, const std::string& value);  // register value -> storage
// The dtype an op computes in: its output's, except comparisons (their operands' promotion).
DType op_compute_dtype(const Op& op);
std::string literal_text(const Literal& lit, const char* ctype);
// A value of a 16-bit float dtype held in a float register, rounded as PyTorch stores it.
std::string round_to_dtype(DType t, const std::string& expr);
// `op` applied to the argument expressions `args`, computing in `ct`.
std::string pointwise_expr(const Op& op, const std::vector<std::string>& args, const char* ct);

}  // namespace alloy::cuda
