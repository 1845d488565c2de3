// matmul_epilogue: which ops around a matmul or linear one cuBLASLt call computes in its epilogue,
// so the product is never written out and read back by a separate kernel. An analysis, not a
// rewrite: the CUDA segmenter asks it about each matmul and makes one "matmul" segment of the
// matmul and the ops it takes; the others go on to generated kernels as before.
//
// Forward, on P = matmul(a, b) (b 2-D) or linear(x, w[, bias]) (w 2-D); each step optional, in order:
//   cast(P, dtype=f32)               widen a 16-bit product, only when a cast back follows
//   add(., v) / add(v, .)            bias: v varies only along the last (output-feature) axis: a
//                                    [N] vector broadcast like NumPy, or through broadcast_in_dim,
//                                    expand or unsqueeze (those views join the segment); or
//                                    linear's own bias
//   relu(.) | gelu(., approximate="tanh")
//                                    when the pre-activation is used elsewhere too (training),
//                                    GELU also writes it (gelu_aux*) instead of recomputing it;
//                                    ReLU's pre-activation may be read only by relu_mask(pre),
//                                    which the GEMM then writes as its bit mask (relu_aux*), when
//                                    the output features are a multiple of 128 (cuBLASLt's mask
//                                    rows are a multiple of 128 bits apart; ours are packed)
//   cast(., dtype=<P's dtype>)       the output cast: the 16-bit result is written directly
// Backward:
//   gelu_backward(P, pre, approximate="tanh") [+ sum(., dims=<all but the last>)]
//                                    -> dgelu / dgelu_bgrad, reading pre as the aux matrix
//   relu_backward_mask(P, mask) [+ sum(., dims=<all but the last>)]
//                                    -> drelu / drelu_bgrad, reading the relu_mask bit mask as the
//                                    aux matrix (output features a multiple of 128, as above)
//   matmul(permute(dy), x) beside sum(dy, dims=[0]) (the weight gradient and bias gradient)
//                                    -> bgrad_a; the sum of op(B) over k -> bgrad_b
// The bias-gradient kinds (bgrad_a, bgrad_b, dgelu_bgrad, drelu_bgrad) are off unless ALLOY_DISABLE_EPILOGUES says otherwise: on an H100 the
// generated column-reduction kernels beat cuBLASLt's BGRAD epilogues (docs/architecture.md).
// A permute feeding the matmul and used nowhere else joins the segment (a host-side view).
//
// Not taken, each with a reason (shown by `--dump segments`): activations cuBLASLt does not have
// (silu, sigmoid, ...), gelu with approximate="none", an add of a full tensor, a second bias,
// relu_backward (cuBLASLt's dReLU reads a bit mask: relu_backward_mask takes one), relu with its
// pre-activation used by other ops than relu_mask, a mask of output features that are not a
// multiple of 128 (the mask then comes from a generated bitmask kernel), an f32 result from a 16-bit product (the fusion rounds the product first), GELU and
// dGELU on f32 results (cuBLASLt's GELU is not accurate to f32 rounding), ...
//
// Precondition: a valid fusion; the matmul's output is bf16, f16 or f32.
// Postcondition: the values between the taken ops are used nowhere else (except the
// pre-activation, which becomes the aux output); what the match reads from outside (operands,
// bias, aux) does not depend on what it computes, so the match can run as one unit.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

// The epilogue, in IR terms; the CUDA backend maps it onto cuBLASLt's (cublaslt_matmul.h).
enum class EpilogueKind : uint8_t {
  none,
  bias,           // D = P + bias
  relu,           // D = relu(P)
  relu_bias,      // D = relu(P + bias)
  gelu,           // D = gelu_tanh(P)
  gelu_bias,      // D = gelu_tanh(P + bias)
  gelu_aux,       // D = gelu_tanh(P), aux = P
  gelu_aux_bias,  // D = gelu_tanh(P + bias), aux = P + bias
  relu_aux,       // D = relu(P), aux = relu_mask(P)
  relu_aux_bias,  // D = relu(P + bias), aux = relu_mask(P + bias)
  dgelu,          // D = P * gelu_tanh'(aux)
  dgelu_bgrad,    // D = P * gelu_tanh'(aux), bias = sum of D over every axis but the last
  drelu,          // D = relu_backward_mask(P, aux)
  drelu_bgrad,    // D = relu_backward_mask(P, aux), bias = sum of D over every axis but the last
  bgrad_a,        // D = P, bias[i] = sum_k op(A)[i, k]
  bgrad_b,        // D = P, bias[j] = sum_k op(B)[k, j]
};
std::string_view epilogue_kind_name(EpilogueKind kind);

// An op that could have joined the matmul and did not, and why.
struct NotTaken {
  const Op* op = nullptr;
  std::string why;
};

struct EpilogueMatch {
  const Op* matmul = nullptr;
  EpilogueKind kind = EpilogueKind::none;
  std::vector<const Op*> ops;            // the matmul and every op taken, in definition order
  std::vector<const Op*> operand_views;  // permutes of the operands, made on the host first
  std::vector<const Op*> epilogue_ops;   // the rest taken besides the matmul, in definition order
  Value* product = nullptr;  // P: the matmul's own output
  Value* result = nullptr;   // D: what the GEMM writes (P when nothing follows)
  Value* bias = nullptr;     // the bias vector read (P + bias) or the bias gradient written (*bgrad*)
  Value* aux = nullptr;      // the pre-activation written (gelu_aux*) or read (dgelu*); the
                             // relu_mask bit mask written (relu_aux*) or read (drelu*)
  std::vector<NotTaken> not_taken;

  std::string note() const;  // for Segment::note: "epilogue: gelu_aux_bias (bias: b, aux: h, result: g)"
};

// What the epilogue of `matmul` (a matmul or linear op of `fusion`) takes. Ops in `taken`
// belong to earlier matches and are left alone.
EpilogueMatch match_matmul_epilogue(const Fusion& fusion, const Op& matmul, const std::set<const Op*>& taken = {});

}  // namespace alloy
