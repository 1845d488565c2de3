// compile_offline: the CUDA plan's kernels generated and compiled by NVRTC with no GPU present.
#include <sstream>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/nvrtc_compiler.h"
#include "alloy/backend/gpu_plan.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"

namespace alloy {
namespace {

// The variants every kernel is checked in: scalar accesses over the uncollapsed domain, and
// 16-byte vectors with the row cached in registers, as contiguous inputs get at run time; for
// reductions also a warp per row, and (single-pass ones) the column and few-long-rows kernels.
std::vector<cuda::KernelVariant> representative_variants(const KernelAnalysis& a) {
  int min_size = 8;
  for (Value* v : a.leaves) min_size = std::min(min_size, dtype_size(v->dtype()));
  for (Value* v : a.outputs) min_size = std::min(min_size, dtype_size(v->dtype()));
  cuda::KernelVariant scalar, vector;
  if (a.is_reduction()) {
    scalar.outer_rank = vector.outer_rank = 1;
    scalar.inner_rank = vector.inner_rank = 1;
    vector.items = 2;
  } else {
    scalar.outer_rank = std::max<int>(1, int(a.domain.size()));
    vector.outer_rank = 1;
  }
  vector.vector = std::min(8, 16 / min_size);
  vector.leaf_modes = std::string(a.leaves.size(), 'v');
  cuda::KernelVariant lean = vector;  // the opt-in lean arithmetic with 32-bit offsets
  lean.lean = lean.index32 = true;
  if (!a.is_reduction()) return {scalar, vector, lean};
  cuda::KernelVariant warp_rows = vector;  // short rows: a warp per row
  warp_rows.rows_per_block = 8;
  cuda::KernelVariant lean_warp_rows = warp_rows;
  lean_warp_rows.lean = lean_warp_rows.index32 = true;
  if (!a.single_pass) return {scalar, vector, warp_rows, lean, lean_warp_rows};
  cuda::KernelVariant columns = vector;  // reductions over outer axes, split over blocks
  columns.items = 0;
  columns.tile_x = 32;
  cuda::KernelVariant long_rows = scalar;  // few long rows, split over blocks
  long_rows.tile_x = 1;
  long_rows.ty_fast = true;
  if (cuda::column_shared_bytes(a, columns) > cuda::kMaxColumnSharedBytes) return {scalar, vector, warp_rows, lean, long_rows};
  return {scalar, vector, warp_rows, lean, columns, long_rows};
}

}  // namespace

std::string compile_offline(const Fusion& fusion, const std::string& arch_text, bool dump_source) {
  cuda::CudaArch arch = cuda::parse_cuda_arch(arch_text);
  if (!arch.valid()) user_error_at("--arch " + arch_text, "expected an architecture such as sm_90 or sm_80");
  auto lowered = decompose_composites(fusion);
  Segmentation segmentation = segment_for_cuda(*lowered);
  std::ostringstream report;
  int kernels = 0;
  for (const Segment& s : segmentation.segments) {
    if (s.scheduler == "noop" || s.scheduler == "matmul" || s.scheduler == "cpu_fallback") {
      if (!dump_source) report << "segment " << s.id << " [" << s.scheduler << "]: no generated kernel\n";
      continue;
    }
    auto analysis = analyze_kernel(s.ops, s.inputs, s.outputs);
    const auto& a = std::get<KernelAnalysis>(analysis);
    for (const cuda::KernelVariant& v : representative_variants(a)) {
      std::string name = "alloy_segment" + std::to_string(s.id);
      std::string source = cuda::generate_kernel(a, v, name);
      cuda::CompileOptions options;
      options.arch_suffix = arch.suffix;
      auto module = cuda::compile_cuda(source, name, arch.major, arch.minor, options);
      ++kernels;
      if (dump_source) report << "// segment " << s.id << " [" << s.scheduler << "], variant " << v.key() << "\n" << source << "\n";
      else
        report << "segment " << s.id << " [" << s.scheduler << "] variant " << v.key() << ": sm_" << arch.major << arch.minor
               << arch.suffix << " cubin " << module->cubin.size() << " bytes\n";
    }
  }
  if (!dump_source) report << kernels << " kernel" << (kernels == 1 ? "" : "s") << " compiled for " << arch_text << "\n";
  return report.str();
}

}  // namespace alloy
