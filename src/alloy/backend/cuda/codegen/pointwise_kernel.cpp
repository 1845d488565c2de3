// The pointwise kernel: a grid-stride loop over vector slots of the collapsed domain, each
// computing every output at its elements.
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
    os_ << "  const long long slots = p.numel / " << v_.vector << ";\n";
    os_ << "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < slots; q += (long long)gridDim.x * blockDim.x) {\n";
    emit_offsets("q * " + std::to_string(v_.vector), 0, R, "off_", tensor_names(true, true, false), "    ");
    cached_ = element_leaves();
    emit_leaf_arrays("L", "", "    ", cached_);
    emit_leaf_loads("L", "", "off_", "    ", cached_);
    auto ops = element_ops_for(element_outputs());
    emit_vector_stores("off_", "    ", "", [&](const std::string& indent) {
      for (const Op* op : ops) emit_op(*op, "", indent);
    });
    os_ << "  }\n}\n";
    return os_.str();
  }
};

}  // namespace

std::string emit_pointwise_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return PointwiseEmitter(analysis, variant, name).run();
}

}  // namespace alloy::cuda
