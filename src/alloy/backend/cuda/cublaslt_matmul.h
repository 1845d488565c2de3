// Matmul through cuBLASLt with the epilogue folded in (bias, ReLU, GELU, the backward dReLU/dGELU
// with their aux buffer, bias gradients). Everything is described in ROW-MAJOR terms; the
// translation to cuBLASLt's column-major view happens inside. Accumulation is always f32 (f32
// inputs use true f32, not TF32). A case cuBLASLt cannot do is a refusal, never an error, so the
// caller can fall back to generated code or the CPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/segment/schedulers/matmul_epilogue.h"
#include "alloy/tensor/dtype.h"

namespace alloy::cuda {

// What happens to the product P = alpha * op(A) @ op(B) + beta * C before it is stored in D (an
// EpilogueKind, the one list the segmenter matches and cuBLASLt runs).
// "bias" is a vector of length n added to every row of P. "aux" is an extra [m, n] matrix
// (row stride aux_ld): the forward *_aux epilogues write the pre-activation into it; the backward
// ones read it. For ReLU the aux matrix is a bit mask (aux_ld in bits).
bool epilogue_uses_bias(EpilogueKind e);   // reads or writes the bias vector
bool epilogue_writes_bias(EpilogueKind e);  // the bias vector is a gradient output
bool epilogue_uses_aux(EpilogueKind e);
bool epilogue_aux_is_mask(EpilogueKind e);  // ReLU bit mask rather than a matrix of D's type

// D[b] = epilogue(alpha * op(A[b]) @ op(B[b]) + beta * C[b]) for b < batch. Row-major throughout:
//   A is stored [m, k] (trans_a = false) or [k, m] (trans_a = true), rows lda elements apart;
//   B is stored [k, n] or, with trans_b, [n, k] (a linear layer's weight [out, in]);
//   C and D are [m, n], rows ldc / ldd apart. 0 for an ld means packed.
// Batch strides are in elements; 0 repeats the same A, B or C for every batch (not allowed for D).
struct MatmulDesc {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  DType a_dtype = DType::f32, b_dtype = DType::f32, c_dtype = DType::f32, d_dtype = DType::f32;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  EpilogueKind epilogue = EpilogueKind::none;
  std::optional<DType> bias_dtype;  // none: D's dtype (f32 is also accepted for a 16-bit D)
  int64_t bias_batch_stride = 0;
  std::optional<DType> aux_dtype;   // GELU aux; none or D's dtype (ignored for ReLU masks)
  int64_t aux_ld = 0;             // elements (bits for ReLU masks); 0 = the smallest legal
  int64_t aux_batch_stride = 0;
  // The SMs the GEMM should use (cuBLASLt's CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), leaving the rest
  // to kernels running beside it; 0: every SM.
  int sm_count_target = 0;

  bool operator==(const MatmulDesc&) const = default;
  std::string str() const;  // for refusal messages and dumps
};

struct MatmulArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // read only when beta != 0; may then alias d
  void* d = nullptr;
  void* bias = nullptr;     // input for bias epilogues, output for *_bgrad*
  void* aux = nullptr;      // output for *_aux, input for dgelu / drelu
  float alpha = 1.0f, beta = 0.0f;
};

// Why cuBLASLt was not used; the caller falls back and may show `why` in --dump=segments.
struct MatmulRefusal {
  std::string why;
};

// Checks the description alone (no pointers, no GPU needed): dtypes, shapes, leading dimensions,
// epilogue rules. Returns the packed defaults filled in through `resolved` when it accepts.
std::optional<MatmulRefusal> check_matmul(const MatmulDesc& desc, MatmulDesc* resolved = nullptr);

// Runs the matmul on `stream`, or returns why not (check_matmul's reasons, misaligned pointers,
// no cuBLASLt algorithm). Errors that are not refusals (CUDA unavailable, out of memory, bugs) throw.
[[nodiscard]] std::optional<MatmulRefusal> run_matmul(const MatmulDesc& desc, const MatmulArgs& args,
                                                      const Stream& stream);

}  // namespace alloy::cuda
