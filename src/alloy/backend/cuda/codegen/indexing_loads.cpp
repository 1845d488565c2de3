// The indexing ops in generated kernels (KernelEmitter's part for them): positions, the leaves of
// iota and its views, computed from an element's offset in a tensor of no memory; and gathers, a
// load of the gathered input at an address computed from the index's value, range-checked: an
// index outside the axis loads nothing (the value is 0) and sets the kernel's error flag, which
// the host reads after the run (backend/cuda/gather_fault.h). Pointwise and row kernels only
// (launch_plan gives kernels with indexing no column, tile-transpose or split-stage shape).
#include <string>
#include <vector>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {
namespace {

// A name and a number ("g3"): built by appending (GCC 12's -Wrestrict misfires on a one-letter
// literal + std::to_string's temporary).
std::string numbered(const char* prefix, size_t n) {
  std::string name = prefix;
  name += std::to_string(n);
  return name;
}

}  // namespace

std::string KernelEmitter::along_vector(const std::string& tensor) const {
  if (v_.vector <= 1) return "";
  return " + e * p." + tensor + "_stride[" + std::to_string(dims() - 1) + "]";
}

std::vector<std::string> KernelEmitter::gather_tensor_names(bool per_row) const {
  std::vector<std::string> names;
  for (size_t j = 0; j < a_.gathers.size(); ++j) {
    bool row = a_.is_reduction() && a_.at(a_.gathers[j].op->outputs[0]).per_row;
    if (a_.is_reduction() && row != per_row) continue;
    names.push_back(numbered("g", j));
    names.push_back(numbered("g", j) + "p");
  }
  return names;
}

std::string KernelEmitter::position_raw(int k, const std::string& offset_prefix, const std::string& extra) const {
  const Value* leaf = a_.leaves[size_t(k)];
  std::string l = numbered("l", size_t(k));
  std::string position = "(p." + l + " + (long long)" + offset_prefix + l + extra + ")";
  std::string converted = "(";
  converted += compute_type(leaf->dtype());
  converted += ")";
  return store_convert(leaf->dtype(), converted + position);
}

void KernelEmitter::emit_position_load(int k, const std::string& dst, const std::string& offset_prefix, const std::string& indent) {
  if (v_.vector <= 1) {
    os_ << indent << dst << ".v[0] = " << position_raw(k, offset_prefix) << ";\n";
    return;
  }
  os_ << indent << "#pragma unroll\n"
      << indent << "for (int e = 0; e < " << v_.vector << "; ++e) " << dst << ".v[e] = "
      << position_raw(k, offset_prefix, along_vector(numbered("l", size_t(k)))) << ";\n";
}

void KernelEmitter::emit_gather(const Op& op, const std::string& element, const std::string& indent) {
  int j = a_.gather_index(&op);
  ALLOY_CHECK(j >= 0, "gather ", op.outputs[0]->name, " is not among the kernel's gathers");
  const GatherLoad& g = a_.gathers[size_t(j)];
  const Value* out = op.outputs[0];
  const Value* x = op.inputs[0];
  // per row: at the row's offsets, the same for every element (no vector term)
  bool per_row = a_.is_reduction() && a_.at(out).per_row;
  std::string at = per_row ? "ro_" : element_offsets_;
  std::string G = numbered("g", size_t(j)), id = std::to_string(out->id);
  std::string i = "gi" + id, ok = "gin" + id;
  os_ << indent << "const alloy_i64 " << i << " = (alloy_i64)(" << ref(op.inputs[1], element) << ");\n";
  os_ << indent << "const bool " << ok << " = " << i << " >= 0 && " << i << " < p." << G << "_size;\n";
  os_ << indent << "if (!" << ok << ") alloy_gather_fault(p.err, " << j << ", " << i << ", p." << G << "p + (long long)" << at << G << "p"
      << (per_row ? "" : along_vector(G + "p")) << ");\n";
  // the address clamped to the axis' first element, and no load at all out of range (an axis of 0)
  std::string raw = "p." + G + "[" + at + G + (per_row ? "" : along_vector(G)) + " + (" + ok + " ? " + i + " : 0) * p." + G + "_step]";
  std::string value = load_convert(x->dtype(), through_chain(g.chain, g.source->dtype(), x->dtype(), raw));
  const char* ct = compute_type(out->dtype());
  os_ << indent << ct << " v" << id << " = " << ok << " ? (" << ct << ")(" << value << ") : (" << ct << ")0;\n";
}

void KernelEmitter::emit_gather_fault_function() {
  os_ << "// An index outside its gather's axis: the first thread to find one sets the flag and says which\n"
         "// gather, the value and its position in the index (the host reads it after the run).\n"
         "__device__ void alloy_gather_fault(unsigned long long* err, int gather, long long value, long long position) {\n"
         "  if (atomicCAS(err, 0ull, 1ull) == 0ull) {\n"
         "    err[1] = (unsigned long long)gather;\n"
         "    err[2] = (unsigned long long)value;\n"
         "    err[3] = (unsigned long long)position;\n"
         "  }\n"
         "}\n\n";
}

}  // namespace alloy::cuda
