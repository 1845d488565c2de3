// Fusions that run as generated kernels (pointwise, reductions, normalizations), each a
// specification of GPU behaviour: gpu_end_to_end_test runs them on the GPU, and
// emulated_kernels_test runs the same kernels on the CPU (in CI, without a GPU); both compare
// with the CPU reference.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "alloy/ir/extent.h"

namespace alloy::testing {

struct KernelCase {
  std::string name;  // a test name
  std::string text;  // the fusion, or
  std::string file;  // a file under the source tree holding it
  Bindings sizes;
  // The CPU emulation runs a thread per CUDA thread: smaller sizes where the GPU's are slow there
  // (empty: the same).
  Bindings emulated_sizes = {};
};

// Log-sum-exp over rows of width W, the f32 result: the planning and emulation tests of odd widths.
inline const char* const kLogSumExpRows = R"(fusion f(x: bf16[R, W]) {
  x32 = cast(x, dtype=f32)
  m = max(x32, dims=[1], keepdim=true)
  d = sub(x32, m)
  e = exp(d)
  s = sum(e, dims=[1])
  l = log(s)
  ms = squeeze(m, dims=[1])
  y = add(l, ms)
  return y
})";

// The layer norm backward (dx from the row sums of g = dy * w and g * xhat, beside dw and db, the
// column sums of dy * xhat and dy) and the RMSNorm backward (no mean, no db) in dtype T, rows of
// width D: one inner_outer kernel each. The 1/D of the row means is a literal (0.001), the same
// on the GPU and the reference whatever D is.
inline std::string layer_norm_backward(const std::string& T) {
  return "fusion ln_bwd(dy: " + T + "[N, D], x: " + T + "[N, D], mean: f32[N], rstd: f32[N], w: " + T + R"([D]) {
  dy32 = cast(dy, dtype=f32)
  x32 = cast(x, dtype=f32)
  w32 = cast(w, dtype=f32)
  mean2 = unsqueeze(mean, dim=1)
  rstd2 = unsqueeze(rstd, dim=1)
  xc = sub(x32, mean2)
  xhat = mul(xc, rstd2)
  g = mul(dy32, w32)
  a = sum(g, dims=[1], keepdim=true)
  gx = mul(g, xhat)
  b = sum(gx, dims=[1], keepdim=true)
  ga = mul(a, 0.001)
  gb = mul(b, 0.001)
  t1 = mul(xhat, gb)
  t2 = sub(g, ga)
  t3 = sub(t2, t1)
  dx32 = mul(t3, rstd2)
  dx = cast(dx32, dtype=)" + T + R"()
  dyx = mul(dy32, xhat)
  dw32 = sum(dyx, dims=[0])
  db32 = sum(dy32, dims=[0])
  dw = cast(dw32, dtype=)" + T + R"()
  db = cast(db32, dtype=)" + T + R"()
  return dx, dw, db
})";
}
inline std::string rms_norm_backward(const std::string& T) {
  return "fusion rms_bwd(dy: " + T + "[N, D], x: " + T + "[N, D], rstd: f32[N], w: " + T + R"([D]) {
  dy32 = cast(dy, dtype=f32)
  x32 = cast(x, dtype=f32)
  w32 = cast(w, dtype=f32)
  rstd2 = unsqueeze(rstd, dim=1)
  xhat = mul(x32, rstd2)
  g = mul(dy32, w32)
  gx = mul(g, xhat)
  b = sum(gx, dims=[1], keepdim=true)
  gb = mul(b, 0.001)
  t1 = mul(xhat, gb)
  t3 = sub(g, t1)
  dx32 = mul(t3, rstd2)
  dx = cast(dx32, dtype=)" + T + R"()
  dyx = mul(dy32, xhat)
  dw32 = sum(dyx, dims=[0])
  dw = cast(dw32, dtype=)" + T + R"()
  return dx, dw
})";
}
// The AdamW step of examples/adam_step.fusion once for each parameter of `shapes` (its own p, g, m
// and v of `dtype`, the shared scalars lr, wd, bc1 and bc2), each written in place: an optimizer
// step over a model's parameters, one multi-tensor launch on CUDA. `two_groups`: two parameter
// groups, as PyTorch's usual AdamW setup: the matrices read lr_d and wd_d, the other parameters
// (biases, norm weights) lr_n and wd_n; the inputs end lr_d, wd_d, lr_n, wd_n, bc1, bc2.
inline std::string multi_adam_fusion(const std::vector<std::vector<int64_t>>& shapes, const std::string& dtype = "f32", bool two_groups = false) {
  std::string params, body, results;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string type = dtype + "[", n = std::to_string(i);
    for (size_t d = 0; d < shapes[i].size(); ++d) type += (d ? ", " : "") + std::to_string(shapes[i][d]);
    type += "]";
    for (const char* t : {"p", "g", "m", "v"}) params += std::string(t) + n + ": " + type + ", ";
    auto line = [&](const std::string& text) { body += "  " + text + "\n"; };
    line("m_kept" + n + " = mul(m" + n + ", 0.9)");
    line("g_part" + n + " = mul(g" + n + ", 0.1)");
    line("m2_" + n + " = add(m_kept" + n + ", g_part" + n + ")");
    line("g_sq" + n + " = mul(g" + n + ", g" + n + ")");
    line("v_kept" + n + " = mul(v" + n + ", 0.999)");
    line("g_sq_part" + n + " = mul(g_sq" + n + ", 0.001)");
    line("v2_" + n + " = add(v_kept" + n + ", g_sq_part" + n + ")");
    line("m_hat" + n + " = div(m2_" + n + ", bc1)");
    line("v_hat" + n + " = div(v2_" + n + ", bc2)");
    line("root" + n + " = sqrt(v_hat" + n + ")");
    line("denom" + n + " = add(root" + n + ", 1e-8)");
    line("ratio" + n + " = div(m_hat" + n + ", denom" + n + ")");
    // two groups: the matrices decay (lr_d, wd_d), the biases and norm weights not (lr_n, wd_n)
    const std::string lr = two_groups ? (shapes[i].size() >= 2 ? "lr_d" : "lr_n") : "lr";
    const std::string wd = two_groups ? (shapes[i].size() >= 2 ? "wd_d" : "wd_n") : "wd";
    line("step" + n + " = mul(ratio" + n + ", " + lr + ")");
    line("lr_wd" + n + " = mul(" + lr + ", " + wd + ")");
    line("keep" + n + " = sub(1.0, lr_wd" + n + ")");
    line("p_decayed" + n + " = mul(p" + n + ", keep" + n + ")");
    line("p2_" + n + " = sub(p_decayed" + n + ", step" + n + ")");
    results += std::string(i ? ", " : "") + "p2_" + n + " -> p" + n + ", m2_" + n + " -> m" + n + ", v2_" + n + " -> v" + n;
  }
  const std::string scalars = two_groups ? "lr_d: f32, wd_d: f32, lr_n: f32, wd_n: f32, " : "lr: f32, wd: f32, ";
  return "fusion multi_adam(" + params + scalars + "bc1: f32, bc2: f32) {\n" + body + "  return " + results + "\n}\n";
}

// The cross-entropy's logits gradient from the saved log-sum-exp and the loss gradient:
// (softmax - one-hot of the target) * g, rows of a vocabulary V beside per-row operands.
inline const char* const kCrossEntropyGradient = R"(fusion f(logits: bf16[T, V], target: i64[T], lse: f32[T], g: f32[T]) {
  x = cast(logits, dtype=f32)
  lse2 = unsqueeze(lse, dim=1)
  z = sub(x, lse2)
  p = exp(z)
  tg = unsqueeze(target, dim=1)
  ids = iota(length=V, dtype=i64)
  hit = eq(ids, tg)
  onehot = cast(hit, dtype=f32)
  d = sub(p, onehot)
  g2 = unsqueeze(g, dim=1)
  dg = mul(d, g2)
  dx = cast(dg, dtype=bf16)
  return dx
})";

// A bf16 vector to scalars in one grid reduction: its sum (bf16), the sum of its squares in f32
// and the root of that (a gradient norm), max, min and mean.
inline const char* const kLongVectorToScalars = R"(fusion f(x: bf16[N]) {
  s = sum(x)
  x32 = cast(x, dtype=f32)
  sq = mul(x32, x32)
  ss = sum(sq)
  norm = sqrt(ss)
  m = max(x)
  n = min(x)
  a = mean(x)
  return s, ss, norm, m, n, a
})";

// GPT-2 small's parameter list as nanoGPT orders it (148 tensors) at width c, a vocabulary and a
// context: the embeddings, then per layer ln_1, attention (c_attn, c_proj), ln_2 and the MLP
// (c_fc, c_proj), then ln_f. gpt2_shapes(768, 50257, 1024) is the model's own.
inline std::vector<std::vector<int64_t>> gpt2_shapes(int64_t c, int64_t vocab, int64_t context) {
  std::vector<std::vector<int64_t>> shapes = {{vocab, c}, {context, c}};
  for (int layer = 0; layer < 12; ++layer)
    for (auto shape : std::vector<std::vector<int64_t>>{{c}, {c}, {3 * c, c}, {3 * c}, {c, c}, {c}, {c}, {c}, {4 * c, c}, {4 * c}, {c, 4 * c}, {c}})
      shapes.push_back(shape);
  shapes.push_back({c});
  shapes.push_back({c});
  return shapes;
}

// How GoogleTest names a case in test listings (instead of dumping its bytes).
inline void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.name; }

inline const std::vector<KernelCase>& kernel_cases() {
  static const std::vector<KernelCase> cases = {
      {"PointwiseChainWithBroadcasts", R"(fusion f(a: bf16[N, 64], b: bf16[64], c: f32[N, 1]) {
  m = mul(a, b)
  s = add(m, c)
  g = gelu(s, approximate="tanh")
  return g, s
})", "", {{"N", 37}}},
      {"PointwiseOddSizesAndAllUnaryOps", R"(fusion f(x: f32[N]) {
  a = abs(x)
  na = neg(a)
  e = exp(na)
  a1 = add(a, 1.0)
  l = log(a1)
  a2 = add(a, 0.5)
  r = rsqrt(a2)
  t = tanh(x)
  s = sigmoid(x)
  q = sqrt(a)
  u = silu(x)
  v = erf(x)
  a3 = add(a, 2.0)
  w = reciprocal(a3)
  g = gelu(x)
  z = relu(x)
  return e, l, r, t, s, q, u, v, w, g, z
})", "", {{"N", 1001}}},
      {"BinaryComparisonsWhereAndIntegers", R"(fusion f(x: f32[8, 33], y: f32[8, 33], i: i32[8, 33]) {
  m = gt(x, y)
  w = where(m, x, y)
  mx = maximum(x, y)
  mn = minimum(x, 0.0)
  ax = abs(x)
  p = pow(ax, 1.5)
  d = div(i, 3)
  ii = mul(i, 7)
  eqs = eq(i, 4)
  c = cast(x, dtype=i32)
  h = cast(x, dtype=f16)
  b = cast(x, dtype=bf16)
  return w, mx, mn, p, d, ii, eqs, c, h, b
})", "", {}},
      {"InnerReductionsWithKeepdim", R"(fusion f(x: bf16[B, 100, 257]) {
  s = sum(x, dims=[2])
  m = max(x, dims=[-1], keepdim=true)
  n = min(x, dims=[1, 2])
  a = mean(x, dims=[2], keepdim=true)
  return s, m, n, a
})", "", {{"B", 3}}, {{"B", 1}}},
      {"OuterReduction", R"(fusion f(x: f32[300, 65]) {
  s = sum(x, dims=[0])
  return s
})", "", {}},
      {"ColumnReductionsWithElementOutputs", R"(fusion f(g: bf16[T, H], x: bf16[T, H], b: bf16[H]) {
  xb = add(x, b)
  d = gelu_backward(g, xb, approximate="tanh")
  db = sum(d, dims=[0])
  v, m = var_mean(x, dims=[0], correction=1)
  mx = max(g, dims=[0], keepdim=true)
  mn = min(d, dims=[0])
  a = mean(x, dims=[0])
  return d, db, v, m, mx, mn, a
})", "", {{"T", 3000}, {"H", 136}}, {{"T", 600}, {"H", 136}}},
      {"ColumnReductionsOddShapesAndTypes_1", R"(fusion f(x: f32[A, B, C], i: i32[A, B, C], y: f64[A, B, C]) {
  s = sum(x, dims=[0, 1])
  k = sum(i, dims=[0])
  v, m = var_mean(y, dims=[0, 1], correction=0)
  p = gt(x, 0.5)
  c = sum(p, dims=[0, 1])
  return s, k, v, m, c
})", "", {{"A", 37}, {"B", 29}, {"C", 65}}},
      {"ColumnReductionsOddShapesAndTypes_2", R"(fusion g(x: bf16[R, N]) {
  s = sum(x, dims=[1])
  m = max(x, dims=[1])
  v, mu = var_mean(x, dims=[1])
  return s, m, v, mu
})", "", {{"R", 5}, {"N", 100003}}},
      {"FullReductionOfLargeTensor", R"(fusion f(x: f32[N]) {
  s = sum(x)
  return s
})", "", {{"N", 100000}}},
      // Grid reductions (few long rows split over blocks, the last block of a row combining the
      // partials): a long bf16 vector to scalars (its sum, a gradient norm, max, min, mean), an odd
      // length; rows of 2.5M; var_mean of values near 1000
      {"GridReductionOfALongBf16Vector", kLongVectorToScalars, "", {{"N", 10000003}}, {{"N", 200003}}},
      {"GridReductionOfFewLongRows", R"(fusion f(x: bf16[R, N]) {
  s = sum(x, dims=[1])
  m = max(x, dims=[1], keepdim=true)
  v, mu = var_mean(x, dims=[1], correction=1)
  return s, m, v, mu
})", "", {{"R", 4}, {"N", 2500001}}, {{"R", 3}, {"N", 100003}}},
      {"GridVarMeanOfValuesNear1000", R"(fusion f(x: f32[N]) {
  y = add(x, 1000.0)
  v, m = var_mean(y, dims=[0], correction=0)
  s = sum(y)
  return v, m, s
})", "", {{"N", 10000019}}, {{"N", 100003}}},
      {"VarMeanWithCorrection", R"(fusion f(x: f32[16, 1000]) {
  v, m = var_mean(x, dims=[1], correction=1)
  return v, m
})", "", {}},
      {"TracedLayerNormExample", "", "examples/layer_norm.fusion", {}},
      {"CompositeNormalizations", R"(fusion f(x: bf16[N, D], w: bf16[D], b: bf16[D]) {
  y = layer_norm(x, w, b, normalized_ndim=1, eps=1e-5)
  s = softmax(x, dim=1)
  r = rms_norm(x, w, normalized_ndim=1, eps=1e-6)
  return y, s, r
})", "", {{"N", 64}, {"D", 4096}}, {{"N", 8}, {"D", 4096}}},
      {"SoftmaxOverANonLastAxis", R"(fusion f(x: f32[4, 50, 6]) {
  s = softmax(x, dim=1)
  return s
})", "", {}},
      {"NormalizationOverTwoAxesAndHugeRows_1", R"(fusion f(x: f32[2, 8, 100]) {
  y = layer_norm(x, normalized_ndim=2)
  return y
})", "", {}},
      {"NormalizationOverTwoAxesAndHugeRows_2", R"(fusion g(x: bf16[3, 70000]) {
  y = softmax(x, dim=-1)
  return y
})", "", {}},
      {"ViewsOfInputsAndOutputs", R"(fusion f(x: f32[6, 8], y: f32[8, 6]) {
  t = permute(y, dims=[1, 0])
  s = add(x, t)
  sl = slice(x, starts=[1, 0], ends=[5, 8], steps=[2, 3])
  e = exp(sl)
  r = reshape(s, shape=[48])
  u = unsqueeze(r, dim=0)
  return u, e
})", "", {}},
      {"ShortRowsRunAWarpPerRow_1", R"(fusion f(x: bf16[R, 96], w: bf16[96]) {
  y = layer_norm(x, w, normalized_ndim=1)
  s = softmax(x, dim=1)
  v, m = var_mean(x, dims=[1], correction=1)
  mx = max(x, dims=[1])
  return y, s, v, m, mx
})", "", {{"R", 1003}}, {{"R", 203}}},
      {"ShortRowsRunAWarpPerRow_2", R"(fusion g(x: f32[R, 33]) {
  v, m = var_mean(x, dims=[1])
  r = rms_norm(x, normalized_ndim=1)
  return v, m, r
})", "", {{"R", 517}}},
      // tile transposes: an operand contiguous along another axis than the outputs is staged through
      // shared memory; sizes on and off the tile (64) and the vector width, several axes around
      {"TransposedOperandBf16", R"(fusion f(x: bf16[M, N], z: bf16[N, M]) {
  zt = permute(z, dims=[1, 0])
  s = mul(zt, 2.0)
  y = add(x, s)
  return y
})", "", {{"M", 192}, {"N", 256}}, {{"M", 128}, {"N", 64}}},
      {"TransposedOperandOffTheTileF32", R"(fusion f(x: f32[M, N], z: f32[N, M], b: f32[N]) {
  zt = permute(z, dims=[1, 0])
  s = mul(zt, x)
  y = add(s, b)
  return y, s
})", "", {{"M", 100}, {"N", 133}}, {{"M", 36}, {"N", 68}}},
      {"TransposedOperandsAroundBatchAxes", R"(fusion f(x: bf16[B, M, C, N], z: bf16[N, B, C, M], w: f32[M, 1, N]) {
  zt = permute(z, dims=[1, 3, 2, 0])
  e = exp(zt)
  y = mul(x, e)
  t = add(y, w)
  return t
})", "", {{"B", 3}, {"M", 72}, {"C", 2}, {"N", 40}}, {{"B", 2}, {"M", 24}, {"C", 2}, {"N", 20}}},
      {"TransposedComputedOutput", R"(fusion f(x: f32[M, N], z: f16[M, N]) {
  e = tanh(x)
  et = permute(e, dims=[1, 0])
  zt = permute(z, dims=[1, 0])
  y = sub(et, zt)
  return y
})", "", {{"M", 65}, {"N", 130}}, {{"M", 33}, {"N", 17}}},
      // odd widths and totals keep vectorized bodies: each row's (or the whole range's) vectors start
      // at its first aligned element, the elements before and after them are computed one at a time
      {"LogSumExpOfOddWidthRows", R"(fusion f(x: bf16[R, W]) {
  x32 = cast(x, dtype=f32)
  m = max(x32, dims=[1], keepdim=true)
  d = sub(x32, m)
  e = exp(d)
  s = sum(e, dims=[1])
  l = log(s)
  ms = squeeze(m, dims=[1])
  y = add(l, ms)
  o = cast(y, dtype=bf16)
  return o
})", "", {{"R", 40}, {"W", 50257}}, {{"R", 5}, {"W", 1001}}},
      {"NormalizationsOfOddWidthRows_1", R"(fusion f(x: bf16[R, W], w: bf16[W], b: bf16[W]) {
  y = layer_norm(x, w, b, normalized_ndim=1, eps=1e-5)
  x32 = cast(x, dtype=f32)
  s = softmax(x32, dim=1)
  v, m = var_mean(x, dims=[1], correction=1)
  return y, s, v, m
})", "", {{"R", 300}, {"W", 1001}}, {{"R", 70}, {"W", 1001}}},
      {"NormalizationsOfOddWidthRows_2", R"(fusion f(x: bf16[R, W], w: bf16[W], b: bf16[W]) {
  y = layer_norm(x, w, b, normalized_ndim=1, eps=1e-5)
  s = softmax(x, dim=1)
  v, m = var_mean(x, dims=[1], correction=1)
  return y, s, v, m
})", "", {{"R", 24}, {"W", 50257}}, {{"R", 3}, {"W", 5003}}},
      {"PointwiseOddTotal", R"(fusion f(a: bf16[N], b: bf16[N], c: bf16[N]) {
  m = mul(a, b)
  s = add(m, c)
  y = gelu(s)
  return y
})", "", {{"N", 10000003}}, {{"N", 1003}}},
      {"PointwiseOddTotalWithAMisalignedOperand", R"(fusion f(x: f32[1003], y: bf16[1000], r: bf16[40, 25]) {
  s = slice(x, starts=[3], ends=[1003])
  e = exp(y)
  z = mul(s, e)
  rr = reshape(r, shape=[1000])
  t = add(z, rr)
  return t
})", "", {}},
      // reductions over a non-contiguous axis: a kernel a pass (column kernels for the statistics,
      // then a pointwise kernel, a tile transpose where the outputs are contiguous along the rows)
      {"LayerNormOverANonContiguousAxis", R"(fusion f(x: bf16[C, R], w: bf16[C], b: bf16[C]) {
  xt = permute(x, dims=[1, 0])
  y = layer_norm(xt, w, b, normalized_ndim=1, eps=1e-5)
  v, m = var_mean(xt, dims=[1], correction=1)
  return y, v, m
})", "", {{"R", 300}, {"C", 200}}, {{"R", 70}, {"C", 100}}},
      {"SoftmaxOverTheOuterAxis", R"(fusion f(x: f32[N, D], y: bf16[N, D]) {
  s = softmax(x, dim=0)
  yt = cast(y, dtype=f32)
  l = add(s, yt)
  mx = max(l, dims=[0])
  return s, mx
})", "", {{"N", 500}, {"D", 200}}, {{"N", 90}, {"D", 40}}},
      // cat runs inside generated kernels: a cat of values read from memory is a leaf with one
      // source per operand (a cat of computed values starts a new kernel)
      {"CatRopeExampleInBf16", "", "examples/rope.fusion", {{"B", 2}, {"S", 37}}, {{"B", 1}, {"S", 5}}},
      // ReLU bit masks (bitmask kernels): odd widths, batched leading axes, a pointwise producer,
      // a permuted input (packed first), and a saved mask whose padding bits are random
      {"ReluMaskAndItsBackwardOddWidths", R"(fusion f(x: bf16[B, 3, N], dy: bf16[B, 3, N], saved: i32[B, 3, W]) {
  b = add(x, 0.25)
  a = relu(b)
  m = relu_mask(b)
  d = relu_backward_mask(dy, m)
  e = relu_backward_mask(dy, saved)
  return a, m, d, e
})", "", {{"B", 2}, {"N", 100}, {"W", 4}}},
      {"ReluMaskOfWidths1And33AndAPermutedInput", R"(fusion f(x: f32[5, 1], y: f32[2, 4, 33], z: f32[33, 6]) {
  mx = relu_mask(x)
  my = relu_mask(y)
  dy = relu_backward_mask(y, my)
  p = permute(z, dims=[1, 0])
  mz = relu_mask(p)
  return mx, my, dy, mz
})", "", {}},
      // different symbols meeting in a broadcast and a contraction-free chain: one extent per axis
      // for the kernel (unify_extents), not a CPU fallback
      {"DifferentSymbolsKnownEqual", R"(fusion f(x: f32[N, 4], y: f32[M, 4], z: bf16[K, 1]) {
  s = add(x, y)
  t = mul(s, z)
  u = sum(t, dims=[0])
  return t, u
})", "", {{"N", 37}, {"M", 37}, {"K", 37}}},
      // Python slicing of symbolic axes: from 1, to -1, from -3 past the end (clamped), a step
      // (each a size derived once N is bound; a shift difference feeds a kernel)
      {"SlicesOfASymbolicAxisAsPythonSlices", R"(fusion f(x: f32[B, N]) {
  a = slice(x, starts=[0, 1], ends=[2147483647, 2147483647])
  b = slice(x, starts=[0, 0], ends=[2147483647, -1])
  c = sub(a, b)
  d = slice(x, starts=[0, -3], ends=[2147483647, 100])
  e = slice(x, starts=[0, 0], ends=[2147483647, 10], steps=[1, 2])
  g = exp(e)
  return c, d, g
})", "", {{"B", 3}, {"N", 37}}},
      // a saved mask read through a slice of a wider one: rows 12 words apart, from word 4
      {"ReluBackwardOfASlicedMask", R"(fusion f(dy: bf16[40, 256], big: i32[40, 12]) {
  m = slice(big, starts=[0, 4], ends=[40, 12])
  d = relu_backward_mask(dy, m)
  return d
})", "", {}},
      // a saved mask read through a transpose: its words 40 apart along a row (the kernel once
      // assumed packed words and read word k of row r at r + k)
      {"ReluBackwardOfATransposedMask", R"(fusion f(dy: bf16[40, 256], mt: i32[8, 40]) {
  m = permute(mt, dims=[1, 0])
  d = relu_backward_mask(dy, m)
  return d
})", "", {}},
      {"ReluMaskOfWideRows", R"(fusion f(h: bf16[T, 3072], g: bf16[T, 3072]) {
  m = relu_mask(h)
  d = relu_backward_mask(g, m)
  return m, d
})", "", {{"T", 512}}, {{"T", 3}}},
      // rows of an odd width beside per-row and per-column operands: vectors along each row from
      // its first aligned element, the edge elements by the slots past a row's vectors; widths of
      // fewer elements than two vectors (scalar), of a few, and rows shorter than the block
      {"PointwiseOddRowsBesidePerRowOperands", R"(fusion f(x: bf16[R, W], r: f32[R], b: bf16[W]) {
  x32 = cast(x, dtype=f32)
  r2 = unsqueeze(r, dim=1)
  s = mul(x32, r2)
  t = add(s, b)
  y = cast(t, dtype=bf16)
  return y, t
})", "", {{"R", 67}, {"W", 1001}}, {{"R", 5}, {"W", 37}}},
      {"CrossEntropyGradientOverAnOddVocabulary", kCrossEntropyGradient, "", {{"T", 33}, {"V", 5003}}, {{"T", 3}, {"V", 1001}}},
      // SwiGLU over a fused gate/up projection: two halves of one input's rows at the edge (issue
      // 27); a half width the vector divides, and one it does not
      {"SwiGluOverSlicesOfOneInput", R"(fusion f(gu: bf16[T, 2208]) {
  gate = slice(gu, starts=[0, 0], ends=[2147483647, 1104])
  up = slice(gu, starts=[0, 1104], ends=[2147483647, 2208])
  s = silu(gate)
  y = mul(s, up)
  return y
})", "", {{"T", 300}}, {{"T", 5}}},
      {"SwiGluOverSlicesOfFixedSizes", R"(fusion f(gu: bf16[6, 2208]) {
  gate = slice(gu, starts=[0, 0], ends=[6, 1104])
  up = slice(gu, starts=[0, 1104], ends=[6, 2208])
  s = silu(gate)
  y = mul(s, up)
  return y
})", "", {}},
      {"SwiGluOverSlicesOfOddHalves", R"(fusion f(gu: f32[T, 2002]) {
  gate = slice(gu, starts=[0, 0], ends=[2147483647, 1001])
  up = slice(gu, starts=[0, 1001], ends=[2147483647, 2002])
  s = silu(gate)
  y = mul(s, up)
  return y
})", "", {{"T", 300}}, {{"T", 5}}},
      // cat operands computed from host-side values by chains of one-input pointwise ops, folded
      // into the cat's load: neg; mul then exp; a cast from f32 (a source of another dtype,
      // element by element); and two operands that are not folded: one also stored, one read twice
      {"CatOfPointwiseChains", R"(fusion f(x: bf16[B, 8, 64], y: f32[B, 8, 32]) {
  x1 = slice(x, starts=[0, 0, 0], ends=[2147483647, 8, 32])
  x2 = slice(x, starts=[0, 0, 32], ends=[2147483647, 8, 64])
  n = neg(x2)
  h = mul(x1, 0.5)
  e = exp(h)
  c = cat(n, e, dim=2)
  yc = cast(y, dtype=bf16)
  d = cat(yc, x1, dim=-1)
  s = add(c, d)
  m = mul(x2, 3.0)
  c2 = cat(m, x1, dim=2)
  g = sub(x1, 1.0)
  c3 = cat(g, g, dim=2)
  r = add(s, c2)
  q = mul(r, c3)
  return q, m
})", "", {{"B", 5}}},
      {"CatRopeInF32", R"(fusion rope(x: f32[B, S, 4, 64], cos: f32[S, 1, 64], sin: f32[S, 1, 64]) {
  x1 = slice(x, starts=[0, 0, 0, 0], ends=[2147483647, 2147483647, 4, 32])
  x2 = slice(x, starts=[0, 0, 0, 32], ends=[2147483647, 2147483647, 4, 64])
  n = neg(x2)
  r = cat(n, x1, dim=-1)
  a = mul(x, cos)
  b = mul(r, sin)
  y = add(a, b)
  return y
})", "", {{"B", 3}, {"S", 19}}},
      {"CatAlongAnOuterAxisWithScalars", R"(fusion f(x: f32[5, 3, 8], y: f32[2, 3, 8], z: bf16[7, 3, 8], alpha: f32, w: f32[N, 6, 7]) {
  c = cat(x, y, dim=0)
  s = mul(c, alpha)
  t = add(s, z)
  m = cat(y, x, dim=-3)
  e = exp(m)
  wt = permute(w, dims=[2, 1, 0])
  k = cat(wt, wt, dim=1)
  return t, e, k
})", "", {{"N", 5}}},
      {"CatOfThreeSourcesAndACopy", R"(fusion f(a: bf16[R, 16], b: bf16[R, 8], c: bf16[R, 40], d: bf16[R, 64]) {
  k = cat(a, b, c, dim=1)
  g = gelu(k, approximate="tanh")
  h = add(g, d)
  return h, k
})", "", {{"R", 33}}},
      {"CatBoundariesOffTheVectorWidth", R"(fusion f(x: bf16[R, 16], c: bf16[R, 8], d: f16[R, 1], e: f16[R, 2]) {
  a = slice(x, starts=[0, 0], ends=[2147483647, 3])
  b = slice(x, starts=[0, 8], ends=[2147483647, 13])
  k = cat(a, b, dim=1)
  y = mul(k, c)
  j = cat(d, e, d, d, e, dim=-1)
  n = neg(j)
  return y, n
})", "", {{"R", 45}}},
      {"CatOfSingleElementSources", R"(fusion f(d: f16[R, 1], f: f16[R, 1], e: bf16[R, 8]) {
  g = cat(d, f, f, d, f, d, d, f, dim=1)
  m = mul(g, e)
  return m
})", "", {{"R", 45}}},
      {"CatOfBroadcasts", R"(fusion f(a: f32[1, 3], b: f32[1, 5], x: f32[N, 8], u: bf16[4], w: bf16[N, 4]) {
  k = cat(a, b, dim=1)
  y = add(x, k)
  ue = expand(u, shape=[N, 4])
  v = cat(ue, w, dim=1)
  z = mul(v, 2.0)
  return y, z
})", "", {{"N", 29}}},
      {"CatOfMixedDtypes", R"(fusion f(i: i32[N, 4], h: f32[N, 4], b: bf16[N, 8], p: bf16[N, 2], q: f16[N, 2]) {
  m = cat(i, h, dim=1)
  s = sub(m, b)
  r = cat(p, q, dim=-1)
  return s, r
})", "", {{"N", 29}}},
      {"CatFeedingReductions", R"(fusion f(a: f32[R, 96], b: f32[R, 160], p: bf16[T, 3], q: bf16[T, 5], r: bf16[U, 8], s: bf16[T, 8]) {
  k = cat(a, b, dim=1)
  rs = sum(k, dims=[1])
  sm = softmax(k, dim=1)
  pq = cat(p, q, dim=1)
  cs = sum(pq, dims=[0])
  ts = cat(s, r, dim=0)
  vs, ms = var_mean(ts, dims=[0])
  return rs, sm, cs, vs, ms
})", "", {{"R", 70}, {"T", 300}, {"U", 44}}, {{"R", 70}, {"T", 120}, {"U", 44}}},
      {"CatLeavesComputedOncePerRow", R"(fusion f(x: f32[40, 24], a: f32[5, 1], b: f32[35, 1], y: bf16[T, 8], c: bf16[3], d: bf16[5]) {
  m = cat(a, b, dim=0)
  xm = sub(x, m)
  rs = sum(xm, dims=[1])
  w = cat(c, d, dim=0)
  yw = mul(y, w)
  cs = sum(yw, dims=[0])
  return rs, cs
})", "", {{"T", 500}}},
      // in-place outputs written by their kernel into the inputs' memory (segment/in_place.h): the
      // AdamW step, a total off the vectors (edge elements); the results land in p, m and v
      {"AdamStepExampleInPlace", "", "examples/adam_step.fusion", {{"N", 1000003}}, {{"N", 1001}}},
      {"SgdMomentumExampleInPlace", "", "examples/sgd_momentum.fusion", {{"N", 4099}}},
      // gather and iota in generated kernels (random integer inputs are 0..9, so every gathered axis
      // is 10 long or longer; at 10 the indices 0 and size - 1 are both drawn): along the last axis
      // with an i64 index, and a second gather of the same index from a bf16 input (two gathers in
      // one kernel)
      {"GatherAlongTheLastAxis", R"(fusion f(x: f32[R, 10], i: i64[R, 5], y: bf16[R, 12], w: f32[R, 5]) {
  g = gather(x, i, dim=1)
  h = gather(y, i, dim=1)
  s = add(g, h)
  z = mul(s, w)
  return z, g
})", "", {{"R", 37}}},
      // along a middle axis, an i32 index shorter than the bf16 input on the other axes, and along
      // the first axis through a chain of one-input pointwise ops (recomputed on the loaded element);
      // both in vectors along the contiguous last axis
      {"GatherAlongMiddleAndFirstAxes", R"(fusion f(x: bf16[3, 10, 40], i: i32[3, 7, 32], w: f32[10, N], j: i64[M, N]) {
  g = gather(x, i, dim=1)
  h = add(g, 1.0)
  wh = mul(w, 0.5)
  we = exp(wh)
  k = gather(we, j, dim=0)
  return h, k
})", "", {{"N", 32}, {"M", 13}}},
      // a gather per element inside row reductions: its value summed, and softmax of it
      {"GatherInsideRowReductions", R"(fusion f(x: f32[R, 40], i: i64[R, K]) {
  g = gather(x, i, dim=1)
  s = sum(g, dims=[1])
  p = softmax(g, dim=1)
  return s, p
})", "", {{"R", 9}, {"K", 301}}},
      // iota's positions: one-hot rows (i64), floating and i32 iotas, a strided slice of one, and
      // an iota stored on its own
      {"IotaOneHotRowsAndViews", R"(fusion f(t: i64[T], x: f32[T, V], z: i32[T, 13]) {
  ids = iota(length=V, dtype=i64)
  tt = unsqueeze(t, dim=1)
  hit = eq(ids, tt)
  oh = cast(hit, dtype=f32)
  fi = iota(length=V, dtype=f32)
  w = add(fi, x)
  y = sub(w, oh)
  k = iota(length=29, dtype=i32)
  sl = slice(k, starts=[3], ends=[29], steps=[2])
  q = mul(sl, z)
  return y, q, ids
})", "", {{"T", 11}, {"V", 29}}},
      // examples/cross_entropy.fusion: the target logit gathered once a row next to the row's
      // log-sum-exp, the one-hot rows from iota; one kernel
      {"CrossEntropyForwardAndBackward", "", "examples/cross_entropy.fusion", {{"T", 64}, {"V", 1000}}, {{"T", 5}, {"V", 1001}}},
      // the loss alone over a vocabulary long enough for the streaming log-sum-exp, an i32 target
      // row and column reductions of the same values in one inner_outer kernel (odd widths: vectors
      // of one; 3-D rows reduced over [0, 1] with a mean and a max of the columns)
      {"LayerNormBackwardBf16", layer_norm_backward("bf16"), "", {{"N", 1000}, {"D", 4096}}, {{"N", 60}, {"D", 1000}}},
      {"LayerNormBackwardF32OddWidth", layer_norm_backward("f32"), "", {{"N", 777}, {"D", 4099}}, {{"N", 37}, {"D", 771}}},
      {"RmsNormBackwardBf16", rms_norm_backward("bf16"), "", {{"N", 4096}, {"D", 768}}, {{"N", 70}, {"D", 768}}},
      {"RowAndColumnReductionsOf3dRows", R"(fusion f(x: bf16[B, S, D], w: bf16[D]) {
  x32 = cast(x, dtype=f32)
  w32 = cast(w, dtype=f32)
  y = mul(x32, w32)
  s = sum(y, dims=[2], keepdim=true)
  z = sub(y, s)
  zb = cast(z, dtype=bf16)
  c = mean(z, dims=[0, 1])
  m = max(x32, dims=[0, 1])
  cm = add(c, m)
  return zb, cm, s
})", "", {{"B", 3}, {"S", 500}, {"D", 1024}}, {{"B", 3}, {"S", 7}, {"D", 256}}},
      {"CrossEntropyLossOverLongRows", R"(fusion ce(logits: bf16[T, V], target: i32[T]) {
  x = cast(logits, dtype=f32)
  m = max(x, dims=[1], keepdim=true)
  z = sub(x, m)
  e = exp(z)
  s = sum(e, dims=[1], keepdim=true)
  ls = log(s)
  lse = add(ls, m)
  t = unsqueeze(target, dim=1)
  xt = gather(x, t, dim=1)
  l = sub(lse, xt)
  loss = squeeze(l, dims=[1])
  return loss
})", "", {{"T", 8}, {"V", 50257}}, {{"T", 3}, {"V", 20003}}},
      // reductions that reduce nothing (a 0-dim value, axes of size 1): the value itself, a
      // variance of 0 or NaN (held-out checks: these generated kernels that did not compile)
      {"ReductionsOverNothing", R"(fusion r(z: f32[], x: f32[N, 1, 3], w: f32[3]) {
  a = sum(z)
  b = max(z, dims=[])
  s = sum(x, dims=[1])
  k = mean(x, dims=[1], keepdim=true)
  y = add(k, w)
  v, m = var_mean(x, dims=[1], correction=1)
  v0, m0 = var_mean(x, dims=[-2], correction=0, keepdim=true)
  return a, b, s, y, v, m, v0, m0
})", "", {{"N", 1000}}, {{"N", 5}}},
  };
  return cases;
}

}  // namespace alloy::testing
