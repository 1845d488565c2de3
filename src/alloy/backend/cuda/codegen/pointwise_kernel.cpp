// The pointwise kernel: a grid-stride loop over vector slots of the collapsed domain, each
// computing every output at its elements; with edge elements (lines whose ends are off the
// vectors): over one axis, the first threads of block 0 compute the elements before the first
// aligned vector and after the last whole one; over several (rows of an odd width beside per-row
// operands: a cross-entropy's gradient over a vocabulary of 50257), each line has one slot more
// than its whole vectors, and the slots past a line's vectors compute its edge elements.
#include <string>

#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {
namespace {

class PointwiseEmitter final : public KernelEmitter {
 public:
  using KernelEmitter::KernelEmitter;

  std::string run() {
    emit_header();
    int R = v_.outer_rank;
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads << ") " << name_ << "(const Params p) {\n";
    if (v_.edge_elements && R > 1) return run_lines();
    std::string first = "";  // the first element in a vector
    if (v_.edge_elements) {
      emit_edge_head("head", "0", "p.numel", "  ");
      first = "head + ";
    }
    os_ << "  const long long slots = (p.numel" << (v_.edge_elements ? " - head" : "") << ") / " << v_.vector << ";\n";
    os_ << "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < slots; q += (long long)gridDim.x * blockDim.x) {\n";
    emit_offsets(first + "q * " + std::to_string(v_.vector), 0, R, "off_", tensor_names(true, true, false), "    ");
    cached_ = element_leaves();
    auto ops = element_ops_for(element_outputs());
    emit_vector_slot(ops, "    ");
    os_ << "  }\n";
    if (v_.edge_elements) {
      os_ << "  const long long edges = p.numel - slots * " << v_.vector << ";\n";
      os_ << "  if (blockIdx.x == 0 && (long long)threadIdx.x < edges) {\n";
      os_ << "    const long long at = (long long)threadIdx.x < head ? (long long)threadIdx.x : slots * " << v_.vector << " + threadIdx.x;\n";
      emit_offsets("at", 0, R, "off_", tensor_names(true, true, false), "    ");
      emit_element_slot(ops, "    ");
      os_ << "  }\n";
    }
    os_ << "}\n";
    return os_.str();
  }

 private:
  // Edge elements over lines of the innermost axis (R > 1): slot j of line r is its vector j where
  // the line has one, else an edge slot; the edge slots share the line's elements before its
  // first aligned vector and after its last whole one (at most 2 * vector - 2).
  std::string run_lines() {
    int R = v_.outer_rank;
    const std::string V = std::to_string(v_.vector), cols = "p.size[" + std::to_string(R - 1) + "]";
    auto names = tensor_names(true, true, false);
    auto ops = element_ops_for(element_outputs());
    cached_ = element_leaves();
    os_ << "  const long long cols = " << cols << ", per_line = cols / " << V << " + 1;\n";
    os_ << "  const long long slots = p.numel / cols * per_line;\n";
    os_ << "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < slots; q += (long long)gridDim.x * blockDim.x) {\n";
    os_ << "    const long long line = q / per_line, j = q - line * per_line;\n";
    std::string reference = edge_reference().first;
    emit_offsets("line * cols", 0, R, "lo_", {reference}, "    ");
    emit_edge_head("head", "lo_" + reference, "cols", "    ");
    os_ << "    const long long vectors = (cols - head) / " << V << ";\n";
    os_ << "    if (j < vectors) {\n";
    emit_offsets("line * cols + head + j * " + V, 0, R, "off_", names, "      ");
    emit_vector_slot(ops, "      ");
    os_ << "    } else {\n";
    os_ << "      const long long edges = cols - vectors * " << V << ";\n";
    os_ << "      for (long long k = j - vectors; k < edges; k += per_line - vectors) {\n";
    os_ << "        const long long at = line * cols + (k < head ? k : vectors * " << V << " + k);\n";
    emit_offsets("at", 0, R, "off_", names, "        ");
    emit_element_slot(ops, "        ");
    os_ << "      }\n    }\n  }\n}\n";
    return os_.str();
  }
};

}  // namespace

std::string emit_pointwise_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return PointwiseEmitter(analysis, variant, name).run();
}

}  // namespace alloy::cuda
