// cuBLASLt matmuls against a double-precision host loop over the same row-major description:
// every transpose combination, batches, padded leading dimensions, and the epilogues. The
// description checks (refusals) need no GPU; the rest skips without one.
#include <gtest/gtest.h>

#include "test_util.h"

#if !ALLOY_HAVE_CUDA
TEST(CublasLtMatmul, NeedsTheCudaToolkit) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

#include <cmath>
#include <random>

#include "alloy/backend/cuda/cublaslt_matmul.h"

namespace alloy::cuda {
namespace {

Tensor random_cpu(DType dtype, int64_t numel, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(dtype, {numel});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < numel; ++i) store_double(t.data(), dtype, i, dist(rng));
  return t;
}

double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

double gelu_tanh_grad(double x) {
  double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

// One problem: host operands laid out as `d` says (with the packed defaults filled in).
struct Problem {
  MatmulDesc d;
  Tensor a, b, c, bias, aux;  // CPU, flat
  float alpha = 1.0f, beta = 0.0f;

  explicit Problem(const MatmulDesc& desc, uint32_t seed = 1) {
    auto refusal = check_matmul(desc, &d);
    EXPECT_FALSE(refusal) << refusal->why;
    int64_t rows_a = d.trans_a ? d.k : d.m, rows_b = d.trans_b ? d.n : d.k;
    int64_t batches = d.batch;
    a = random_cpu(d.a_dtype, (batches - 1) * d.stride_a + rows_a * d.lda, seed);
    b = random_cpu(d.b_dtype, (batches - 1) * d.stride_b + rows_b * d.ldb, seed + 1);
    c = random_cpu(d.c_dtype, (batches - 1) * d.stride_c + d.m * d.ldc, seed + 2);
  }
  double at_a(int64_t batch, int64_t i, int64_t kk) const {
    int64_t idx = batch * d.stride_a + (d.trans_a ? kk * d.lda + i : i * d.lda + kk);
    return load_as_double(a.data(), d.a_dtype, idx);
  }
  double at_b(int64_t batch, int64_t kk, int64_t j) const {
    int64_t idx = batch * d.stride_b + (d.trans_b ? j * d.ldb + kk : kk * d.ldb + j);
    return load_as_double(b.data(), d.b_dtype, idx);
  }
  // alpha * op(A) op(B) + beta * C, before the epilogue
  double product(int64_t batch, int64_t i, int64_t j) const {
    double sum = 0;
    for (int64_t kk = 0; kk < d.k; ++kk) sum += at_a(batch, i, kk) * at_b(batch, kk, j);
    double out = alpha * sum;
    if (beta != 0.0f) out += beta * load_as_double(c.data(), d.c_dtype, batch * d.stride_c + i * d.ldc + j);
    return out;
  }
};

// D as [batch * m, n] (packed rows) after `epilogue(x, j)`.
template <class Epilogue>
Tensor expected_d(const Problem& p, Epilogue epilogue) {
  Tensor out = Tensor::empty(p.d.d_dtype, {p.d.batch * p.d.m, p.d.n});
  for (int64_t bi = 0; bi < p.d.batch; ++bi)
    for (int64_t i = 0; i < p.d.m; ++i)
      for (int64_t j = 0; j < p.d.n; ++j)
        store_double(out.data(), p.d.d_dtype, (bi * p.d.m + i) * p.d.n + j, epilogue(p.product(bi, i, j), bi, i, j));
  return out;
}

// Runs on the GPU and returns D packed as [batch * m, n]; aux and bias come back through `p`.
Tensor run_on_gpu(Problem& p, bool separate_c = false) {
  Stream stream = Stream::create(0);
  Tensor da = to_device(p.a, stream), db = to_device(p.b, stream);
  Tensor dc = separate_c ? to_device(p.c, stream) : Tensor();
  int64_t d_elems = (p.d.batch - 1) * p.d.stride_d + p.d.m * p.d.ldd;
  Tensor dd = cuda_empty(p.d.d_dtype, {d_elems}, stream);
  fill_poison(dd, stream);
  Tensor dbias = p.bias.defined() ? to_device(p.bias, stream) : Tensor();
  Tensor daux = p.aux.defined() ? to_device(p.aux, stream) : Tensor();
  MatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = separate_c ? dc.data() : nullptr;
  args.d = dd.data();
  args.bias = dbias.defined() ? dbias.data() : nullptr;
  args.aux = daux.defined() ? daux.data() : nullptr;
  args.alpha = p.alpha;
  args.beta = p.beta;
  auto refusal = run_matmul(p.d, args, stream);
  EXPECT_FALSE(refusal) << refusal->why;
  if (dbias.defined()) p.bias = to_host(dbias, stream);
  if (daux.defined()) p.aux = to_host(daux, stream);
  Tensor host = to_host(dd, stream);
  // gather the [m, n] blocks out of the (possibly padded, strided) D
  Tensor packed = Tensor::empty(p.d.d_dtype, {p.d.batch * p.d.m, p.d.n});
  for (int64_t bi = 0; bi < p.d.batch; ++bi)
    for (int64_t i = 0; i < p.d.m; ++i)
      for (int64_t j = 0; j < p.d.n; ++j)
        store_double(packed.data(), p.d.d_dtype, (bi * p.d.m + i) * p.d.n + j,
                     load_as_double(host.data(), p.d.d_dtype, bi * p.d.stride_d + i * p.d.ldd + j));
  return packed;
}

auto identity = [](double x, int64_t, int64_t, int64_t) { return x; };

MatmulDesc desc_of(int64_t m, int64_t n, int64_t k, DType in, DType out, bool ta = false, bool tb = false) {
  MatmulDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  d.a_dtype = d.b_dtype = in;
  d.c_dtype = d.d_dtype = out;
  d.trans_a = ta;
  d.trans_b = tb;
  return d;
}

// ---- description checks: no GPU needed ----

TEST(CublasLtMatmul, Check_FillsPackedLeadingDimensions) {
  MatmulDesc resolved;
  ASSERT_FALSE(check_matmul(desc_of(5, 7, 3, DType::f32, DType::f32, true, true), &resolved));
  EXPECT_EQ(resolved.lda, 5);  // A stored [k, m]
  EXPECT_EQ(resolved.ldb, 3);  // B stored [n, k]
  EXPECT_EQ(resolved.ldd, 7);
  EXPECT_EQ(resolved.ldc, 7);
}

// An SM count target (the GEMMs of pipelined loops, ALLOY_OVERLAP_GEMM_SMS) is part of what the
// description says and of its plan's identity; it changes nothing the check accepts.
TEST(CublasLtMatmul, SmCountTarget_IsPartOfTheDescription) {
  MatmulDesc all = desc_of(64, 64, 64, DType::bf16, DType::bf16), fewer = all;
  fewer.sm_count_target = 100;
  EXPECT_FALSE(check_matmul(fewer));
  EXPECT_NE(all, fewer);
  EXPECT_EQ(all.str().find("sms="), std::string::npos) << all.str();
  EXPECT_NE(fewer.str().find(" sms=100"), std::string::npos) << fewer.str();
}

TEST(CublasLtMatmul, Check_RefusesWhatCublasLtCannotDo) {
  MatmulDesc mixed = desc_of(8, 8, 8, DType::bf16, DType::f32);
  mixed.b_dtype = DType::f16;
  EXPECT_TRUE(check_matmul(mixed));
  EXPECT_TRUE(check_matmul(desc_of(8, 8, 8, DType::f32, DType::bf16)));  // f32 in, bf16 out
  EXPECT_TRUE(check_matmul(desc_of(8, 8, 8, DType::i32, DType::i32)));
  EXPECT_TRUE(check_matmul(desc_of(8, 0, 8, DType::f32, DType::f32)));
  MatmulDesc short_ld = desc_of(8, 8, 8, DType::f32, DType::f32);
  short_ld.lda = 4;
  EXPECT_TRUE(check_matmul(short_ld));
  MatmulDesc overlapping = desc_of(8, 8, 8, DType::f32, DType::f32);
  overlapping.batch = 2;
  overlapping.stride_d = 8;
  EXPECT_TRUE(check_matmul(overlapping));
}

TEST(CublasLtMatmul, Check_EnforcesTheDocumentedAuxLeadingDimensions) {
  MatmulDesc gelu_aux = desc_of(16, 20, 8, DType::bf16, DType::bf16);
  gelu_aux.epilogue = EpilogueKind::gelu_aux_bias;
  gelu_aux.aux_ld = 20;  // not a multiple of 8
  auto refusal = check_matmul(gelu_aux);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->why.find("aux_ld"), std::string::npos) << refusal->why;
  gelu_aux.aux_ld = 24;
  EXPECT_FALSE(check_matmul(gelu_aux));
  gelu_aux.aux_ld = 0;  // smallest legal
  MatmulDesc resolved;
  ASSERT_FALSE(check_matmul(gelu_aux, &resolved));
  EXPECT_EQ(resolved.aux_ld, 24);

  MatmulDesc relu_mask = desc_of(16, 20, 8, DType::bf16, DType::bf16);
  relu_mask.epilogue = EpilogueKind::drelu;
  relu_mask.aux_ld = 64;  // bits: must be a multiple of 128
  EXPECT_TRUE(check_matmul(relu_mask));
  relu_mask.aux_ld = 0;
  ASSERT_FALSE(check_matmul(relu_mask, &resolved));
  EXPECT_EQ(resolved.aux_ld, 128);

  MatmulDesc wrong_aux_type = gelu_aux;
  wrong_aux_type.aux_dtype = DType::f32;
  EXPECT_TRUE(check_matmul(wrong_aux_type));
}

// ---- on the GPU ----

TEST(CublasLtMatmul, MisalignedBiasPointer_IsRefused) {
  ALLOY_REQUIRE_GPU();
  MatmulDesc d = desc_of(16, 16, 16, DType::bf16, DType::bf16);
  d.epilogue = EpilogueKind::bias;
  alignas(256) static char fake[64];  // never dereferenced: the refusal comes before any launch
  MatmulArgs args;
  args.a = args.b = fake;
  args.d = fake;
  args.bias = fake + 2;
  auto refusal = run_matmul(d, args, Stream::current(0));
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->why.find("bias"), std::string::npos) << refusal->why;
}

TEST(CublasLtMatmul, F32_EveryTransposeCombination_MatchesTheHostLoop) {
  ALLOY_REQUIRE_GPU();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Problem p(desc_of(37, 29, 53, DType::f32, DType::f32, ta, tb), 3);
      EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected_d(p, identity))) << "trans_a " << ta << " trans_b " << tb;
    }
}

TEST(CublasLtMatmul, Bf16_WithBf16AndF32Outputs_MatchesTheHostLoop) {
  ALLOY_REQUIRE_GPU();
  for (DType out : {DType::bf16, DType::f32}) {
    Problem p(desc_of(64, 48, 96, DType::bf16, out, false, true), 5);
    EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected_d(p, identity))) << dtype_name(out);
  }
  Problem h(desc_of(32, 40, 24, DType::f16, DType::f16, true, false), 6);
  EXPECT_TRUE(testing::tensors_close(run_on_gpu(h), expected_d(h, identity)));
}

TEST(CublasLtMatmul, PaddedLeadingDimensionsAndBetaWithC) {
  ALLOY_REQUIRE_GPU();
  MatmulDesc d = desc_of(20, 24, 16, DType::f32, DType::f32);
  d.lda = 19;
  d.ldb = 31;
  d.ldc = 27;
  d.ldd = 33;
  Problem p(d, 7);
  p.alpha = 0.5f;
  p.beta = 2.0f;
  EXPECT_TRUE(testing::tensors_close(run_on_gpu(p, /*separate_c=*/true), expected_d(p, identity)));
}

// The own block's GEMM of a pipelined GEMM -> reduce-scatter (issue 25): a linear layer whose
// landed addend is C (beta = 1, a separate buffer) and whose bias comes after it: D = A B^T + C +
// bias, f32 and bf16 (C of D's dtype), timed candidates (the autotune reruns it: C is not D).
TEST(CublasLtMatmul, BiasEpilogueWithBetaOneAndASeparateC_AddsCThenTheBias) {
  ALLOY_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16}) {
    MatmulDesc d = desc_of(48, 40, 64, t, t, false, true);
    d.epilogue = EpilogueKind::bias;
    Problem p(d, 21);
    p.beta = 1.0f;
    p.bias = random_cpu(t, d.n, 23, -2.0, 2.0);
    Tensor expected = expected_d(p, [&](double x, int64_t, int64_t, int64_t j) { return x + load_as_double(p.bias.data(), t, j); });
    for (int run = 0; run < 2; ++run)  // the first run times the candidates, the second reuses the plan
      EXPECT_TRUE(testing::tensors_close(run_on_gpu(p, /*separate_c=*/true), expected)) << dtype_name(t) << " run " << run;
  }
}

TEST(CublasLtMatmul, StridedBatches_IncludingABroadcastOperand) {
  ALLOY_REQUIRE_GPU();
  MatmulDesc d = desc_of(12, 20, 8, DType::bf16, DType::f32, false, true);
  d.batch = 3;
  d.stride_a = 12 * 8;
  d.stride_b = 0;  // one weight for every batch
  d.stride_c = d.stride_d = 12 * 20;
  Problem p(d, 9);
  EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected_d(p, identity)));
}

TEST(CublasLtMatmul, BiasReluAndGeluEpilogues_AddTheBiasPerColumn) {
  ALLOY_REQUIRE_GPU();
  struct Case {
    EpilogueKind epilogue;
    double (*apply)(double);
  };
  Case cases[] = {
      {EpilogueKind::bias, [](double x) { return x; }},
      {EpilogueKind::relu_bias, [](double x) { return x > 0 ? x : 0.0; }},
      {EpilogueKind::gelu_bias, gelu_tanh},
  };
  for (DType t : {DType::f32, DType::bf16})
    for (const Case& c : cases) {
      MatmulDesc d = desc_of(40, 32, 64, t, t, false, true);  // a linear layer: x [m, k], w [n, k]
      d.epilogue = c.epilogue;
      Problem p(d, 11);
      p.bias = random_cpu(t, d.n, 13, -2.0, 2.0);
      Tensor expected = expected_d(p, [&](double x, int64_t, int64_t, int64_t j) {
        return c.apply(x + load_as_double(p.bias.data(), t, j));
      });
      // scale 10 for f32: cuBLASLt's GELU may use an approximate tanh; erf-GELU would still fail
      EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected, t == DType::f32 ? 10.0 : 1.0))
          << dtype_name(t) << " " << epilogue_kind_name(c.epilogue);
    }
}

TEST(CublasLtMatmul, GeluAuxBias_StoresThePreActivationInAux) {
  ALLOY_REQUIRE_GPU();
  MatmulDesc d = desc_of(24, 36, 32, DType::bf16, DType::bf16, false, true);
  d.epilogue = EpilogueKind::gelu_aux_bias;
  d.aux_ld = 40;
  Problem p(d, 15);
  p.bias = random_cpu(DType::bf16, d.n, 17);
  p.aux = random_cpu(DType::bf16, d.m * d.aux_ld, 19);
  auto pre = [&](double x, int64_t, int64_t, int64_t j) { return x + load_as_double(p.bias.data(), DType::bf16, j); };
  Tensor expected = expected_d(p, [&](double x, int64_t b, int64_t i, int64_t j) { return gelu_tanh(pre(x, b, i, j)); });
  Tensor expected_aux = expected_d(p, pre);
  EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected));
  Tensor aux = p.aux.as_strided({d.m, d.n}, {d.aux_ld, 1}, 0);
  EXPECT_TRUE(testing::tensors_close(aux, expected_aux));
}

TEST(CublasLtMatmul, BgradA_IsTheLinearBiasGradient) {
  ALLOY_REQUIRE_GPU();
  // weight gradient of a linear layer: dW [out, in] = dY^T X, db = sum over tokens of dY
  const int64_t tokens = 64, out = 48, in = 32;
  MatmulDesc d = desc_of(out, in, tokens, DType::bf16, DType::f32, /*trans_a=*/true, /*trans_b=*/false);
  d.epilogue = EpilogueKind::bgrad_a;
  d.bias_dtype = DType::f32;
  Problem p(d, 21);
  p.bias = Tensor::empty(DType::f32, {out});
  Tensor expected_bias = Tensor::empty(DType::f32, {out});
  for (int64_t i = 0; i < out; ++i) {
    double sum = 0;
    for (int64_t t = 0; t < tokens; ++t) sum += p.at_a(0, i, t);
    expected_bias.data_as<float>()[i] = float(sum);
  }
  EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected_d(p, identity)));
  EXPECT_TRUE(testing::tensors_close(p.bias, expected_bias));
}

TEST(CublasLtMatmul, DgeluBgrad_MultipliesByTheGeluDerivativeAndSumsColumns) {
  ALLOY_REQUIRE_GPU();
  // input gradient through a GELU: dH = (dY W) * gelu'(pre), dbias = sum over rows of dH
  const int64_t tokens = 32, hidden = 64, out = 48;
  MatmulDesc d = desc_of(tokens, hidden, out, DType::bf16, DType::bf16);
  d.epilogue = EpilogueKind::dgelu_bgrad;
  Problem p(d, 23);
  p.aux = random_cpu(DType::bf16, tokens * hidden, 25, -3.0, 3.0);  // pre-activation, aux_ld = hidden
  p.bias = Tensor::empty(DType::bf16, {hidden});
  Tensor expected = expected_d(p, [&](double x, int64_t, int64_t i, int64_t j) {
    return x * gelu_tanh_grad(load_as_double(p.aux.data(), DType::bf16, i * hidden + j));
  });
  Tensor expected_bias = Tensor::empty(DType::bf16, {hidden});
  for (int64_t j = 0; j < hidden; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < tokens; ++i) sum += load_as_double(expected.data(), DType::bf16, i * hidden + j);
    store_double(expected_bias.data(), DType::bf16, j, sum);
  }
  EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected));
  EXPECT_TRUE(testing::tensors_close(p.bias, expected_bias, 2.0));
}

TEST(CublasLtMatmul, RepeatedRuns_ReuseThePlanAndStayCorrect) {
  ALLOY_REQUIRE_GPU();
  Problem p(desc_of(33, 17, 9, DType::f32, DType::f32), 27);
  Tensor expected = expected_d(p, identity);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(testing::tensors_close(run_on_gpu(p), expected));
}

}  // namespace
}  // namespace alloy::cuda

#endif  // ALLOY_HAVE_CUDA
