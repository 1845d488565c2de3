// NumPy .npy files: read and write CPU tensors (format versions 1.0, 2.0 and 3.0; little-endian
// f64 f32 f16 i64 i32 bool; C order), and the dtype conversions `alloy run` allows between a file
// and the input it feeds. bf16 has no NumPy dtype: it is written as f32, which is exact.
#pragma once

#include <string>
#include <string_view>

#include "alloy/tensor/dtype.h"
#include "alloy/tensor/tensor.h"

namespace alloy {

// Reads a whole .npy file into a new contiguous CPU tensor. A missing or malformed file, a
// Fortran-order or big-endian array, or an unsupported dtype is a UserError naming the file.
Tensor read_npy(const std::string& path);
// The same from the file's bytes; `name` is used in error messages.
Tensor parse_npy(std::string_view bytes, const std::string& name);

// Writes a CPU tensor (any strides) as a C-order .npy file; bf16 is written as f32 (exact).
void write_npy(const std::string& path, const Tensor& tensor);
// The bytes write_npy writes.
std::string encode_npy(const Tensor& tensor);

// Makes a tensor read from a file fit an input declared `declared`:
//  - the same dtype: returned as is;
//  - floating to floating (f32 or f64 for a bf16 input, f64 for f32, ...): rounded to nearest even;
//  - i64 for i32: allowed when every value fits; i32 for i64: widened;
//  - anything else (an integer file for a floating input, bool for a number...): a UserError
//    "input 'x': expected bf16 (or another floating dtype, rounded), found i64".
Tensor convert_for_input(const Tensor& tensor, DType declared, const std::string& input_name, const std::string& source = "file");

}  // namespace alloy
