// The multi-tensor kernel (segment/schedulers/multi_tensor.h): one chain's pointwise kernel over a
// table of tensors. The blocks stride over the chunks of all the tensors (each tensor cut into
// chunks of the variant's `items` vectors a thread); a block finds its chunk's tensor by a binary
// search of the table's first chunks, fills a one-axis Params from that tensor's entry (stride 1,
// so the pointwise kernel's offsets, loads, ops and stores are reused as they are) and computes
// the chunk: in vectors where the entry says every pointer of the tensor allows them (the
// elements after the last whole vector one a thread), else one element a thread. A scalar that
// differs between members (each parameter group's own `wd`) is a field of the entry, copied into
// the Params with the pointers.
#include <algorithm>
#include <string>
#include <vector>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {
namespace {

class MultiTensorEmitter final : public KernelEmitter {
 public:
  MultiTensorEmitter(const KernelAnalysis& a, const std::vector<bool>& per_member, const KernelVariant& v, std::string name, int members)
      : KernelEmitter(a, v, std::move(name)), per_member_(per_member), members_(members) {
    ALLOY_CHECK(per_member_.size() == a_.scalar_inputs.size(), "a multi-tensor kernel of ", a_.scalar_inputs.size(), " scalars got ",
                per_member_.size(), " per-member flags");
  }

  std::string run() {
    ALLOY_CHECK(v_.outer_rank == 1 && !v_.edge_elements && v_.transpose_axis < 0 && !a_.is_reduction() && !a_.has_indexing() &&
                    a_.cat_leaves.empty(),
                "a multi-tensor kernel is a pointwise kernel of one axis");
    emit_header();  // the one-axis Params each chunk fills
    emit_table();
    const int V = v_.vector;
    const std::string chunk = std::to_string(int64_t(v_.threads) * V * v_.items);
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads << ") " << name_
        << "(const __grid_constant__ MultiParams mp) {\n";
    os_ << "  for (long long b = blockIdx.x; b < mp.chunks; b += gridDim.x) {\n";
    os_ << "    int lo = 0, hi = (int)mp.tensors - 1;  // the last tensor whose first chunk is at or before b\n";
    os_ << "    while (lo < hi) { const int mid = (lo + hi + 1) >> 1; if (mp.first[mid] <= b) lo = mid; else hi = mid - 1; }\n";
    os_ << "    const MultiTensorEntry& entry = mp.e[lo];\n";
    emit_fill_params("    ");
    os_ << "    const long long begin = (b - mp.first[lo]) * " << chunk << ";\n";
    os_ << "    const long long end = begin + " << chunk << " < entry.numel ? begin + " << chunk << " : entry.numel;\n";
    os_ << "    long long rest = begin;  // where the elements one a thread start\n";
    os_ << "    if (entry.vector) {\n";
    os_ << "      rest = begin + (end - begin) / " << V << " * " << V << ";\n";
    os_ << "      for (long long q = begin + (long long)threadIdx.x * " << V << "; q < rest; q += (long long)blockDim.x * " << V << ") {\n";
    emit_offsets("q", 0, 1, "off_", tensor_names(true, true, false), "        ");
    cached_ = element_leaves();
    auto ops = element_ops_for(element_outputs());
    emit_vector_slot(ops, "        ");
    os_ << "      }\n";
    os_ << "    }\n";
    os_ << "    for (long long at = rest + threadIdx.x; at < end; at += blockDim.x) {\n";
    emit_offsets("at", 0, 1, "off_", tensor_names(true, true, false), "      ");
    emit_element_slot(ops, "      ");
    os_ << "    }\n";
    os_ << "  }\n";
    os_ << "}\n";
    return os_.str();
  }

 private:
  // The table: per tensor its element count, whether its pointers allow vectors, the pointer of
  // each leaf and output and its member's own scalars; the first chunk of each tensor apart, for the
  // search; the scalars every member shares once.
  void emit_table() {
    size_t pointers = a_.leaves.size() + a_.outputs.size();
    auto scalar_field = [&](size_t k) {
      return std::string(is_floating(a_.scalar_inputs[k]->dtype()) ? "double" : "long long") + " s" + std::to_string(k) + ";";
    };
    os_ << "struct MultiTensorEntry {\n  long long numel, vector;\n  const void* t[" << pointers << "];\n";
    for (size_t k = 0; k < a_.scalar_inputs.size(); ++k)
      if (per_member_[k]) os_ << "  " << scalar_field(k) << "  // this member's own\n";
    os_ << "};\n";
    os_ << "struct MultiParams {\n  long long tensors, chunks;\n";
    for (size_t k = 0; k < a_.scalar_inputs.size(); ++k)
      if (!per_member_[k]) os_ << "  " << scalar_field(k) << "\n";
    os_ << "  long long first[" << members_ << "];\n  MultiTensorEntry e[" << members_ << "];\n};\n";
    os_ << "static_assert(sizeof(MultiParams) == " << multi_tensor_param_words(a_, per_member_, members_)
        << " * 8, \"MultiParams layout\");\n\n";
  }

  void emit_fill_params(const std::string& in) {
    os_ << in << "Params p;\n" << in << "p.numel = entry.numel;\n" << in << "p.size[0] = entry.numel;\n";
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      os_ << in << "p.l" << k << " = (const " << storage_type(a_.leaves[k]->dtype()) << "*)entry.t[" << k << "]; p.l" << k
          << "_stride[0] = 1;\n";
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      os_ << in << "p.o" << k << " = (" << storage_type(a_.outputs[k]->dtype()) << "*)entry.t[" << a_.leaves.size() + k << "]; p.o" << k
          << "_stride[0] = 1;\n";
    for (size_t k = 0; k < a_.scalar_inputs.size(); ++k) os_ << in << "p.s" << k << " = " << (per_member_[k] ? "entry" : "mp") << ".s" << k << ";\n";
  }

  const std::vector<bool>& per_member_;
  int members_;
};

}  // namespace

std::string generate_multi_tensor_kernel(const KernelAnalysis& analysis, const std::vector<bool>& per_member, const KernelVariant& variant,
                                         int members, const std::string& name) {
  return MultiTensorEmitter(analysis, per_member, variant, name, members).run();
}

int multi_tensor_param_words(const KernelAnalysis& a, const std::vector<bool>& per_member, int members) {
  const int own = int(std::count(per_member.begin(), per_member.end(), true));
  return 2 + int(a.scalar_inputs.size()) - own + members * (3 + int(a.leaves.size() + a.outputs.size()) + own);
}

}  // namespace alloy::cuda
