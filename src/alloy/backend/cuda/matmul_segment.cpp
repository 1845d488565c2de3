#include "alloy/backend/cuda/matmul_segment.h"

#include "alloy/backend/cpu/reference_ops.h"
#include "alloy/backend/cuda/cublaslt_matmul.h"
#include "alloy/backend/cuda/strided_copy.h"

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

class MatmulSegment final : public host_ir::SegmentExecutable {
 public:
  explicit MatmulSegment(const Segment& s) : op_(s.ops.at(0)) {}

  void run(host_ir::RunState& state) override {
    Stream stream = Stream::current(state.device.index);
    const Tensor& out = state.at(op_->outputs[0]);
    if (out.numel() == 0) return;
    std::optional<MatmulRefusal> refusal =
        op_->kind == OpKind::linear ? run_linear(state, out, stream) : run_matmul_op(state, out, stream);
    if (refusal) run_on_host(state, stream);
  }

 private:
  std::optional<MatmulRefusal> run_linear(host_ir::RunState& state, const Tensor& out, const Stream& stream) {
    Tensor x = state.at(op_->inputs[0]), w = state.at(op_->inputs[1]);
    int64_t k = x.size(x.dim() - 1);
    int64_t m = x.numel() / std::max<int64_t>(k, 1);
    Tensor x2 = x.view({m, k});
    if (!x2.defined() || !matrix_layout(x2)) x2 = contiguous(x, stream).view({m, k});
    // B = w^T: [k, n] viewed from w [n, k] (or a 1-D w as [k, 1])
    Tensor b = w.dim() == 2 ? w.permute({1, 0}) : insert_axis(w, 1);
    if (!matrix_layout(b)) b = contiguous(b, stream);
    int64_t n = b.size(1);
    MatmulDesc desc = base_desc(x2.dtype(), m, n, k, *matrix_layout(x2), *matrix_layout(b));
    MatmulArgs args;
    args.a = x2.data();
    args.b = b.data();
    args.d = out.data();
    if (op_->inputs.size() == 3) {
      const Tensor& bias = state.at(op_->inputs[2]);
      if (bias.numel() != n || (bias.dim() == 1 && bias.stride(0) != 1)) return MatmulRefusal{"bias does not cover the output features"};
      desc.epilogue = MatmulEpilogue::bias;
      args.bias = bias.data();
    }
    return run_matmul(desc, args, stream);
  }

  std::optional<MatmulRefusal> run_matmul_op(host_ir::RunState& state, const Tensor& out, const Stream& stream) {
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
      int64_t sa = da >= 0 ? a.size(da) : 1, sb = db >= 0 ? b.size(db) : 1;
      batch.push_back(std::max(sa, sb));
    }
    std::vector<int64_t> off_a = batch_offsets(a, batch), off_b = batch_offsets(b, batch);
    int64_t count = int64_t(off_a.size());
    MatmulDesc desc = base_desc(a.dtype(), m, n, k, *matrix_layout(a), *matrix_layout(b));
    auto sa = uniform_stride(off_a), sb = uniform_stride(off_b);
    size_t elem = size_t(dtype_size(a.dtype()));
    auto at = [&](const Tensor& t, int64_t off) { return static_cast<const char*>(t.data()) + off * elem; };
    if (sa && sb) {
      desc.batch = count;
      desc.stride_a = *sa;
      desc.stride_b = *sb;
      desc.stride_d = m * n;
      MatmulArgs args;
      args.a = a.data();
      args.b = b.data();
      args.d = out.data();
      return run_matmul(desc, args, stream);
    }
    for (int64_t i = 0; i < count; ++i) {
      MatmulArgs args;
      args.a = at(a, off_a[i]);
      args.b = at(b, off_b[i]);
      args.d = static_cast<char*>(out.data()) + i * m * n * elem;
      if (auto refusal = run_matmul(desc, args, stream)) return refusal;
    }
    return std::nullopt;
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

  // What cuBLASLt refuses still runs: through the host reference.
  void run_on_host(host_ir::RunState& state, const Stream& stream) {
    std::vector<Tensor> inputs;
    for (Value* in : op_->inputs) inputs.push_back(to_host(state.at(in), stream));
    auto outputs = run_reference_op(*op_, inputs, {state.concrete_shape(op_->outputs[0])});
    copy_d2d(state.at(op_->outputs[0]), to_device(outputs[0], stream), stream);
  }

  const Op* op_;
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_matmul_segment(const Segment& segment) {
  return std::make_unique<MatmulSegment>(segment);
}

}  // namespace alloy::cuda
