#include "alloy/backend/cuda/matmul_segment.h"

#include <algorithm>

#include "alloy/backend/cpu/reference_ops.h"
#include "alloy/backend/cuda/bitmask_segment.h"
#include "alloy/backend/cuda/cublaslt_matmul.h"
#include "alloy/backend/cuda/generated_kernel.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/common/settings.h"
#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/matmul_epilogue.h"
#include "alloy/backend/cuda/host_views.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy::cuda {
namespace {

// A row-major matrix operand: the last two axes of a tensor, possibly stored transposed.
struct MatrixLayout {
  bool transposed = false;
  int64_t ld = 0;
};

// How cuBLASLt can read t's last two axes [rows, cols], or nullopt when it must be packed first.
std::optional<MatrixLayout> matrix_layout(const Tensor& t) {
  int64_t rows = t.size(t.dim() - 2), cols = t.size(t.dim() - 1);
  int64_t rs = t.stride(t.dim() - 2), cs = t.stride(t.dim() - 1);
  if (cs == 1 || cols == 1) return MatrixLayout{false, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
  if (rs == 1 || rows == 1) return MatrixLayout{true, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
  return std::nullopt;
}

// The row stride of t seen as a row-major [m, n] matrix with unit column stride, or nullopt.
std::optional<int64_t> row_stride(const Tensor& t, int64_t m, int64_t n) {
  Tensor v = t.view({m, n});
  if (!v.defined() || (n > 1 && v.stride(1) != 1)) return std::nullopt;
  return m == 1 ? n : v.stride(0);
}

// The address of t's elements when they are one packed vector of `length` (broadcast axes allowed).
void* vector_pointer(const Tensor& t, int64_t length) {
  int64_t found = 1;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1 || t.stride(d) == 0) continue;
    if (t.stride(d) != 1 || found != 1) return nullptr;
    found = t.size(d);
  }
  return found == length ? t.data() : nullptr;
}

Tensor insert_axis(const Tensor& t, int at) {
  std::vector<int64_t> sizes = t.sizes(), strides = t.strides();
  sizes.insert(sizes.begin() + at, 1);
  strides.insert(strides.begin() + at, 1);
  return t.as_strided(sizes, strides, t.offset());
}

// Offsets (in elements) of each batch matrix of t, over the broadcast batch shape.
std::vector<int64_t> batch_offsets(const Tensor& t, const std::vector<int64_t>& batch) {
  int extra = int(batch.size()) - (t.dim() - 2);
  std::vector<int64_t> offsets;
  int64_t count = 1;
  for (int64_t b : batch) count *= b;
  std::vector<int64_t> index(batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      int axis = int(d) - extra;
      if (axis >= 0 && t.size(axis) != 1) off += index[d] * t.stride(axis);
    }
    offsets.push_back(off);
    for (int d = int(batch.size()) - 1; d >= 0; --d) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  return offsets;
}

// The common stride of evenly spaced offsets, or nullopt.
std::optional<int64_t> uniform_stride(const std::vector<int64_t>& offsets) {
  if (offsets.size() < 2) return 0;
  int64_t s = offsets[1] - offsets[0];
  for (size_t i = 0; i < offsets.size(); ++i)
    if (offsets[i] != offsets[0] + int64_t(i) * s) return std::nullopt;
  return s;
}

// The matmul alone, for a "matmul" segment made without the epilogue pass.
std::shared_ptr<const EpilogueMatch> plain_match(const Segment& s) {
  auto m = std::make_shared<EpilogueMatch>();
  m->matmul = s.ops.at(0);
  m->ops = s.ops;
  m->product = m->result = m->matmul->outputs[0];
  return m;
}

// The matmul op's GEMM in row-major terms before any epilogue: one call (uniform batch strides)
// or one call per batch entry. Holds the operands (packed copies where cuBLASLt cannot stride).
struct Gemm {
  MatmulDesc desc;
  Tensor a, b;
  std::vector<int64_t> a_offsets, b_offsets;  // non-empty: one call per batch entry
  bool single() const { return desc.batch == 1 && a_offsets.empty(); }
};

// Where `v` lives for this run: its preallocated buffer, or a fresh one when nothing outside the
// segment reads it (an intermediate the fallback path needs).
Tensor& buffer_for(host_ir::RunState& state, const Value* v, const Stream& stream) {
  Tensor& t = state.values[v->id];
  if (!t.defined()) t = cuda_empty(v->dtype(), state.concrete_shape(v), stream);
  return t;
}

class MatmulSegment final : public host_ir::SegmentExecutable {
 public:
  explicit MatmulSegment(const Segment& s) : match_(s.epilogue ? s.epilogue : plain_match(s)), op_(match_->matmul), id_(s.id) {
    kind_ = match_->kind;
    if (kind_ == EpilogueKind::none && op_->kind == OpKind::linear && op_->inputs.size() == 3) kind_ = EpilogueKind::bias;
    bias_ = match_->bias ? match_->bias : kind_ == EpilogueKind::bias ? op_->inputs[2] : nullptr;
    prepare_epilogue_kernel(s);
  }

  void run(host_ir::RunState& state) override { run_gemm(state, nullptr); }

  // The own block's GEMM of a GEMM -> reduce-scatter loop: the first addend as cuBLASLt's C
  // (beta = 1: D = A B + C, then the bias, so a row-parallel linear's bias / n a rank still sums
  // to one bias), where the epilogue is at most a bias (an activation after C would apply to the
  // sum) and C can be read as D's matrix (D's dtype, rows of unit stride); every other addend,
  // and all of them where cuBLASLt refuses, added after it on the same stream by one pass of the
  // device's accumulate (among four ranks two parts: one kernel reading both, not two each
  // reading the output again). Each addend waited for (`ready`, where given) before its first
  // read: the first before the GEMM where it is C (again, harmlessly, where cuBLASLt then refused
  // it), the rest before the add.
  void run_accumulating(host_ir::RunState& state, const Value* into, const std::vector<Tensor>& addends,
                        const host_ir::DeviceRuntime& device, const std::function<void(size_t)>& ready) override {
    const Tensor* c = nullptr;
    if (!addends.empty() && into == match_->result && (kind_ == EpilogueKind::none || kind_ == EpilogueKind::bias) &&
        addends[0].dtype() == into->dtype() && addends[0].device() == state.device)
      c = &addends[0];
    if (c && ready) ready(0);
    bool took_c = run_gemm(state, c);
    const size_t rest = took_c ? 1 : 0;
    if (ready)
      for (size_t i = rest; i < addends.size(); ++i) ready(i);
    if (rest < addends.size()) device.accumulate(state.at(into), std::vector<Tensor>(addends.begin() + long(rest), addends.end()));
  }

  // What the last run launched (`--dump cuda` after a run): the cuBLASLt call, or the refusal and
  // the fallback taken, then the epilogue kernel's source where the fallback compiled one.
  std::string source() const override {
    if (last_run_.empty()) return {};
    std::string out = "// segment " + std::to_string(id_) + " [matmul]: " + last_run_ + "\n";
    for (const EpilogueUnit& unit : epilogue_units_) out += unit.run->source();
    return out;
  }

 private:
  // Runs the segment, adding `c` as cuBLASLt's C where it is given and the fused call takes it;
  // returns whether it did.
  bool run_gemm(host_ir::RunState& state, const Tensor* c) {
    Stream stream = Stream::current(state.device.index);
    for (const Op* view : match_->operand_views) make_host_view(*view, state);
    // Empty operands or products (k = 0 included) go to the fallback, which handles them.
    int64_t product_numel = 1;
    for (int64_t n : state.concrete_shape(match_->product)) product_numel *= n;
    std::optional<Gemm> gemm;
    if (product_numel > 0 && state.at(op_->inputs[0]).numel() > 0 && state.at(op_->inputs[1]).numel() > 0)
      gemm = op_->kind == OpKind::linear ? linear_gemm(state, stream) : matmul_gemm(state, stream);
    // a chunk's GEMM inside a pipelined loop (communication beside it): the SMs it may take
    // (ALLOY_OVERLAP_GEMM_SMS; 0, the default, every SM)
    if (gemm && !state.chunk_shapes.empty()) gemm->desc.sm_count_target = int(settings::integer("ALLOY_OVERLAP_GEMM_SMS"));
    std::optional<MatmulRefusal> refusal = gemm ? run_fused(state, *gemm, c, stream) : MatmulRefusal{"an empty operand or product"};
    if (!refusal) {
      last_run_ = "cuBLASLt, epilogue " + std::string(epilogue_kind_name(kind_)) + (c ? ", C = the landed addend (beta = 1)" : "");
      return c != nullptr;
    }
    last_run_ = "cuBLASLt refused epilogue " + std::string(epilogue_kind_name(kind_)) + (c ? " with C" : "") + " (" + refusal->why +
                "): " + run_fallback(state, gemm ? &*gemm : nullptr, stream);
    return false;
  }

  // ---- the GEMM's operands ----

  Gemm linear_gemm(host_ir::RunState& state, const Stream& stream) {
    Tensor x = state.at(op_->inputs[0]), w = state.at(op_->inputs[1]);
    int64_t k = x.size(x.dim() - 1);
    int64_t m = x.numel() / k;
    Tensor x2 = x.view({m, k});
    if (!x2.defined() || !matrix_layout(x2)) x2 = contiguous(x, stream).view({m, k});
    // B = w^T: [k, n] viewed from w [n, k] (or a 1-D w as [k, 1])
    Tensor b = w.dim() == 2 ? w.permute({1, 0}) : insert_axis(w, 1);
    if (!matrix_layout(b)) b = contiguous(b, stream);
    return Gemm{base_desc(x2.dtype(), m, b.size(1), k, *matrix_layout(x2), *matrix_layout(b)), x2, b, {}, {}};
  }

  Gemm matmul_gemm(host_ir::RunState& state, const Stream& stream) {
    Tensor a = state.at(op_->inputs[0]), b = state.at(op_->inputs[1]);
    if (a.dim() == 1) a = insert_axis(a, 0);
    if (b.dim() == 1) b = insert_axis(b, 1);
    int64_t m = a.size(a.dim() - 2), k = a.size(a.dim() - 1), n = b.size(b.dim() - 1);
    // b without batch axes: fold a's batch into m for one large GEMM
    if (b.dim() == 2 && a.dim() > 2) {
      Tensor a2 = a.view({a.numel() / k, k});
      if (a2.defined() && matrix_layout(a2) && !matrix_layout(a2)->transposed) {
        a = a2;
        m = a.size(0);
      }
    }
    if (!matrix_layout(a)) a = contiguous(a, stream);
    if (!matrix_layout(b)) b = contiguous(b, stream);
    std::vector<int64_t> batch;
    int batch_rank = std::max(a.dim(), b.dim()) - 2;
    for (int d = 0; d < batch_rank; ++d) {
      int da = d - (batch_rank - (a.dim() - 2)), db = d - (batch_rank - (b.dim() - 2));
      batch.push_back(std::max(da >= 0 ? a.size(da) : 1, db >= 0 ? b.size(db) : 1));
    }
    std::vector<int64_t> off_a = batch_offsets(a, batch), off_b = batch_offsets(b, batch);
    Gemm g{base_desc(a.dtype(), m, n, k, *matrix_layout(a), *matrix_layout(b)), a, b, {}, {}};
    auto sa = uniform_stride(off_a), sb = uniform_stride(off_b);
    if (sa && sb) {
      g.desc.batch = int64_t(off_a.size());
      g.desc.stride_a = *sa;
      g.desc.stride_b = *sb;
      g.desc.stride_d = m * n;
    } else {
      g.a_offsets = std::move(off_a);
      g.b_offsets = std::move(off_b);
    }
    return g;
  }

  static MatmulDesc base_desc(DType dtype, int64_t m, int64_t n, int64_t k, MatrixLayout a, MatrixLayout b) {
    MatmulDesc desc;
    desc.m = m;
    desc.n = n;
    desc.k = k;
    desc.a_dtype = desc.b_dtype = desc.c_dtype = desc.d_dtype = dtype;
    desc.trans_a = a.transposed;
    desc.lda = a.ld;
    desc.trans_b = b.transposed;
    desc.ldb = b.ld;
    desc.ldd = n;
    return desc;
  }

  // Runs the GEMM with `desc` into args.d (all batch entries).
  static std::optional<MatmulRefusal> launch(const Gemm& g, const MatmulDesc& desc, MatmulArgs args, const Stream& stream) {
    args.a = g.a.data();
    args.b = g.b.data();
    if (g.a_offsets.empty()) return run_matmul(desc, args, stream);
    size_t in_elem = size_t(dtype_size(desc.a_dtype)), out_elem = size_t(dtype_size(desc.d_dtype));
    char* d = static_cast<char*>(args.d);
    for (size_t i = 0; i < g.a_offsets.size(); ++i) {
      args.a = static_cast<const char*>(g.a.data()) + g.a_offsets[i] * in_elem;
      args.b = static_cast<const char*>(g.b.data()) + g.b_offsets[i] * in_elem;
      args.d = d + int64_t(i) * desc.m * desc.n * out_elem;
      if (auto refusal = run_matmul(desc, args, stream)) return refusal;
    }
    return std::nullopt;
  }

  // ---- the fused call ----

  // One cuBLASLt call for the matmul and every op the epilogue took (and `c` added before the
  // epilogue, where given); a refusal leaves nothing written.
  std::optional<MatmulRefusal> run_fused(host_ir::RunState& state, const Gemm& g, const Tensor* c, const Stream& stream) {
    EpilogueKind e = kind_;
    if (e != EpilogueKind::none && !g.single()) return MatmulRefusal{"epilogues are used on a single GEMM only"};
    if (c && !g.single()) return MatmulRefusal{"an addend C is used on a single GEMM only"};
    MatmulDesc desc = g.desc;
    desc.epilogue = e;
    desc.c_dtype = desc.d_dtype = match_->result->dtype();
    MatmulArgs args;
    Tensor& d = buffer_for(state, match_->result, stream);
    args.d = d.data();
    if (g.single()) {
      auto ldd = row_stride(d, desc.m, desc.n);
      if (!ldd) return MatmulRefusal{"the result is not a row-major matrix"};
      desc.ldd = *ldd;
    }
    if (c) {
      auto ldc = c->numel() == desc.m * desc.n ? row_stride(*c, desc.m, desc.n) : std::nullopt;
      if (!ldc) return MatmulRefusal{"the addend " + c->str() + " is not a row-major [m, n] matrix"};
      desc.ldc = *ldc;
      args.c = c->data();
      args.beta = 1.0f;
    }
    if (epilogue_uses_bias(e)) {
      const Tensor& bias = epilogue_writes_bias(e) ? buffer_for(state, bias_, stream) : state.at(bias_);
      args.bias = vector_pointer(bias, e == EpilogueKind::bgrad_a ? desc.m : desc.n);
      if (!args.bias) return MatmulRefusal{"the bias " + bias_->name + " is not one packed vector"};
      desc.bias_dtype = bias.dtype();
    }
    if (epilogue_uses_aux(e)) {
      const Value* aux = match_->aux;
      bool written = kind_ == EpilogueKind::gelu_aux || kind_ == EpilogueKind::gelu_aux_bias || kind_ == EpilogueKind::relu_aux ||
                     kind_ == EpilogueKind::relu_aux_bias;
      const Tensor& t = written ? buffer_for(state, aux, stream) : state.at(aux);
      if (epilogue_aux_is_mask(e)) {
        // relu_mask's [m, ceil(n / 32)] i32 words, rows packed one after another; no bits pad a
        // row only when n is a multiple of 32 (the pass takes multiples of 128, which cuBLASLt's
        // aux_ld needs). Rows further apart (a view of a wider mask) are refused: on an H100,
        // cuBLASLt's dReLU read such a mask with aux_ld = 384 bits for n = 256 wrongly from its
        // second word on, so only aux_ld = n is trusted.
        int64_t words = (desc.n + 31) / 32;
        auto ld = row_stride(t, desc.m, words);
        if (!ld || desc.n % 32 != 0 || (desc.m > 1 && *ld != words))
          return MatmulRefusal{"the bit mask " + aux->name + " is not one packed row-major matrix"};
        desc.aux_ld = *ld * 32;
      } else {
        auto ld = row_stride(t, desc.m, desc.n);
        if (!ld) return MatmulRefusal{"the aux matrix " + aux->name + " is not a row-major matrix"};
        desc.aux_ld = *ld;
        desc.aux_dtype = t.dtype();
      }
      args.aux = t.data();
    }
    return launch(g, desc, args, stream);
  }

  // ---- the fallback: the plain GEMM (or the host reference), then the epilogue's ops ----

  // Returns what it ran, for the run record.
  std::string run_fallback(host_ir::RunState& state, const Gemm* g, const Stream& stream) {
    std::string ran = "nothing to multiply";
    Tensor& p = buffer_for(state, match_->product, stream);
    if (p.numel() > 0) {
      bool done = false;
      // Retry on cuBLASLt without the epilogue, unless that is the call that was just refused.
      if (g && !match_->epilogue_ops.empty()) {
        MatmulDesc desc = g->desc;
        MatmulArgs args;
        args.d = p.data();
        if (op_->kind == OpKind::linear && op_->inputs.size() == 3) {
          desc.epilogue = EpilogueKind::bias;
          args.bias = vector_pointer(state.at(op_->inputs[2]), desc.n);
        }
        done = (desc.epilogue == EpilogueKind::none || args.bias) && !launch(*g, desc, args, stream);
      }
      if (!done) run_op_on_host(*op_, state, stream);
      ran = done ? "the plain cuBLASLt GEMM" : "the reference matmul on the host";
    }
    if (match_->epilogue_ops.empty()) return ran;
    if (!epilogue_units_.empty()) {
      for (EpilogueUnit& unit : epilogue_units_) {
        for (const Value* v : unit.outputs) buffer_for(state, v, stream);
        unit.run->run(state);
      }
    } else {
      for (const Op* op : match_->epilogue_ops) run_op_on_host(*op, state, stream);
    }
    if (epilogue_units_.empty()) return ran + ", then the epilogue's ops on the host";
    return ran + (epilogue_units_.size() == 1 ? ", then the epilogue's ops as a generated kernel"
                                              : ", then the epilogue's ops as " + std::to_string(epilogue_units_.size()) +
                                                    " generated kernels");
  }

  // The epilogue's ops as generated kernels: one for each run of ops between the bit-mask ops
  // (relu_mask, relu_backward_mask), which are kernels of their own; or none (the host runs them)
  // where a run does not make one.
  void prepare_epilogue_kernel(const Segment& s) {
    const std::vector<const Op*>& ops = match_->epilogue_ops;
    auto is_bitmask = [](const Op* op) { return op_row(op->kind).op_class == OpClass::bitmask; };
    size_t first = 0;
    while (first < ops.size()) {
      if (is_bitmask(ops[first])) {
        epilogue_units_.push_back({make_bitmask_op(*ops[first], s.id), {ops[first]->outputs[0]}});
        ++first;
        continue;
      }
      size_t last = first;
      while (last < ops.size() && !is_bitmask(ops[last])) ++last;
      if (!add_kernel_unit(s, std::vector<const Op*>(ops.begin() + first, ops.begin() + last))) {
        epilogue_units_.clear();
        return;
      }
      first = last;
    }
  }

  // A generated kernel of `run`, storing what the segment returns and what its other epilogue ops
  // read; false where the run is not one kernel.
  bool add_kernel_unit(const Segment& s, const std::vector<const Op*>& run) {
    Segment sub;
    sub.id = s.id;
    sub.ops = run;
    auto in_run = [&](const Op* op) { return op && std::find(run.begin(), run.end(), op) != run.end(); };
    for (const Op* op : sub.ops)
      for (Value* in : op->inputs)
        if (!in->literal && !in_run(in->producer) && std::find(sub.inputs.begin(), sub.inputs.end(), in) == sub.inputs.end())
          sub.inputs.push_back(in);
    for (const Op* op : run)
      for (Value* out : op->outputs) {
        bool returned = std::find(s.outputs.begin(), s.outputs.end(), out) != s.outputs.end();
        bool read_later = false;
        for (const Op* other : match_->epilogue_ops)
          if (!in_run(other) && std::find(other->inputs.begin(), other->inputs.end(), out) != other->inputs.end()) read_later = true;
        if (returned || read_later) sub.outputs.push_back(out);
      }
    if (sub.outputs.empty()) return true;
    auto analysis = analyze_kernel(sub.ops, sub.inputs, sub.outputs);
    auto* a = std::get_if<KernelAnalysis>(&analysis);
    if (!a) return false;
    std::vector<const Value*> outputs(sub.outputs.begin(), sub.outputs.end());
    epilogue_units_.push_back({make_generated_kernel(sub, std::move(*a)), std::move(outputs)});
    return true;
  }

  // One op through the host reference; its outputs land in their device buffers.
  static void run_op_on_host(const Op& op, host_ir::RunState& state, const Stream& stream) {
    std::vector<Tensor> inputs;
    for (Value* in : op.inputs) {
      const Tensor& t = state.at(in);
      inputs.push_back(t.device().kind == DeviceKind::cpu ? t : to_host(t, stream));
    }
    std::vector<std::vector<int64_t>> sizes;
    for (Value* out : op.outputs) sizes.push_back(state.concrete_shape(out));
    std::vector<Tensor> outputs = run_reference_op(op, inputs, sizes);
    for (size_t i = 0; i < outputs.size(); ++i) {
      Tensor& dst = state.values[op.outputs[i]->id];
      Tensor result = to_device(outputs[i], stream);
      if (dst.defined() && dst.is_contiguous() && dst.numel() > 0) copy_d2d(dst, result, stream);
      else dst = result;
    }
  }

  std::shared_ptr<const EpilogueMatch> match_;
  const Op* op_;
  EpilogueKind kind_;
  const Value* bias_;
  int id_;
  // The fallback's epilogue kernels, in order, each with the values it writes (allocated first
  // where no one else allocates them: intermediates between the kernels).
  struct EpilogueUnit {
    std::unique_ptr<host_ir::SegmentExecutable> run;
    std::vector<const Value*> outputs;
  };
  std::vector<EpilogueUnit> epilogue_units_;
  std::string last_run_;  // what the last run did (runs on CUDA take turns: FusionExecutor's run lock)
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_matmul_segment(const Segment& segment) {
  return std::make_unique<MatmulSegment>(segment);
}

}  // namespace alloy::cuda
