// Reference kernels of the ReLU bit masks. relu_mask(x) packs the last axis of x (N elements)
// into ceil(N / 32) i32 words: bit j of word k is 1 where x[..., 32k + j] > 0 (0 for NaN), and
// the bits past N are 0. relu_backward_mask(grad, mask) is grad where the element's bit is set,
// else 0 (so a NaN or inf gradient of a clear bit gives 0, as relu_backward does).
#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

constexpr int64_t kBits = 32;

int64_t words_for(int64_t n) { return (n + kBits - 1) / kBits; }

// rows x n for a tensor of at least one axis.
std::pair<int64_t, int64_t> rows_and_width(const Shape& sizes) {
  int64_t n = sizes.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) rows *= sizes[d];
  return {rows, n};
}

}  // namespace

std::vector<Tensor> relu_mask_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor& x = in[0];
  auto [rows, n] = rows_and_width(x.sizes());
  int64_t words = words_for(n);
  ALLOY_CHECK(out[0].back() == words, "relu_mask: ", words, " words for ", n, " elements, found ", out[0].back());
  std::vector<double> values = load_doubles(x);
  std::vector<int64_t> packed(size_t(rows * words), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < words; ++k) {
      uint32_t word = 0;
      for (int64_t j = 0; j < kBits && k * kBits + j < n; ++j)
        if (values[size_t(r * n + k * kBits + j)] > 0) word |= uint32_t(1) << j;
      packed[size_t(r * words + k)] = int32_t(word);  // the i32 holding those bits
    }
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  store_ints(result, packed.data());
  return {result};
}

std::vector<Tensor> relu_backward_mask_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor &grad = in[0], &mask = in[1];
  auto [rows, n] = rows_and_width(grad.sizes());
  int64_t words = words_for(n);
  ALLOY_CHECK(mask.dim() == grad.dim() && mask.numel() == rows * words, "relu_backward_mask: mask ", shape_str(mask.sizes()),
              " for grad ", shape_str(grad.sizes()));
  std::vector<int64_t> bits = load_ints(mask);
  auto is_set = [&](int64_t i) {
    int64_t r = i / n, c = i % n;
    return (uint32_t(bits[size_t(r * words + c / kBits)]) >> (c % kBits)) & 1u;
  };
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  if (is_floating(grad.dtype())) {
    std::vector<double> g = load_doubles(grad);
    for (size_t i = 0; i < g.size(); ++i)
      if (!is_set(int64_t(i))) g[i] = 0.0;
    store_doubles(result, g.data());
  } else {
    std::vector<int64_t> g = load_ints(grad);
    for (size_t i = 0; i < g.size(); ++i)
      if (!is_set(int64_t(i))) g[i] = 0;
    store_ints(result, g.data());
  }
  return {result};
}

}  // namespace alloy::reference
