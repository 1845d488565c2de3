// compile_offline: the CUDA plan's kernels generated and compiled by NVRTC with no GPU present.
#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <optional>
#include <sstream>

#include "alloy/backend/cuda/codegen/bitmask_kernel.h"
#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/launch_plan.h"
#include "alloy/backend/cuda/multi_tensor_plan.h"
#include "alloy/backend/cuda/nvrtc_compiler.h"
#include "alloy/backend/backend.h"
#include "alloy/common/settings.h"
#include "alloy/ir/op_table.h"
#include "alloy/backend/cpu/views.h"
#include "alloy/segment/schedulers/multi_tensor.h"
#include "alloy/segment/schedulers/stage_split.h"

namespace alloy {
namespace {

// The variants every kernel is checked in: scalar accesses over the uncollapsed domain, and
// 16-byte vectors with the row cached in registers, as contiguous inputs get at run time, also
// with 32-bit offsets; for reductions also a warp per row (and with early loads), and
// (single-pass ones) the column and few-long-rows kernels and, where only values per row are
// stored, grid reductions; inner-outer kernels with and without the next row loaded ahead; for
// pointwise kernels of two or more axes a tile transpose; and (no cats) vectors with edge
// elements. Positions and gathers run in pointwise and row kernels only (launch_plan), so those
// kernels get no transpose, column or grid variant.
std::vector<cuda::KernelVariant> representative_variants(const KernelAnalysis& a) {
  int min_size = 8;  // of what is read and written in vectors
  auto narrow = [&](const Value* v) { min_size = std::min(min_size, dtype_size(v->dtype())); };
  for (Value* leaf : a.leaves) {
    if (a.is_position(leaf)) continue;
    if (const CatLeaf* cat = a.cat_leaf(leaf)) std::for_each(cat->sources.begin(), cat->sources.end(), narrow);
    else narrow(leaf);
  }
  std::for_each(a.outputs.begin(), a.outputs.end(), narrow);
  cuda::KernelVariant scalar, vector;
  if (a.is_reduction()) {
    scalar.outer_rank = vector.outer_rank = 1;
    scalar.inner_rank = vector.inner_rank = 1;
    vector.items = 2;
  } else {
    scalar.outer_rank = std::max<int>(1, int(a.domain.size()));
    vector.outer_rank = 1;
  }
  // each cat's axis: uncollapsed in the scalar pointwise variant, else the one kept or reduced axis
  for (Value* leaf : a.leaves) {
    if (!a.cat_leaf(leaf)) continue;
    int d = a.cat_domain_axis(leaf);
    bool reduced = std::find(a.reduced_axes.begin(), a.reduced_axes.end(), d) != a.reduced_axes.end();
    scalar.cat_axes.push_back(d < 0 ? -1 : a.is_reduction() ? int(reduced) : d);
    vector.cat_axes.push_back(d < 0 ? -1 : a.is_reduction() ? int(reduced) : 0);
  }
  vector.vector = std::min(8, 16 / min_size);
  vector.leaf_modes = std::string(a.leaves.size(), 'v');
  for (size_t k = 0; k < a.leaves.size(); ++k)
    if (a.is_position(a.leaves[k])) vector.leaf_modes[k] = 'p';
  cuda::KernelVariant index32 = vector;  // 32-bit offsets, as tensors under 2^30 elements get
  index32.index32 = true;
  // odd widths and totals: vectors with edge elements, the last leaf read element by element
  std::vector<cuda::KernelVariant> edges;
  // (a tensor read in vectors sets where a line's vectors start: a position cannot)
  bool read_in_vectors = std::any_of(a.leaves.begin(), a.leaves.end(), [&](const Value* v) { return !a.is_position(v); });
  if (a.cat_leaves.empty() && read_in_vectors) {
    edges.push_back(index32);
    edges.back().edge_elements = true;
    if (a.leaves.size() > 1) edges.back().leaf_modes.back() = 'u';
  }
  auto with_edges = [&](std::vector<cuda::KernelVariant> variants) {
    variants.insert(variants.end(), edges.begin(), edges.end());
    return variants;
  };
  if (!a.is_reduction() && (a.domain.size() < 2 || !a.cat_leaves.empty() || a.leaves.empty() || a.has_indexing()))
    return with_edges({scalar, vector, index32});
  if (!a.is_reduction()) {  // and a tile transpose: the first leaf staged, read along axis 0
    cuda::KernelVariant transpose = index32;
    transpose.outer_rank = 2;
    transpose.transpose_axis = 0;
    transpose.staged = "t" + std::string(a.leaves.size() - 1, '.');
    transpose.early_loads = true;
    return with_edges({scalar, vector, index32, transpose});
  }
  cuda::KernelVariant warp_rows = vector;  // short rows: a warp per row
  warp_rows.rows_per_block = 8;
  cuda::KernelVariant early_warp_rows = warp_rows;
  early_warp_rows.index32 = early_warp_rows.early_loads = true;
  if (a.has_outer_reductions()) {  // a persistent row kernel with column partials: whole vectors, held rows
    cuda::KernelVariant inner_outer = index32;
    inner_outer.inner_outer = true;
    inner_outer.min_blocks = 2;
    cuda::KernelVariant inner_outer_scalar = scalar;
    inner_outer_scalar.inner_outer = true;
    inner_outer_scalar.items = 4;
    cuda::KernelVariant rows_ahead = inner_outer, rows_ahead_scalar = inner_outer_scalar;  // the next row loaded ahead
    rows_ahead.prefetch = rows_ahead_scalar.prefetch = 1;
    cuda::KernelVariant two_ahead = rows_ahead;  // the next two, combined over the grid
    two_ahead.prefetch = 2;
    two_ahead.combine_levels = 0;
    return {inner_outer_scalar, inner_outer, rows_ahead_scalar, rows_ahead, two_ahead};
  }
  if (!a.single_pass || a.has_indexing()) return with_edges({scalar, vector, warp_rows, index32, early_warp_rows});
  cuda::KernelVariant columns = vector;  // reductions over outer axes, split over blocks
  columns.items = 0;
  columns.tile_x = 32;
  cuda::KernelVariant long_rows = scalar;  // few long rows, split over blocks
  long_rows.tile_x = 1;
  long_rows.ty_fast = true;
  std::vector<cuda::KernelVariant> variants{scalar, vector, warp_rows, index32, long_rows};
  if (cuda::column_shared_bytes(a, columns) <= cuda::kMaxColumnSharedBytes) variants.push_back(columns);
  // only values per row stored: a grid reduction (few long rows split over blocks), of rows and
  // of a whole tensor to one value with edge elements
  bool row_outputs_only = true;
  for (const Value* out : a.outputs) row_outputs_only &= a.at(out).per_row;
  if (row_outputs_only) {
    cuda::KernelVariant grid = index32;
    grid.items = 0;
    grid.grid = true;
    grid.min_blocks = 4;
    variants.push_back(grid);
    if (!edges.empty()) {
      grid.outer_rank = 0;
      grid.edge_elements = true;
      grid.leaf_modes = edges[0].leaf_modes;
      variants.push_back(grid);
    }
  }
  return with_edges(variants);
}

// The variant the runtime would launch for contiguous tensors of the bound sizes (fake, never
// read: plan_launch looks only at shapes, strides and alignment), on an SM count typical of the
// architecture; its grid and block go into the report.
struct BoundLaunch {
  cuda::KernelVariant variant;
  std::string shape;  // "grid 8192x1, block 256"
  bool split_stages = false;  // the plan runs the kernel a pass instead (stage_split.h)
};

class SizedValues {
 public:
  SizedValues(const Bindings& sizes) : sizes_(sizes) {}

  const Tensor& at(const Value* v) {
    auto it = values_.find(v);
    if (it != values_.end()) return it->second;
    std::vector<int64_t> shape;
    for (size_t i = 0; i < v->shape().size(); ++i) {
      auto n = v->shape()[i].evaluate(sizes_);
      if (!n) user_error_at("--bind", "the size of axis ", i, " of ", v->name, " (", v->type_str(), ") is not bound; give each symbol with --bind SYMBOL=N");
      shape.push_back(*n);
    }
    // a fake address, aligned like a fresh allocation
    void* fake = reinterpret_cast<void*>(uintptr_t(1) << 30);
    return values_[v] = Tensor::borrow(fake, Device{}, v->dtype(), shape, contiguous_strides(shape));
  }
  void set(const Value* v, Tensor t) { values_[v] = std::move(t); }
  const Bindings& sizes() const { return sizes_; }

 private:
  const Bindings& sizes_;
  std::map<const Value*, Tensor> values_;
};

std::optional<BoundLaunch> bound_launch(const KernelAnalysis& a, SizedValues& values, const cuda::CudaArch& arch) {
  for (const Op* view : a.host_views) {
    std::vector<int64_t> shape = values.at(view->outputs[0]).sizes();
    Tensor t = apply_view(*view, values.at(view->inputs[0]), shape);
    if (t.defined()) values.set(view->outputs[0], t);
  }
  std::deque<Tensor> positions;
  std::vector<const Tensor*> tensors = cuda::launch_tensors(
      a, [&](const Value* v) -> const Tensor& { return values.at(v); }, [&](const Value* v) { return values.at(v).sizes(); }, positions);
  std::vector<int64_t> domain;
  for (const Extent& e : a.domain) domain.push_back(*e.evaluate(values.sizes()));
  std::vector<uint64_t> scalars(a.scalar_inputs.size(), 0);
  int sms = arch.major == 9 ? 132 : arch.major == 8 && arch.minor == 0 ? 108 : 80;
  cuda::LaunchPlan plan = cuda::plan_launch(a, domain, tensors, scalars, cuda::LaunchTarget::from_environment(arch.major, arch.minor, sms, 228 * 1024));
  if (!plan.launch) return std::nullopt;
  return BoundLaunch{plan.variant,
                     "grid " + std::to_string(plan.grid_x) + "x" + std::to_string(plan.grid_y) + ", block " +
                         std::to_string(plan.block) + " (" + std::to_string(sms) + " SMs assumed)",
                     plan.split_stages};
}

// "Used 40 registers, ...; 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" from a
// verbose compile's log: ptxas' "Used" line, then its stack frame and spills (whether the
// registers the launch bounds allow made the kernel spill)
std::string resource_usage(const std::string& log) {
  auto rest_of_line = [&](size_t at) {
    size_t end = log.find('\n', at);
    return log.substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  size_t used = log.find("Used ");
  if (used == std::string::npos) return "";
  size_t frame = log.find(" bytes stack frame");
  if (frame == std::string::npos) return rest_of_line(used);
  while (frame > 0 && std::isdigit(static_cast<unsigned char>(log[frame - 1]))) --frame;
  return rest_of_line(used) + "; " + rest_of_line(frame);
}

}  // namespace

std::string backend::compile_offline(const Fusion& local, const Segmentation& segmentation, const std::string& arch_text,
                                     bool dump_source, const Bindings* sizes) {
  cuda::CudaArch arch = cuda::parse_cuda_arch(arch_text);
  if (!arch.valid()) user_error_at("--arch " + arch_text, "expected an architecture such as sm_90 or sm_80");
  ALLOY_CHECK(segmentation.target == Target::cuda, "alloy compile of a CPU segmentation");
  std::ostringstream report;
  report << settings::dump_note();
  int kernels = 0;
  std::optional<SizedValues> values;
  Bindings bound;
  if (sizes) {
    bound = *sizes;
    values.emplace(bound);
    for (size_t i = 0; i < local.inputs().size(); ++i) values->at(local.inputs()[i]);
    local.complete_bindings(bound);  // the sizes derived from the inputs' (a cat's)
  }
  // Every variant of `a` a run may launch (with sizes: the one it launches), compiled and reported
  // under `label` ("segment 3 [normalization]", "... pass 1 of 2").
  auto compile = [&](const KernelAnalysis& a, int segment_id, const std::string& label) {
    std::vector<cuda::KernelVariant> variants;
    std::string launch;
    if (values) {
      auto bound = bound_launch(a, *values, arch);
      if (!bound) {
        if (!dump_source) report << label << ": nothing to compute at these sizes\n";
        return;
      }
      variants = {bound->variant};
      launch = ", " + bound->shape;
    } else {
      variants = representative_variants(a);
    }
    for (const cuda::KernelVariant& v : variants) {
      std::string name = "alloy_segment" + std::to_string(segment_id);
      std::string source = cuda::generate_kernel(a, v, name);
      cuda::CompileOptions options;
      options.arch_suffix = arch.suffix;
      if (values) {  // the register count of the very kernel that would run
        options.extra.push_back("--ptxas-options=-v");
        options.use_disk_cache = false;
      }
      auto module = cuda::compile_cuda(source, name, arch.major, arch.minor, options);
      ++kernels;
      if (dump_source) report << "// " << label << ", variant " << v.key() << "\n" << source << "\n";
      else {
        report << label << " variant " << v.key() << ": sm_" << arch.major << arch.minor << arch.suffix << " cubin "
               << module->cubin.size() << " bytes";
        if (values) report << launch << "; " << resource_usage(module->log);
        report << "\n";
      }
    }
  };
  // A multi-tensor segment's one kernel, whatever the sizes (its vector follows from the dtypes);
  // with sizes, the launch's grid and table. Always with ptxas' resource line: its stack frame says
  // whether the table is read in place from the parameters.
  auto compile_multi_tensor = [&](const Segment& s) {
    const MultiTensorGroup& group = *s.group;
    const KernelAnalysis& a = group.kernel();
    const int members = int(group.members.size());
    const int sms = arch.major == 9 ? 132 : arch.major == 8 && arch.minor == 0 ? 108 : 80;
    const cuda::LaunchTarget target = cuda::LaunchTarget::from_environment(arch.major, arch.minor, sms, 228 * 1024);
    cuda::KernelVariant v = cuda::multi_tensor_variant(a, target.tuning);
    std::string launch;
    if (values) {
      std::vector<std::vector<const Tensor*>> tensors;
      for (const auto& member : group.tensors) {
        tensors.emplace_back();
        for (const Value* t : member) tensors.back().push_back(&values->at(t));
      }
      cuda::MultiTensorScalars zeros;  // the scalars' values do not change the grid
      const size_t own = group.scalars.empty() ? 0 : group.scalars[0].size();
      zeros.shared.assign(a.scalar_inputs.size() - own, 0);
      zeros.own.assign(size_t(members), std::vector<uint64_t>(own, 0));
      cuda::MultiTensorLaunch plan = cuda::plan_multi_tensor_launch(a, group.per_member, members, tensors, zeros, target);
      launch = ", grid " + std::to_string(plan.grid) + ", block " + std::to_string(plan.block) + " (" + std::to_string(sms) +
               " SMs assumed), " + std::to_string(plan.chunks) + " chunks of " + std::to_string(plan.tensors) + " tensors";
    }
    std::string name = "alloy_segment" + std::to_string(s.id);
    std::string source = cuda::generate_multi_tensor_kernel(a, group.per_member, v, members, name);
    cuda::CompileOptions options;
    options.arch_suffix = arch.suffix;
    options.extra.push_back("--ptxas-options=-v");
    options.use_disk_cache = false;
    auto module = cuda::compile_cuda(source, name, arch.major, arch.minor, options);
    ++kernels;
    if (dump_source) report << "// segment " << s.id << " [multi_tensor], variant " << v.key() << "\n" << source << "\n";
    else
      report << "segment " << s.id << " [multi_tensor] " << members << " tensors, " << cuda::multi_tensor_param_words(a, group.per_member, members) * 8
             << " bytes of parameters, variant " << v.key() << ": sm_" << arch.major << arch.minor << arch.suffix << " cubin "
             << module->cubin.size() << " bytes" << launch << "; " << resource_usage(module->log) << "\n";
  };
  for (const Segment& s : segmentation.segments) {
    if (s.scheduler == SchedulerKind::multi_tensor) {
      compile_multi_tensor(s);
      continue;
    }
    if (s.scheduler == SchedulerKind::communication) {
      if (!dump_source) report << "segment " << s.id << " [communication]: " << op_name(s.ops.at(0)->kind) << ", no kernel\n";
      continue;
    }
    if (!is_generated_kernel(s.scheduler) && s.scheduler != SchedulerKind::bitmask) {
      if (!dump_source)
        report << "segment " << s.id << " [" << scheduler_name(s.scheduler) << "]: no generated kernel"
               << (s.scheduler == SchedulerKind::cpu_fallback ? " " + s.note : std::string()) << "\n";
      continue;
    }
    if (s.scheduler == SchedulerKind::bitmask) {  // one source per op and dtype, whatever the sizes
      const Op& op = *s.ops.at(0);
      std::string name = "alloy_segment" + std::to_string(s.id);
      std::string source = cuda::generate_bitmask_kernel(op.kind, op.inputs[0]->dtype(), name);
      cuda::CompileOptions options;
      options.arch_suffix = arch.suffix;
      auto module = cuda::compile_cuda(source, name, arch.major, arch.minor, options);
      ++kernels;
      if (dump_source) report << "// segment " << s.id << " [bitmask]\n" << source << "\n";
      else
        report << "segment " << s.id << " [bitmask] " << op_name(op.kind) << ": sm_" << arch.major << arch.minor << arch.suffix
               << " cubin " << module->cubin.size() << " bytes\n";
      continue;
    }
    ALLOY_CHECK(s.analysis != nullptr, "segment ", s.id, " has no kernel analysis");
    const KernelAnalysis& a = *s.analysis;
    // a normalization over a strided axis may run as a kernel a pass: those kernels too (with
    // sizes, only where the plan takes them, and then only them)
    std::optional<StageSplit> split = split_by_stage(a, s.ops, s.inputs);
    std::string label = "segment " + std::to_string(s.id) + " [" + scheduler_name(s.scheduler) + "]";
    auto compile_passes = [&] {
      for (size_t k = 0; k < split->kernels.size(); ++k)
        compile(split->kernels[k], s.id, label + " pass " + std::to_string(k + 1) + " of " + std::to_string(split->kernels.size()));
    };
    if (values && split) {
      auto bound = bound_launch(a, *values, arch);
      if (bound && bound->split_stages) {
        for (const Value* v : split->intermediates) values->at(v);
        compile_passes();
        continue;
      }
    }
    compile(a, s.id, label);
    if (split && !values) compile_passes();
  }
  if (!dump_source) report << kernels << " kernel" << (kernels == 1 ? "" : "s") << " compiled for " << arch_text << "\n";
  return report.str();
}

}  // namespace alloy
