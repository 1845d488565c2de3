#include "alloy/backend/cuda/codegen/bitmask_kernel.h"

#include <algorithm>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/prelude.h"
#include "alloy/common/error.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {
namespace {

std::string relu_mask_kernel(DType dtype, const std::string& name) {
  std::string T = storage_type(dtype);
  return "struct Params {\n  const " + T + "* x; long long x_rows, x_cols;\n  int* mask; long long mask_rows, mask_cols;\n" +
         "  long long rows, n, words;\n};\n"
         "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBitmaskThreads) + ") " + name + "(const Params p) {\n"
         "  const unsigned lane = threadIdx.x & 31u;\n"
         "  const long long warps = (long long)gridDim.x * (blockDim.x >> 5);\n"
         "  const long long total = p.rows * p.words;\n"
         "  // w is the same for the 32 lanes of a warp, so every lane reaches the ballot\n"
         "  for (long long w = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w < total; w += warps) {\n"
         "    const long long r = w / p.words, k = w - r * p.words, c = k * 32 + lane;\n"
         "    bool bit = false;\n"
         "    if (c < p.n) bit = " + load_convert(dtype, "p.x[r * p.x_rows + c * p.x_cols]") + " > 0;\n"
         "    const unsigned word = __ballot_sync(0xffffffffu, bit);\n"
         "    if (lane == 0) p.mask[r * p.mask_rows + k * p.mask_cols] = (int)word;\n"
         "  }\n}\n";
}

std::string relu_backward_mask_kernel(DType dtype, const std::string& name) {
  std::string T = storage_type(dtype);
  return "struct Params {\n  const " + T + "* grad; long long grad_rows, grad_cols;\n  const int* mask; long long mask_rows, mask_cols;\n" +
         "  " + T + "* out; long long out_rows, out_cols;\n  long long rows, n;\n};\n"
         "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBitmaskThreads) + ") " + name + "(const Params p) {\n"
         "  const long long total = p.rows * p.n, step = (long long)gridDim.x * blockDim.x;\n"
         "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {\n"
         "    const long long r = i / p.n, c = i - r * p.n;\n"
         "    const unsigned word = (unsigned)p.mask[r * p.mask_rows + (c >> 5) * p.mask_cols];\n"
         "    p.out[r * p.out_rows + c * p.out_cols] = ((word >> (c & 31)) & 1u) ? p.grad[r * p.grad_rows + c * p.grad_cols] : (" +
         T + ")0;\n"
         "  }\n}\n";
}

uint64_t address(const Tensor* t) { return uint64_t(reinterpret_cast<uintptr_t>(t->data())); }
uint64_t word(int64_t v) { return uint64_t(v); }

}  // namespace

std::string generate_bitmask_kernel(OpKind kind, DType dtype, const std::string& name) {
  std::string head = std::string("// ") + std::string(op_name(kind)) + ", " + std::string(dtype_name(dtype)) + "\n" + kKernelPrelude + "\n";
  if (kind == OpKind::relu_mask) return head + relu_mask_kernel(dtype, name);
  ALLOY_CHECK(kind == OpKind::relu_backward_mask, "not a bitmask op: ", op_name(kind));
  return head + relu_backward_mask_kernel(dtype, name);
}

BitmaskLaunch plan_bitmask_launch(OpKind kind, const std::vector<const Tensor*>& tensors, int sm_count) {
  BitmaskLaunch plan;
  for (const Tensor* t : tensors) ALLOY_CHECK(t->dim() == 2, op_name(kind), ": a ", t->dim(), "-D view; expected [rows, columns]");
  const Tensor& elements = *tensors[0];
  int64_t rows = elements.size(0), n = elements.size(1), words = (n + 31) / 32;
  // a grid-stride loop: enough blocks to fill the GPU, fewer where there is less work
  int64_t cap = int64_t(std::max(sm_count, 1)) * 32;
  if (kind == OpKind::relu_mask) {
    const Tensor &x = *tensors[0], &mask = *tensors[1];
    ALLOY_CHECK(mask.size(0) == rows && mask.size(1) == words, "relu_mask: a mask of ", mask.size(1), " words for ", n, " columns");
    plan.words = {address(&x), word(x.stride(0)), word(x.stride(1)), address(&mask), word(mask.stride(0)), word(mask.stride(1)), word(rows), word(n),
                  word(words)};
    int64_t warps_per_block = kBitmaskThreads / 32;
    plan.grid = unsigned(std::min(cap, (rows * words + warps_per_block - 1) / warps_per_block));
  } else {
    ALLOY_CHECK(kind == OpKind::relu_backward_mask, "not a bitmask op: ", op_name(kind));
    const Tensor &grad = *tensors[0], &mask = *tensors[1], &out = *tensors[2];
    ALLOY_CHECK(mask.size(0) == rows && mask.size(1) == words && out.size(0) == rows && out.size(1) == n,
                "relu_backward_mask: tensors of different rows or widths");
    plan.words = {address(&grad), word(grad.stride(0)), word(grad.stride(1)), address(&mask), word(mask.stride(0)), word(mask.stride(1)),
                  address(&out), word(out.stride(0)), word(out.stride(1)), word(rows), word(n)};
    plan.grid = unsigned(std::min(cap, (rows * n + kBitmaskThreads - 1) / kBitmaskThreads));
  }
  plan.launch = rows * n > 0;
  return plan;
}

}  // namespace alloy::cuda
