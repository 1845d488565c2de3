// cuBLASLt matmul: checks, the row-major -> column-major translation, and a plan cache (matmul
// descriptor, four layouts, an algorithm) keyed by everything but the pointers. The algorithm is
// the fastest of the heuristic's first candidates, timed on the first run of each plan.
//
// The swap trick. cuBLASLt is column-major; a row-major [r, c] matrix with row stride ld is, in
// the same memory, a column-major [c, r] matrix with leading dimension ld: its transpose. So the
// row-major product D = op(A) op(B) ([m, n]) is computed as the column-major product
//   D^T = op(B)^T op(A)^T    ([n, m] = [n, k] x [k, m])
// i.e. cuBLASLt's "A" is our B, its "B" is our A, its (m, n) is our (n, m), and each operand keeps
// its own transpose flag. Consequences for the epilogue: cuBLASLt's bias runs along the rows of
// its D, which are our columns, so bias[j] is added to every row of our D (what linear needs);
// its BGRADA (reduce its A = our B) is our bgrad_b and its BGRADB is our bgrad_a; its aux matrix
// has its D's shape, which is our [m, n] row-major with row stride aux_ld.
#include "alloy/backend/cuda/cublaslt_matmul.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>
#include <unordered_map>

#include "alloy/backend/cuda/cuda_runtime.h"
#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  std::string text = std::string(cublasLtGetStatusName(status)) + ": " + cublasLtGetStatusString(status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) user_error_at("cuBLASLt", "out of memory (", expr, ")");
  if (status == CUBLAS_STATUS_NOT_INITIALIZED) user_error_at("cuBLASLt", "CUDA unavailable: ", text);
  internal_error(file, ":", line, ": ", expr, " failed: ", text);
}

#define ALLOY_CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                            \
    cublasStatus_t alloy_cublas_status_ = (expr);                                                 \
    if (alloy_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                            \
      throw_cublas_error(alloy_cublas_status_, #expr, __FILE__, __LINE__);                        \
  } while (0)

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f64: return CUDA_R_64F;
    default: internal_error("cuda_type: ", dtype_name(t), " is not a cuBLASLt matrix type");
  }
}

cublasLtEpilogue_t cublas_epilogue(EpilogueKind e) {
  switch (e) {
    case EpilogueKind::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case EpilogueKind::bias: return CUBLASLT_EPILOGUE_BIAS;
    case EpilogueKind::relu: return CUBLASLT_EPILOGUE_RELU;
    case EpilogueKind::relu_bias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case EpilogueKind::relu_aux: return CUBLASLT_EPILOGUE_RELU_AUX;
    case EpilogueKind::relu_aux_bias: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case EpilogueKind::gelu: return CUBLASLT_EPILOGUE_GELU;
    case EpilogueKind::gelu_bias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case EpilogueKind::gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case EpilogueKind::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case EpilogueKind::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case EpilogueKind::dgelu_bgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case EpilogueKind::drelu: return CUBLASLT_EPILOGUE_DRELU;
    case EpilogueKind::drelu_bgrad: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case EpilogueKind::bgrad_a: return CUBLASLT_EPILOGUE_BGRADB;  // swapped operands, see above
    case EpilogueKind::bgrad_b: return CUBLASLT_EPILOGUE_BGRADA;
  }
  internal_error("bad EpilogueKind ", int(e));
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The largest power of two (up to 256) dividing the address; cuBLASLt's heuristics pick kernels
// by the operands' alignment, which defaults to an assumed 256.
uint32_t alignment_of(const void* ptr) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

bool is_mma_type(DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32; }

std::optional<MatmulRefusal> refuse(const MatmulDesc& desc, const std::string& why) {
  return MatmulRefusal{"cuBLASLt matmul " + desc.str() + ": " + why};
}

std::optional<MatmulRefusal> check_dtypes(const MatmulDesc& d) {
  if (!is_mma_type(d.a_dtype) || d.a_dtype != d.b_dtype)
    return refuse(d, "A and B must both be bf16, f16 or f32");
  if (d.c_dtype != d.d_dtype) return refuse(d, "C and D must have the same dtype");
  bool d_ok = d.d_dtype == d.a_dtype || (d.d_dtype == DType::f32 && d.a_dtype != DType::f32);
  if (!d_ok) return refuse(d, "D must have A's dtype or be f32");
  if (epilogue_uses_bias(d.epilogue) && d.bias_dtype && *d.bias_dtype != d.d_dtype && *d.bias_dtype != DType::f32)
    return refuse(d, "the bias must have D's dtype or be f32");
  if (epilogue_uses_aux(d.epilogue) && !epilogue_aux_is_mask(d.epilogue) && d.aux_dtype && *d.aux_dtype != d.d_dtype)
    return refuse(d, "the GELU aux matrix must have D's dtype");
  return std::nullopt;
}

std::optional<MatmulRefusal> check_epilogue(const MatmulDesc& d) {
  if (!epilogue_uses_aux(d.epilogue)) return std::nullopt;
  // Documented by cuBLASLt (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD / _BATCH_STRIDE).
  int64_t multiple = epilogue_aux_is_mask(d.epilogue) ? 128 : 8;
  if (d.aux_ld % multiple != 0 || d.aux_ld < d.n)
    return refuse(d, "aux_ld " + std::to_string(d.aux_ld) + " must be a multiple of " + std::to_string(multiple) +
                         " and at least n");
  if (d.batch > 1 && (d.aux_batch_stride % multiple != 0 || d.aux_batch_stride < d.m * d.aux_ld))
    return refuse(d, "aux_batch_stride must be a multiple of " + std::to_string(multiple) +
                         " and cover one [m, aux_ld] matrix");
  return std::nullopt;
}

// ---- handles and plans ----

cublasLtHandle_t handle_for(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, cublasLtHandle_t> handles;  // never destroyed: see LoadedKernel
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  DeviceGuard guard(device);
  cublasLtHandle_t handle = nullptr;
  ALLOY_CUBLAS_CHECK(cublasLtCreate(&handle));
  handles.emplace(device, handle);
  return handle;
}

struct PlanKey {
  MatmulDesc desc;
  int device = 0;
  bool c_is_d = false;
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0, align_bias = 0, align_aux = 0;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    const MatmulDesc& d = key.desc;
    uint64_t h = 0x84222325cbf29ce4ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull + (h >> 29); };
    for (int64_t v : {d.m, d.n, d.k, d.batch, d.lda, d.ldb, d.ldc, d.ldd, d.stride_a, d.stride_b, d.stride_c,
                      d.stride_d, d.bias_batch_stride, d.aux_ld, d.aux_batch_stride, int64_t(d.sm_count_target)})
      mix(uint64_t(v));
    for (DType t : {d.a_dtype, d.b_dtype, d.c_dtype, d.d_dtype}) mix(uint64_t(t));
    mix(d.bias_dtype ? uint64_t(*d.bias_dtype) : 255);
    mix(d.aux_dtype ? uint64_t(*d.aux_dtype) : 255);
    mix(uint64_t(d.trans_a) | uint64_t(d.trans_b) << 1 | uint64_t(key.c_is_d) << 2 | uint64_t(d.epilogue) << 8);
    mix(uint64_t(key.device) << 32 | key.align_a << 24 | key.align_b << 16 | key.align_c << 8 | key.align_d);
    mix(uint64_t(key.align_bias) << 16 | key.align_aux);
    return size_t(h);
  }
};

// One cuBLASLt configuration. Pointers for the bias and aux live in the shared descriptor, so a
// launch sets them and enqueues under the plan's mutex.
struct Plan {
  std::mutex mutex;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr, layout_d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
  std::string why;  // when !usable: the refusal
};

cublasLtMatrixLayout_t make_layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  ALLOY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, cuda_type(t), uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = int32_t(batch);
    ALLOY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    ALLOY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                        sizeof stride));
  }
  return layout;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value) {
  ALLOY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof value));
}

void build_descriptors(Plan& plan, const PlanKey& key) {
  const MatmulDesc& d = key.desc;
  ALLOY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Operands swapped (see the file comment): cuBLASLt's A is our B, its B is our A.
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, cublas_epilogue(d.epilogue));
  if (d.sm_count_target > 0) set_desc(plan.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, int32_t(d.sm_count_target));
  if (epilogue_uses_bias(d.epilogue)) {
    if (d.bias_dtype) set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(cuda_type(*d.bias_dtype)));
    if (d.batch > 1) set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, d.bias_batch_stride);
  }
  if (epilogue_uses_aux(d.epilogue)) {
    // EPILOGUE_AUX_DATA_TYPE stays at its default (D's type): other aux types exist only for fp8.
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, d.aux_ld);
    if (d.batch > 1) set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, d.aux_batch_stride);
  }
  // Stored shapes in column-major terms: our row-major [r, c] is cuBLASLt's [c, r].
  plan.layout_a = d.trans_b ? make_layout(d.b_dtype, d.k, d.n, d.ldb, d.batch, d.stride_b)
                            : make_layout(d.b_dtype, d.n, d.k, d.ldb, d.batch, d.stride_b);
  plan.layout_b = d.trans_a ? make_layout(d.a_dtype, d.m, d.k, d.lda, d.batch, d.stride_a)
                            : make_layout(d.a_dtype, d.k, d.m, d.lda, d.batch, d.stride_a);
  plan.layout_d = make_layout(d.d_dtype, d.n, d.m, d.ldd, d.batch, d.stride_d);
  plan.layout_c = key.c_is_d ? make_layout(d.d_dtype, d.n, d.m, d.ldd, d.batch, d.stride_d)
                             : make_layout(d.c_dtype, d.n, d.m, d.ldc, d.batch, d.stride_c);
}

// How many of the heuristic's candidates the first run of a shape times (ALLOY_MATMUL_AUTOTUNE;
// 1 takes the heuristic's first choice untimed). 8: on an H200 the fastest of the bf16 GEMMs of
// the MLP backward was the heuristic's 7th candidate (bench/results/2026-11-24-NVIDIA_H200-notes.md).
int autotune_candidates() {
  return int(settings::integer("ALLOY_MATMUL_AUTOTUNE"));
}

// Launches the plan's matmul with `algo` on the stream (args as run_matmul passes them).
cublasStatus_t launch(const Plan& plan, const PlanKey& key, const cublasLtMatmulAlgo_t& algo, const MatmulArgs& args,
                      const Stream& stream) {
  const void* c = args.c ? args.c : args.d;
  // Swapped operands: cuBLASLt's A is our B and its B is our A (see the file comment).
  return cublasLtMatmul(handle_for(key.device), plan.op, &args.alpha, args.b, plan.layout_a, args.a, plan.layout_b, &args.beta,
                        c, plan.layout_c, args.d, plan.layout_d, &algo, stream.scratch(kWorkspaceBytes), kWorkspaceBytes,
                        raw(stream));
}

// The fastest of the candidates, timed on this run's own buffers. Only where rerunning is
// harmless: D does not feed C. The GPU's clock moves while it warms up and as it nears its power
// limit, so the candidates are timed in turns (kTuneRounds rounds of kTuneRuns launches each,
// after a warm-up of the first) and each keeps its best round: a drift favours none of them.
constexpr int kTuneRounds = 3, kTuneRuns = 2;

int fastest_candidate(const Plan& plan, const PlanKey& key, const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                      const MatmulArgs& args, const Stream& stream) {
  if (candidates.size() < 2 || (args.beta != 0.0f && (!args.c || args.c == args.d))) return 0;
  std::vector<float> best_ms(candidates.size(), 0.0f);
  std::vector<bool> usable(candidates.size(), true);
  for (size_t i = 0; i < candidates.size(); ++i)
    for (int w = 0; w < (i == 0 ? 3 : 1) && usable[i]; ++w)
      usable[i] = launch(plan, key, candidates[i].algo, args, stream) == CUBLAS_STATUS_SUCCESS;
  Event start(key.device, true), stop(key.device, true);
  for (int round = 0; round < kTuneRounds; ++round) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!usable[i]) continue;
      start.record(stream);
      for (int rep = 0; rep < kTuneRuns && usable[i]; ++rep)
        usable[i] = launch(plan, key, candidates[i].algo, args, stream) == CUBLAS_STATUS_SUCCESS;
      stop.record(stream);
      stop.synchronize();
      float ms = start.elapsed_ms(stop);
      if (usable[i] && (round == 0 || ms < best_ms[i])) best_ms[i] = ms;
    }
  }
  int best = -1;  // a candidate still usable after every round has its best time
  for (size_t i = 0; i < candidates.size(); ++i)
    if (usable[i] && (best < 0 || best_ms[i] < best_ms[size_t(best)])) best = int(i);
  return std::max(best, 0);
}

void choose_algorithm(Plan& plan, const PlanKey& key, const MatmulArgs& args, const Stream& stream) {
  const MatmulDesc& d = key.desc;
  // The heuristic reads the bias/aux pointers' alignment from the descriptor.
  if (epilogue_uses_bias(d.epilogue)) set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
  if (epilogue_uses_aux(d.epilogue)) set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux);
  cublasLtMatmulPreference_t pref = nullptr;
  ALLOY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  auto set_pref = [pref](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    ALLOY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // swapped operands
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.c_is_d ? key.align_d : key.align_c);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(autotune_candidates()));
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_for(key.device), plan.op, plan.layout_a, plan.layout_b,
                                                         plan.layout_c, plan.layout_d, pref, int(results.size()),
                                                         results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // INVALID_VALUE here means the combination (e.g. an f32 bias with a bf16 result for this
  // epilogue) is not one cuBLASLt takes: a refusal, so the caller falls back.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    plan.why = "cuBLASLt matmul " + d.str() + ": cuBLASLt has no algorithm for this case";
    return;
  }
  ALLOY_CUBLAS_CHECK(status);
  results.resize(size_t(found));
  std::erase_if(results, [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
  if (results.empty()) {
    plan.why = "cuBLASLt matmul " + d.str() + ": no usable heuristic result";
    return;
  }
  plan.algo = results[size_t(fastest_candidate(plan, key, results, args, stream))].algo;
  plan.usable = true;
}

Plan& plan_for(const PlanKey& key, const MatmulArgs& args, const Stream& stream) {
  static std::mutex mutex;
  static std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;  // kept for the process
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  DeviceGuard guard(key.device);
  build_descriptors(*plan, key);
  choose_algorithm(*plan, key, args, stream);
  return *plans.emplace(key, std::move(plan)).first->second;
}

std::optional<MatmulRefusal> check_pointers(const MatmulDesc& d, const MatmulArgs& args) {
  if (!args.a || !args.b || !args.d) return refuse(d, "A, B and D pointers are required");
  if (args.beta != 0.0f && !args.c) return refuse(d, "beta != 0 needs a C pointer");
  auto aligned = [](const void* p, DType t) { return reinterpret_cast<uintptr_t>(p) % dtype_size(t) == 0; };
  if (!aligned(args.a, d.a_dtype) || !aligned(args.b, d.b_dtype) || !aligned(args.d, d.d_dtype) ||
      (args.c && !aligned(args.c, d.c_dtype)))
    return refuse(d, "a matrix pointer is not aligned to its element size");
  if (epilogue_uses_bias(d.epilogue) && (!args.bias || alignment_of(args.bias) < 16))
    return refuse(d, "the bias pointer must be non-null and 16-byte aligned");
  if (epilogue_uses_aux(d.epilogue) && (!args.aux || alignment_of(args.aux) < 16))
    return refuse(d, "the aux pointer must be non-null and 16-byte aligned");
  return std::nullopt;
}

}  // namespace

bool epilogue_uses_bias(EpilogueKind e) {
  using E = EpilogueKind;
  return e == E::bias || e == E::relu_bias || e == E::relu_aux_bias || e == E::gelu_bias || e == E::gelu_aux_bias ||
         epilogue_writes_bias(e);
}

bool epilogue_writes_bias(EpilogueKind e) {
  using E = EpilogueKind;
  return e == E::dgelu_bgrad || e == E::drelu_bgrad || e == E::bgrad_a || e == E::bgrad_b;
}

bool epilogue_uses_aux(EpilogueKind e) {
  using E = EpilogueKind;
  return e == E::relu_aux || e == E::relu_aux_bias || e == E::gelu_aux || e == E::gelu_aux_bias || e == E::dgelu ||
         e == E::dgelu_bgrad || e == E::drelu || e == E::drelu_bgrad;
}

bool epilogue_aux_is_mask(EpilogueKind e) {
  using E = EpilogueKind;
  return e == E::relu_aux || e == E::relu_aux_bias || e == E::drelu || e == E::drelu_bgrad;
}

std::string MatmulDesc::str() const {
  std::string out = std::string(dtype_name(a_dtype)) + (trans_a ? "[k,m]" : "[m,k]") + " x " +
                    std::string(dtype_name(b_dtype)) + (trans_b ? "[n,k]" : "[k,n]") + " -> " +
                    std::string(dtype_name(d_dtype)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                    " k=" + std::to_string(k);
  if (batch != 1) out += " batch=" + std::to_string(batch);
  if (epilogue != EpilogueKind::none) out += " epilogue=" + std::string(epilogue_kind_name(epilogue));
  if (sm_count_target > 0) out += " sms=" + std::to_string(sm_count_target);
  return out;
}

std::optional<MatmulRefusal> check_matmul(const MatmulDesc& desc, MatmulDesc* resolved) {
  MatmulDesc d = desc;
  if (d.m <= 0 || d.n <= 0 || d.k <= 0) return refuse(d, "empty or negative sizes (handled by the caller)");
  if (d.batch < 1 || d.batch > INT32_MAX) return refuse(d, "batch must be in [1, 2^31)");
  if (auto why = check_dtypes(d)) return why;
  int64_t a_cols = d.trans_a ? d.m : d.k, b_cols = d.trans_b ? d.k : d.n;
  if (d.lda == 0) d.lda = a_cols;
  if (d.ldb == 0) d.ldb = b_cols;
  if (d.ldd == 0) d.ldd = d.n;
  if (d.ldc == 0) d.ldc = d.n;
  if (d.lda < a_cols || d.ldb < b_cols || d.ldc < d.n || d.ldd < d.n)
    return refuse(d, "a leading dimension is smaller than its row");
  if (d.aux_ld == 0 && epilogue_uses_aux(d.epilogue))
    d.aux_ld = round_up(d.n, epilogue_aux_is_mask(d.epilogue) ? 128 : 8);
  if (d.batch > 1 && d.stride_d < d.m * d.ldd) return refuse(d, "batches of D overlap");
  if (d.stride_a < 0 || d.stride_b < 0 || d.stride_c < 0) return refuse(d, "negative batch stride");
  if (auto why = check_epilogue(d)) return why;
  // Fields that do not matter are normalized, so equal problems share one cached plan.
  if (d.batch == 1) d.stride_a = d.stride_b = d.stride_c = d.stride_d = d.bias_batch_stride = d.aux_batch_stride = 0;
  if (!epilogue_uses_bias(d.epilogue) || d.bias_dtype == d.d_dtype) d.bias_dtype.reset();
  if (!epilogue_uses_bias(d.epilogue)) d.bias_batch_stride = 0;
  d.aux_dtype.reset();  // checked above to be D's dtype where it matters
  if (!epilogue_uses_aux(d.epilogue)) d.aux_ld = d.aux_batch_stride = 0;
  if (resolved) *resolved = d;
  return std::nullopt;
}

std::optional<MatmulRefusal> run_matmul(const MatmulDesc& desc, const MatmulArgs& args, const Stream& stream) {
  MatmulDesc d;
  if (auto why = check_matmul(desc, &d)) return why;
  if (auto why = check_pointers(d, args)) return why;
  require_cuda("run_matmul");
  PlanKey key;
  key.desc = d;
  key.device = stream.device();
  key.c_is_d = args.c == nullptr;
  key.align_a = alignment_of(args.a);
  key.align_b = alignment_of(args.b);
  key.align_c = args.c ? alignment_of(args.c) : 0;
  key.align_d = alignment_of(args.d);
  key.align_bias = epilogue_uses_bias(d.epilogue) ? alignment_of(args.bias) : 0;
  key.align_aux = epilogue_uses_aux(d.epilogue) ? alignment_of(args.aux) : 0;
  Plan& plan = plan_for(key, args, stream);
  if (!plan.usable) return MatmulRefusal{plan.why};

  DeviceGuard guard(key.device);
  std::lock_guard<std::mutex> lock(plan.mutex);
  if (epilogue_uses_bias(d.epilogue)) set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
  if (epilogue_uses_aux(d.epilogue)) set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux);
  ALLOY_CUBLAS_CHECK(launch(plan, key, plan.algo, args, stream));
  return std::nullopt;
}

}  // namespace alloy::cuda
