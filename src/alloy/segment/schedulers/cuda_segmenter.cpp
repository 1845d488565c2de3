#include "alloy/segment/schedulers/cuda_segmenter.h"

#include <map>
#include <set>

#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/matmul_epilogue.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy {
namespace {

// Scheduler order on CUDA (docs/architecture.md):
//   1. matmul          linear / matmul through cuBLASLt, with the ops its epilogue takes
//                      (bias, ReLU/GELU, output cast, dGELU, bias gradients: passes/matmul_epilogue.h)
//   2. generated kernel the longest run of ops that one generated kernel can compute:
//                      "normalization" (a reduction whose row-shaped values are also stored),
//                      "reduction", or "pointwise"
//   3. bitmask         relu_mask / relu_backward_mask on its own, as a generated kernel of its
//                      own shape (backend/cuda/codegen/bitmask_kernel.h), where no GEMM took it
//   4. noop            a view on its own: a zero-copy view made on the host
//   5. cpu_fallback    what no GPU path runs (a matmul of other dtypes than cuBLASLt takes, a
//                      segment whose result is a scalar): copied to the host, run by the reference
//                      kernels, copied back; the segment's note says why
bool is_matmul(OpKind k) { return k == OpKind::matmul || k == OpKind::linear; }
bool is_gemm_dtype(DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32; }

std::string describe(const std::vector<const Op*>& ops) {
  std::string out;
  for (const Op* op : ops) out += (out.empty() ? "" : ", ") + op->outputs[0]->name + "=" + std::string(op_name(op->kind));
  return out;
}

Segment make_segment(const ValueReaders& readers, std::vector<const Op*> ops, SchedulerKind scheduler, int id) {
  Segment s;
  s.id = id;
  s.scheduler = scheduler;
  s.ops = std::move(ops);
  compute_segment_boundary(readers, s);
  return s;
}

// The limits of one generated kernel. Ops: a kernel is grown op by op, each longer run analyzed
// again, so a cap keeps segmentation linear in the fusion's length (a longer chain becomes
// several kernels). Parameters: CUDA passes at most 32,764 bytes to a kernel; ours are 8 bytes
// per pointer, per size and per stride of every tensor (kernel_codegen's param_words), bounded
// here with every tensor at the largest rank.
constexpr size_t kMaxKernelOps = 256;
constexpr int64_t kMaxKernelParamWords = 4000;

int64_t param_words_bound(const Segment& s) {
  int64_t rank = 1, tensors = 0, scalars = 0;
  for (const auto* list : {&s.inputs, &s.outputs})
    for (const Value* v : *list) {
      if (v->is_scalar()) ++scalars;
      else ++tensors, rank = std::max<int64_t>(rank, v->rank());
    }
  return 8 + rank + tensors * (1 + rank) + scalars;
}

SchedulerKind kernel_kind(const KernelAnalysis& a) {
  if (!a.is_reduction()) return SchedulerKind::pointwise;
  for (Value* out : a.outputs)
    if (!a.at(out).per_row) return SchedulerKind::normalization;
  return SchedulerKind::reduction;
}

// Every matmul's epilogue, in definition order (an op goes to the first matmul that takes it).
std::vector<EpilogueMatch> match_epilogues(const Fusion& fusion, std::vector<Refusal>& refusals) {
  std::vector<EpilogueMatch> matches;
  std::set<const Op*> taken;
  for (auto& op : fusion.ops()) {
    if (!is_matmul(op->kind)) continue;
    if (!is_gemm_dtype(op->outputs[0]->dtype())) {
      refusals.push_back({"matmul", describe({op.get()}), "cuBLASLt path takes bf16, f16 and f32 operands"});
      continue;
    }
    EpilogueMatch m = match_matmul_epilogue(fusion, *op, taken);
    for (const NotTaken& n : m.not_taken)
      refusals.push_back({"matmul epilogue", describe(n.op == m.matmul ? std::vector{n.op} : std::vector{m.matmul, n.op}), n.why});
    taken.insert(m.ops.begin(), m.ops.end());
    matches.push_back(std::move(m));
  }
  return matches;
}

// The order segments are made in: definition order, except that a matmul and the ops its
// epilogue took are one block, placed as soon as everything it reads has been placed (a bias
// broadcast defined after the matmul moves up in front of it).
class Schedule {
 public:
  std::vector<const Op*> order;
  std::vector<int> group;  // per position: the index of its match, or -1

  Schedule(const Fusion& fusion, const std::vector<EpilogueMatch>& matches) : matches_(matches) {
    for (size_t g = 0; g < matches.size(); ++g)
      for (const Op* op : matches[g].ops) group_of_[op] = int(g);
    for (auto& op : fusion.ops()) place(op.get());
  }

 private:
  void place(const Op* op) {
    auto g = group_of_.find(op);
    if (g == group_of_.end()) place_unit({op}, -1, op);
    else place_unit(matches_[g->second].ops, g->second, &matches_[g->second]);
  }

  void place_unit(const std::vector<const Op*>& ops, int g, const void* key) {
    int& state = state_[key];  // 0 new, 1 being placed, 2 placed
    if (state == 2) return;
    ALLOY_CHECK(state != 1, "the matmul segments of ", describe(ops), " depend on each other");
    state = 1;
    for (const Op* op : ops)
      for (Value* in : op->inputs)
        if (in->producer && std::find(ops.begin(), ops.end(), in->producer) == ops.end()) place(in->producer);
    state = 2;
    for (const Op* op : ops) {
      order.push_back(op);
      group.push_back(g);
    }
  }

  const std::vector<EpilogueMatch>& matches_;
  std::map<const Op*, int> group_of_;
  std::map<const void*, int> state_;
};

}  // namespace

Segmentation segment_for_cuda(const Fusion& fusion) {
  Segmentation result;
  result.target = Target::cuda;
  ValueReaders readers(fusion);
  std::vector<EpilogueMatch> matches = match_epilogues(fusion, result.refusals);
  Schedule schedule(fusion, matches);
  const std::vector<const Op*>& ops = schedule.order;
  auto range = [&](size_t first, size_t last) { return std::vector<const Op*>(ops.begin() + first, ops.begin() + last + 1); };
  size_t i = 0;
  while (i < ops.size()) {
    const Op* op = ops[i];
    int id = int(result.segments.size());
    if (is_communication(op->kind)) {  // a collective is a segment of its own, never in a kernel
      result.segments.push_back(make_segment(readers, {op}, SchedulerKind::communication, id));
      ++i;
      continue;
    }
    if (schedule.group[i] >= 0) {
      const EpilogueMatch& m = matches[schedule.group[i]];
      Segment s = make_segment(readers, m.ops, SchedulerKind::matmul, id);
      s.note = m.note();
      s.epilogue = std::make_shared<EpilogueMatch>(m);
      result.segments.push_back(std::move(s));
      i += m.ops.size();
      continue;
    }
    // The longest run [i, j] that one generated kernel computes.
    size_t best = i;
    std::shared_ptr<const KernelAnalysis> best_analysis;
    std::string why_not_longer;
    for (size_t j = i; j < ops.size() && schedule.group[j] < 0 && !is_matmul(ops[j]->kind) && !is_communication(ops[j]->kind); ++j) {
      if (j - i >= kMaxKernelOps) {
        why_not_longer = "a generated kernel takes at most " + std::to_string(kMaxKernelOps) + " ops";
        break;
      }
      Segment candidate = make_segment(readers, range(i, j), SchedulerKind::pointwise, id);
      if (param_words_bound(candidate) > kMaxKernelParamWords) {
        if (why_not_longer.empty() || j == best + 1)
          why_not_longer = "its tensors' pointers, sizes and strides would pass CUDA's 32 KB of kernel parameters";
        break;
      }
      auto analysis = analyze_kernel(candidate.ops, candidate.inputs, candidate.outputs);
      if (auto* a = std::get_if<KernelAnalysis>(&analysis)) {
        best = j;
        best_analysis = std::make_shared<const KernelAnalysis>(std::move(*a));
        why_not_longer.clear();
      } else if (why_not_longer.empty() && (j == best + 1 || !best_analysis)) {
        why_not_longer = std::get<std::string>(analysis);
      }
    }
    if (best_analysis) {
      if (!why_not_longer.empty() && best + 1 < ops.size())
        result.refusals.push_back({"kernel", describe(range(i, best + 1)), why_not_longer});
      Segment s = make_segment(readers, range(i, best), kernel_kind(*best_analysis), id);
      s.analysis = std::move(best_analysis);
      result.segments.push_back(std::move(s));
      i = best + 1;
      continue;
    }
    if (op_row(op->kind).op_class == OpClass::bitmask) {
      result.segments.push_back(make_segment(readers, {op}, SchedulerKind::bitmask, id));
    } else if (is_view(op->kind) || op->kind == OpKind::segment_set) {
      result.segments.push_back(make_segment(readers, {op}, SchedulerKind::noop, id));
    } else {
      // what no GPU scheduler runs: the segment says why
      std::string why = is_matmul(op->kind) ? std::string(dtype_name(op->outputs[0]->dtype())) + " " + std::string(op_name(op->kind)) +
                                                  ": the cuBLASLt path takes bf16, f16 and f32 operands"
                                            : why_not_longer;
      if (!is_matmul(op->kind)) result.refusals.push_back({"kernel", describe({op}), why});
      Segment s = make_segment(readers, {op}, SchedulerKind::cpu_fallback, id);
      s.note = "(" + why + ")";
      result.segments.push_back(std::move(s));
    }
    ++i;
  }
  return result;
}

}  // namespace alloy
