// End-to-end runs on the CPU through FusionExecutor: whole fusions (the nanoGPT MLP, layer norm as
// a framework traces it and as a composite, softmax, rms_norm, reductions, symbolic sizes) compared
// with plain loops written here in double; input validation errors; and every example file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>

#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::tensors_close;

// ---- tensors in and out of plain vectors ------------------------------------------------

// The elements of `t` in C order, whatever its strides.
std::vector<double> values_of(const Tensor& any) {
  Tensor t = to_cpu(any);
  std::vector<double> out;
  int64_t n = t.numel();
  out.reserve(size_t(n));
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t offset = 0;
    for (int d = 0; d < t.dim(); ++d) offset += index[d] * t.stride(d);
    out.push_back(load_as_double(t.data(), t.dtype(), offset));
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
  }
  return out;
}

Tensor tensor_of(DType dtype, const std::vector<int64_t>& sizes, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  EXPECT_EQ(t.numel(), int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) store_double(t.data(), dtype, int64_t(i), values[i]);
  return t;
}

// Seeded normal(0, scale) values rounded to `dtype`.
Tensor random_input(DType dtype, const std::vector<int64_t>& sizes, uint64_t seed, double scale = 1.0) {
  std::vector<double> v = values_of(random_tensor(DType::f64, sizes, seed));
  for (double& x : v) x *= scale;
  return tensor_of(dtype, sizes, v);
}

std::unique_ptr<Fusion> parse(const std::string& text) { return parse_fusion(text, "e2e.fusion"); }

std::vector<Tensor> run_cpu(const std::string& text, const std::vector<Tensor>& inputs) {
  FusionExecutor executor(parse(text), {DeviceChoice::cpu});
  return executor.run(inputs);
}

// ---- the loop references ----------------------------------------------------------------

// y[r, o] = sum_i x[r, i] * w[o, i] + b[o]: torch.nn.functional.linear on rows of x.
std::vector<double> linear_loops(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                                 int64_t rows, int64_t in, int64_t out) {
  std::vector<double> y(size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[size_t(o)];
      for (int64_t i = 0; i < in; ++i) acc += x[size_t(r * in + i)] * w[size_t(o * in + i)];
      y[size_t(r * out + o)] = acc;
    }
  return y;
}

double gelu_tanh(double v) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
}

// Per row of `cols` elements: (x - mean) / sqrt(var + eps) * w + b (biased variance), and the
// rows' mean and reciprocal std. Empty w or b means none.
struct NormRows {
  std::vector<double> y, mean, rstd;
};
NormRows layer_norm_loops(const std::vector<double>& x, int64_t cols, const std::vector<double>& w,
                          const std::vector<double>& b, double eps) {
  NormRows out;
  int64_t rows = int64_t(x.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[size_t(r * cols + c)];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (x[size_t(r * cols + c)] - mean) * (x[size_t(r * cols + c)] - mean);
    var /= double(cols);
    double rstd = 1.0 / std::sqrt(var + eps);
    out.mean.push_back(mean);
    out.rstd.push_back(rstd);
    for (int64_t c = 0; c < cols; ++c) {
      double v = (x[size_t(r * cols + c)] - mean) * rstd;
      if (!w.empty()) v *= w[size_t(c)];
      if (!b.empty()) v += b[size_t(c)];
      out.y.push_back(v);
    }
  }
  return out;
}

std::vector<double> rms_norm_loops(const std::vector<double>& x, int64_t cols, const std::vector<double>& w, double eps) {
  std::vector<double> y;
  for (size_t r = 0; r < x.size() / size_t(cols); ++r) {
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += x[r * size_t(cols) + size_t(c)] * x[r * size_t(cols) + size_t(c)];
    double scale = 1.0 / std::sqrt(squares / double(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y.push_back(x[r * size_t(cols) + size_t(c)] * scale * w[size_t(c)]);
  }
  return y;
}

// Softmax of a [outer, n, inner] C-order array along its middle axis.
std::vector<double> softmax_loops(const std::vector<double>& x, int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return size_t((o * n + k) * inner + i); };
      double top = -INFINITY, total = 0;
      for (int64_t k = 0; k < n; ++k) top = std::max(top, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) total += std::exp(x[at(k)] - top);
      for (int64_t k = 0; k < n; ++k) y[at(k)] = std::exp(x[at(k)] - top) / total;
    }
  return y;
}

// ---- the nanoGPT MLP ----------------------------------------------------------------------

const char* const kMlp = R"(
fusion mlp(x: DT[B, S, 16], w_fc: DT[64, 16], b_fc: DT[64], w_proj: DT[16, 64], b_proj: DT[16]) {
  h = linear(x, w_fc, b_fc)
  g = gelu(h, approximate="tanh")
  y = linear(g, w_proj, b_proj)
  return y
}
)";

std::string with_dtype(std::string text, DType dtype) {
  for (size_t at; (at = text.find("DT[")) != std::string::npos;) text.replace(at, 2, dtype_name(dtype));
  return text;
}

void check_mlp(DType dtype) {
  const int64_t B = 2, S = 3, E = 16, H = 64;
  // Weights scaled by 1/sqrt(fan_in) keep every activation near 1, as in a trained model.
  std::vector<Tensor> inputs{random_input(dtype, {B, S, E}, 1), random_input(dtype, {H, E}, 2, 0.25),
                             random_input(dtype, {H}, 3, 0.1), random_input(dtype, {E, H}, 4, 0.125),
                             random_input(dtype, {E}, 5, 0.1)};
  std::vector<Tensor> out = run_cpu(with_dtype(kMlp, dtype), inputs);
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> h = linear_loops(values_of(inputs[0]), values_of(inputs[1]), values_of(inputs[2]), B * S, E, H);
  for (double& v : h) v = gelu_tanh(v);
  std::vector<double> y = linear_loops(h, values_of(inputs[3]), values_of(inputs[4]), B * S, H, E);
  EXPECT_TRUE(tensors_close(out[0], tensor_of(dtype, {B, S, E}, y)));
}

TEST(EndToEndCpu, NanoGptMlp_F32_MatchesLoops) { check_mlp(DType::f32); }

TEST(EndToEndCpu, NanoGptMlp_Bf16_MatchesLoopsWithinBf16Tolerance) { check_mlp(DType::bf16); }

// ---- normalizations and softmax -------------------------------------------------------------

TEST(EndToEndCpu, LayerNormTracedAsPrimitives_MatchesLoops) {
  const char* text = R"(
fusion layer_norm(x: bf16[2, 3, 8], weight: bf16[8], bias: bf16[8]) {
  x32 = cast(x, dtype=f32)
  var, mean = var_mean(x32, dims=[2], correction=0, keepdim=false)
  var_b = broadcast_in_dim(var, shape=[2, 3, 1], broadcast_dims=[0, 1])
  mean_b = broadcast_in_dim(mean, shape=[2, 3, 1], broadcast_dims=[0, 1])
  var_eps = add(var_b, 1.0e-5)
  rstd = rsqrt(var_eps)
  mean_full = broadcast_in_dim(mean_b, shape=[2, 3, 8], broadcast_dims=[0, 1, 2])
  centered = sub(x32, mean_full)
  rstd_full = broadcast_in_dim(rstd, shape=[2, 3, 8], broadcast_dims=[0, 1, 2])
  normed = mul(centered, rstd_full)
  weight_full = broadcast_in_dim(weight, shape=[2, 3, 8], broadcast_dims=[2])
  weight32 = cast(weight_full, dtype=f32)
  scaled = mul(normed, weight32)
  bias_full = broadcast_in_dim(bias, shape=[2, 3, 8], broadcast_dims=[2])
  bias32 = cast(bias_full, dtype=f32)
  shifted = add(scaled, bias32)
  y = cast(shifted, dtype=bf16)
  return y, mean_b, rstd
}
)";
  std::vector<Tensor> in{random_input(DType::bf16, {2, 3, 8}, 11, 2.0), random_input(DType::bf16, {8}, 12),
                         random_input(DType::bf16, {8}, 13)};
  // Shift each row so the mean is far from 0 and the centering matters.
  std::vector<double> x = values_of(in[0]);
  for (size_t i = 0; i < x.size(); ++i) x[i] += double(i / 8) - 2.5;
  in[0] = tensor_of(DType::bf16, {2, 3, 8}, x);
  std::vector<Tensor> out = run_cpu(text, in);
  ASSERT_EQ(out.size(), 3u);
  NormRows ref = layer_norm_loops(values_of(in[0]), 8, values_of(in[1]), values_of(in[2]), 1e-5);
  EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::bf16, {2, 3, 8}, ref.y)));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {2, 3, 1}, ref.mean)));
  EXPECT_TRUE(tensors_close(out[2], tensor_of(DType::f32, {2, 3, 1}, ref.rstd)));
}

TEST(EndToEndCpu, LayerNormComposite_OverTwoAxes_MatchesLoops) {
  const char* text = R"(
fusion ln(x: f32[2, 3, 4], w: f32[3, 4], b: f32[3, 4]) {
  y = layer_norm(x, w, b, normalized_ndim=2, eps=1.0e-5)
  return y
}
)";
  std::vector<Tensor> in{random_input(DType::f32, {2, 3, 4}, 21, 3.0), random_input(DType::f32, {3, 4}, 22),
                         random_input(DType::f32, {3, 4}, 23)};
  std::vector<Tensor> out = run_cpu(text, in);
  NormRows ref = layer_norm_loops(values_of(in[0]), 12, values_of(in[1]), values_of(in[2]), 1e-5);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::f32, {2, 3, 4}, ref.y)));
}

TEST(EndToEndCpu, LayerNormComposite_WithoutWeightAndBias_InBf16_MatchesLoops) {
  const char* text = R"(
fusion ln(x: bf16[3, 16]) {
  y = layer_norm(x, normalized_ndim=1, eps=1.0e-3)
  return y
}
)";
  std::vector<Tensor> in{random_input(DType::bf16, {3, 16}, 24)};
  std::vector<Tensor> out = run_cpu(text, in);
  NormRows ref = layer_norm_loops(values_of(in[0]), 16, {}, {}, 1e-3);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::bf16, {3, 16}, ref.y)));
}

TEST(EndToEndCpu, RmsNorm_Bf16_MatchesLoops) {
  const char* text = R"(
fusion rms(x: bf16[2, 3, 8], w: bf16[8]) {
  y = rms_norm(x, w, normalized_ndim=1, eps=1.0e-6)
  return y
}
)";
  std::vector<Tensor> in{random_input(DType::bf16, {2, 3, 8}, 31, 4.0), random_input(DType::bf16, {8}, 32)};
  std::vector<Tensor> out = run_cpu(text, in);
  std::vector<double> ref = rms_norm_loops(values_of(in[0]), 8, values_of(in[1]), 1e-6);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::bf16, {2, 3, 8}, ref)));
}

TEST(EndToEndCpu, RmsNorm_F32_MatchesLoops) {
  const char* text = R"(
fusion rms(x: f32[4, 5], w: f32[5]) {
  y = rms_norm(x, w, eps=1.0e-6)
  return y
}
)";
  std::vector<Tensor> in{random_input(DType::f32, {4, 5}, 33), random_input(DType::f32, {5}, 34)};
  std::vector<Tensor> out = run_cpu(text, in);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::f32, {4, 5}, rms_norm_loops(values_of(in[0]), 5, values_of(in[1]), 1e-6))));
}

TEST(EndToEndCpu, SoftmaxComposite_OverLastAndMiddleAxes_MatchesLoops) {
  const char* text = R"(
fusion sm(x: f32[2, 3, 5]) {
  last = softmax(x, dim=-1)
  middle = softmax(x, dim=1)
  return last, middle
}
)";
  std::vector<Tensor> in{random_input(DType::f32, {2, 3, 5}, 41, 5.0)};
  std::vector<Tensor> out = run_cpu(text, in);
  ASSERT_EQ(out.size(), 2u);
  std::vector<double> x = values_of(in[0]);
  EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::f32, {2, 3, 5}, softmax_loops(x, 6, 5, 1))));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {2, 3, 5}, softmax_loops(x, 2, 3, 5))));
}

TEST(EndToEndCpu, SoftmaxComposite_Bf16WithLargeValues_DoesNotOverflow) {
  const char* text = R"(
fusion sm(x: bf16[2, 8]) {
  p = softmax(x, dim=1)
  return p
}
)";
  std::vector<double> x;
  for (int i = 0; i < 16; ++i) x.push_back(1000.0 + 8.0 * (i % 8) - (i / 8) * 4.0);  // exp(1000) overflows
  std::vector<Tensor> in{tensor_of(DType::bf16, {2, 8}, x)};
  std::vector<Tensor> out = run_cpu(text, in);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::bf16, {2, 8}, softmax_loops(values_of(in[0]), 2, 8, 1))));
}

TEST(EndToEndCpu, SoftmaxInPrimitives_MatchesLoops) {
  const char* text = R"(
fusion sm(x: f32[2, 3, 5]) {
  m = max(x, dims=[2], keepdim=true)
  shifted = sub(x, m)
  e = exp(shifted)
  total = sum(e, dims=[2], keepdim=true)
  p = div(e, total)
  return p
}
)";
  std::vector<Tensor> in{random_input(DType::f32, {2, 3, 5}, 42, 3.0)};
  std::vector<Tensor> out = run_cpu(text, in);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::f32, {2, 3, 5}, softmax_loops(values_of(in[0]), 6, 5, 1))));
}

// ---- reductions ---------------------------------------------------------------------------

TEST(EndToEndCpu, ReductionsWithKeepdim_KeepSizeOneAxesAndMatchLoops) {
  const char* text = R"(
fusion r(x: f32[2, 3, 4], n: i32[2, 3]) {
  s = sum(x, dims=[1], keepdim=true)
  m = max(x, dims=[0, 2], keepdim=true)
  a = mean(x, dims=[-1], keepdim=true)
  whole = sum(x)
  count = sum(n, dims=[1], keepdim=true)
  return s, m, a, whole, count
}
)";
  std::vector<Tensor> in{random_input(DType::f32, {2, 3, 4}, 51), random_tensor(DType::i32, {2, 3}, 52)};
  std::vector<Tensor> out = run_cpu(text, in);
  ASSERT_EQ(out.size(), 5u);
  std::vector<double> x = values_of(in[0]), n = values_of(in[1]);
  auto at = [&](int i, int j, int k) { return x[size_t((i * 3 + j) * 4 + k)]; };
  std::vector<double> s(8, 0.0), m(3, -INFINITY), a(6, 0.0), count(2, 0.0);
  double whole = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        s[size_t(i * 4 + k)] += at(i, j, k);
        m[size_t(j)] = std::max(m[size_t(j)], at(i, j, k));
        a[size_t(i * 3 + j)] += at(i, j, k) / 4.0;
        whole += at(i, j, k);
      }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) count[size_t(i)] += n[size_t(i * 3 + j)];
  EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::f32, {2, 1, 4}, s)));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {1, 3, 1}, m)));
  EXPECT_TRUE(tensors_close(out[2], tensor_of(DType::f32, {2, 3, 1}, a)));
  EXPECT_TRUE(tensors_close(out[3], tensor_of(DType::f32, {}, {whole})));
  EXPECT_TRUE(tensors_close(out[4], tensor_of(DType::i64, {2, 1}, count)));  // integer sums promote to i64
}

// ---- symbolic sizes, outputs that alias -------------------------------------------------

TEST(EndToEndCpu, SymbolicSizes_OneExecutorRunsTwoSizes) {
  const char* text = R"(
fusion scale_rows(x: f32[B, N], w: f32[N]) {
  y = mul(x, w)
  s = sum(y, dims=[1])
  return y, s
}
)";
  FusionExecutor executor(parse(text), {DeviceChoice::cpu});
  for (auto [B, N] : std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {5, 7}, {2, 3}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " N=" + std::to_string(N));
    std::vector<Tensor> in{random_input(DType::f32, {B, N}, uint64_t(60 + B)), random_input(DType::f32, {N}, uint64_t(70 + N))};
    std::vector<Tensor> out = executor.run(in);
    ASSERT_EQ(out.size(), 2u);
    std::vector<double> x = values_of(in[0]), w = values_of(in[1]), y, s(size_t(B), 0.0);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < N; ++j) {
        y.push_back(x[size_t(i * N + j)] * w[size_t(j)]);
        s[size_t(i)] += y.back();
      }
    EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::f32, {B, N}, y)));
    EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {B}, s)));
  }
}

TEST(EndToEndCpu, ReturningAnInputAndOneValueTwice_GivesEveryOutput) {
  const char* text = R"(
fusion f(x: f32[2, 3]) {
  y = exp(x)
  return x, y, y
}
)";
  std::vector<Tensor> in{random_input(DType::f32, {2, 3}, 81)};
  std::vector<Tensor> out = run_cpu(text, in);
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> e = values_of(in[0]);
  for (double& v : e) v = std::exp(v);
  EXPECT_TRUE(tensors_close(out[0], in[0]));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {2, 3}, e)));
  EXPECT_TRUE(tensors_close(out[2], tensor_of(DType::f32, {2, 3}, e)));
}

TEST(EndToEndCpu, ViewsAsOutputs_ReadTheRightElements) {
  const char* text = R"(
fusion f(x: f32[2, 3]) {
  t = permute(x, dims=[1, 0])
  s = slice(t, starts=[1, 0], ends=[3, 2], steps=[1, 1])
  b = broadcast_in_dim(x, shape=[4, 2, 3], broadcast_dims=[1, 2])
  return t, s, b
}
)";
  std::vector<double> x{0, 1, 2, 3, 4, 5};
  std::vector<Tensor> out = run_cpu(text, {tensor_of(DType::f32, {2, 3}, x)});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::f32, {3, 2}, {0, 3, 1, 4, 2, 5})));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {2, 2}, {1, 4, 2, 5})));
  std::vector<double> b;
  for (int r = 0; r < 4; ++r) b.insert(b.end(), x.begin(), x.end());
  EXPECT_TRUE(tensors_close(out[2], tensor_of(DType::f32, {4, 2, 3}, b)));
}

TEST(EndToEndCpu, SliceWithEmptySteps_StepsByOne) {
  // Found by the mutation fuzzer: `steps=[]` passed shape inference as "step 1 everywhere" but
  // the kernels indexed the empty list.
  const char* text = R"(
fusion f(x: f32[2, 3]) {
  s = slice(x, starts=[0, 1], ends=[2, 3], steps=[])
  n = neg(s)
  return s, n
}
)";
  std::vector<Tensor> out = run_cpu(text, {tensor_of(DType::f32, {2, 3}, {0, 1, 2, 3, 4, 5})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::f32, {2, 2}, {1, 2, 4, 5})));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::f32, {2, 2}, {-1, -2, -4, -5})));
}

// ---- input validation ---------------------------------------------------------------------

std::string run_error(FusionExecutor& executor, const std::vector<Tensor>& inputs) {
  try {
    executor.run(inputs);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

const char* const kTwoInputs = R"(
fusion f(x: f32[B, S], y: f32[S], w: f32[3]) {
  z = add(x, y)
  return z
}
)";

// examples/cross_entropy.fusion (FUSION_FORMAT.md's example: gather of each row's target logit,
// iota + eq for the one-hot rows) against a log-softmax written here in double.
TEST(EndToEndCpu, CrossEntropyExample_LossAndGradientMatchLoops) {
  const int64_t rows = 6, vocab = 37;
  Tensor logits = random_input(DType::bf16, {rows, vocab}, 5, 3.0);
  std::vector<double> target_values{0, 36, 5, 17, 5, 30};
  Tensor target = tensor_of(DType::i64, {rows}, target_values);
  FusionExecutor executor(parse_fusion_file(testing::source_path("examples/cross_entropy.fusion")), {DeviceChoice::cpu});
  std::vector<Tensor> out = executor.run({logits, target});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].sizes(), (std::vector<int64_t>{rows}));
  ASSERT_EQ(out[1].sizes(), (std::vector<int64_t>{rows, vocab}));
  std::vector<double> x = values_of(logits), loss(static_cast<size_t>(rows)), grad(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    double top = -INFINITY, total = 0;
    for (int64_t v = 0; v < vocab; ++v) top = std::max(top, x[size_t(r * vocab + v)]);
    for (int64_t v = 0; v < vocab; ++v) total += std::exp(x[size_t(r * vocab + v)] - top);
    int64_t t = int64_t(target_values[size_t(r)]);
    loss[size_t(r)] = std::log(total) + top - x[size_t(r * vocab + t)];
    for (int64_t v = 0; v < vocab; ++v)
      grad[size_t(r * vocab + v)] = std::exp(x[size_t(r * vocab + v)] - top) / total - (v == t ? 1.0 : 0.0);
  }
  EXPECT_TRUE(tensors_close(out[0], tensor_of(DType::f32, {rows}, loss)));
  EXPECT_TRUE(tensors_close(out[1], tensor_of(DType::bf16, {rows, vocab}, grad)));
}

TEST(EndToEndCpu, CrossEntropyExample_TargetPastTheVocabulary_IsAUserErrorNamingGather) {
  FusionExecutor executor(parse_fusion_file(testing::source_path("examples/cross_entropy.fusion")), {DeviceChoice::cpu});
  Tensor logits = random_input(DType::bf16, {2, 8}, 5);
  std::string error = "no error";
  try {
    executor.run({logits, tensor_of(DType::i64, {2}, {3, 8})});
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("cross_entropy.fusion:12:8: gather: index value 8 at index position [1, 0] is out of range for axis 1"),
            std::string::npos) << error;
  EXPECT_NE(error.find("expected 0 to 7"), std::string::npos) << error;
}

TEST(EndToEndCpu, InputWithTheWrongDtype_IsAUserErrorNamingIt) {
  FusionExecutor executor(parse(kTwoInputs), {DeviceChoice::cpu});
  std::string e = run_error(executor, {Tensor::empty(DType::f64, {2, 4}), Tensor::empty(DType::f32, {4}),
                                       Tensor::empty(DType::f32, {3})});
  EXPECT_NE(e.find("input 'x': expected dtype f32 (declared f32[B, S]), found f64"), std::string::npos) << e;
}

TEST(EndToEndCpu, InputWithTheWrongRank_IsAUserErrorNamingIt) {
  FusionExecutor executor(parse(kTwoInputs), {DeviceChoice::cpu});
  std::string e = run_error(executor, {Tensor::empty(DType::f32, {2, 4}), Tensor::empty(DType::f32, {4, 1}),
                                       Tensor::empty(DType::f32, {3})});
  EXPECT_NE(e.find("input 'y': expected 1 dims"), std::string::npos) << e;
  EXPECT_NE(e.find("found 2 dims"), std::string::npos) << e;
}

TEST(EndToEndCpu, SymbolBoundTwiceWithDifferentSizes_IsAUserErrorNamingBothPlaces) {
  FusionExecutor executor(parse(kTwoInputs), {DeviceChoice::cpu});
  std::string e = run_error(executor, {Tensor::empty(DType::f32, {2, 4}), Tensor::empty(DType::f32, {5}),
                                       Tensor::empty(DType::f32, {3})});
  EXPECT_NE(e.find("input 'y', axis 0: expected S = 4 (bound by input 'x', axis 1), found 5"), std::string::npos) << e;
}

TEST(EndToEndCpu, WrongConstantSizeAndWrongInputCount_AreUserErrors) {
  FusionExecutor executor(parse(kTwoInputs), {DeviceChoice::cpu});
  std::string e = run_error(executor, {Tensor::empty(DType::f32, {2, 4}), Tensor::empty(DType::f32, {4}),
                                       Tensor::empty(DType::f32, {2})});
  EXPECT_NE(e.find("input 'w', axis 0: expected size 3"), std::string::npos) << e;
  e = run_error(executor, {Tensor::empty(DType::f32, {2, 4})});
  EXPECT_NE(e.find("expected 3 inputs (x, y, w), found 1"), std::string::npos) << e;
}

TEST(EndToEndCpu, AfterARejectedRun_TheExecutorStillRuns) {
  FusionExecutor executor(parse(kTwoInputs), {DeviceChoice::cpu});
  EXPECT_NE(run_error(executor, {Tensor::empty(DType::f32, {2, 4}), Tensor::empty(DType::f32, {5}),
                                 Tensor::empty(DType::f32, {3})}),
            "(no error)");
  std::vector<Tensor> in{random_input(DType::f32, {2, 4}, 91), random_input(DType::f32, {4}, 92),
                         random_input(DType::f32, {3}, 93)};
  std::vector<Tensor> out = executor.run(in);
  std::vector<double> x = values_of(in[0]), y = values_of(in[1]), z;
  for (size_t i = 0; i < x.size(); ++i) z.push_back(x[i] + y[i % 4]);
  EXPECT_TRUE(tensors_close(out.at(0), tensor_of(DType::f32, {2, 4}, z)));
}

// ---- the examples -------------------------------------------------------------------------

std::vector<std::string> example_files() {
  std::vector<std::string> files;
  for (auto& entry : std::filesystem::directory_iterator(testing::source_path("examples")))
    if (entry.path().extension() == ".fusion") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

bool gathers(const Fusion& fusion) {
  return std::any_of(fusion.ops().begin(), fusion.ops().end(), [](auto& op) { return op->kind == OpKind::gather; });
}

TEST(EndToEndCpu, EveryExample_RunsWithRandomInputsAndGivesFiniteOutputsOfTheDeclaredShapes) {
  std::vector<std::string> files = example_files();
  ASSERT_GE(files.size(), 5u);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    std::unique_ptr<Fusion> fusion = parse_fusion_file(file);
    Bindings sizes;  // a different size per symbol: an axis mixed up with another cannot hide
    // random integer inputs are 0..9 (run_inputs.h), so a fusion that gathers with them needs
    // axes of at least 10
    int64_t next = gathers(*fusion) ? 11 : 3;
    for (const std::string& symbol : fusion->input_symbols()) sizes[symbol] = (next += 2) - 2;
    std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes, 17);
    // a second moment (Adam's v) is never negative: the step takes its square root
    if (file.ends_with("adam_step.fusion"))
      for (size_t i = 0; i < inputs.size(); ++i)
        if (fusion->inputs()[i]->name == "v")
          for (int64_t k = 0; k < inputs[i].numel(); ++k)
            store_double(inputs[i].data(), DType::f32, k, std::fabs(load_as_double(inputs[i].data(), DType::f32, k)));
    if (auto mesh = fusion_mesh(*fusion); mesh && mesh->size() > 1) {
      // A sharded example needs one process per device (tests/multidevice runs them under
      // mpirun); alone, it is a user error that says how to launch it, never an unsharded run.
      FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
      std::string error = "no error";
      try {
        executor.run(inputs);
      } catch (const UserError& e) {
        error = e.what();
      }
      EXPECT_NE(error.find("mpirun -n " + std::to_string(mesh->size())), std::string::npos) << error;
      continue;
    }
    FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
    std::vector<Tensor> outputs = executor.run(inputs);
    const Fusion& f = executor.fusion();
    ASSERT_EQ(outputs.size(), f.outputs().size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::vector<int64_t> declared;
      for (const Extent& e : f.outputs()[i]->shape()) declared.push_back(e.evaluate(sizes).value_or(-1));
      EXPECT_EQ(outputs[i].sizes(), declared) << "output " << i;
      EXPECT_EQ(outputs[i].dtype(), f.outputs()[i]->dtype()) << "output " << i;
      std::vector<double> v = values_of(outputs[i]);
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double d) { return std::isfinite(d); })) << "output " << i;
    }
  }
}

}  // namespace
}  // namespace alloy
