// The generated CUDA kernels run on the CPU (cuda_emulation.h): for each fusion, every kernel the
// runtime would launch is planned by the runtime's own launch planning (plan_launch), generated,
// compiled for the host with the C++ compiler that built Alloy, run thread by thread, and its
// outputs (poisoned first) compared with the CPU reference. Runs in CI, where there is no GPU;
// it checks the launch planning, the Params layout and the kernels' logic (barriers, shuffles,
// split reductions, kernel flavours), not the hardware or the PTX-only paths.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <tuple>

#include "alloy/backend/cuda/codegen/bitmask_kernel.h"
#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/gather_fault.h"
#include "alloy/backend/cuda/launch_plan.h"
#include "alloy/backend/cuda/multi_tensor_plan.h"
#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/passes/unify_extents.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/runtime/run_inputs.h"
#include "alloy/backend/cpu/views.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"
#include "alloy/segment/schedulers/kernel_analysis.h"
#include "alloy/segment/schedulers/multi_tensor.h"
#include "alloy/segment/schedulers/stage_split.h"
#include "alloy/segment/segmenter.h"
#include "backend/cuda/kernel_cases.h"
#include "backend/cuda/random_fusions.h"
#include "test_util.h"

namespace alloy {
namespace {

#ifndef ALLOY_HAVE_CUDA
TEST(EmulatedKernels, NeedTheCudaBackend) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

// (grid x, grid y, threads, Params, block order: 0 in order, else shuffled by it)
using EmulateFn = void (*)(unsigned, unsigned, unsigned, const void*, unsigned);

// Compiles a generated kernel for the host once per source; the launcher runs it over a grid.
EmulateFn compile_for_host(const std::string& source) {
  static std::map<std::string, EmulateFn> compiled;
  if (auto it = compiled.find(source); it != compiled.end()) return it->second;
  // the process's compiled kernels, removed when it exits (the loaded libraries stay mapped)
  static const struct Scratch {
    std::filesystem::path dir = std::filesystem::temp_directory_path() / ("alloy_emulation_" + std::to_string(getpid()));
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } scratch;
  const std::filesystem::path& dir = scratch.dir;
  std::filesystem::create_directories(dir);
  std::string stem = (dir / ("kernel" + std::to_string(compiled.size()))).string();
  {
    std::ofstream out(stem + ".cpp");
    out << "#include \"" << ALLOY_EMULATION_HEADER << "\"\n"
        << source << "\nextern \"C\" void alloy_emulate(unsigned gx, unsigned gy, unsigned threads, const void* p, unsigned order) {\n"
        << "  alloy_emulate_grid(&alloy_kernel, gx, gy, threads, p, order);\n}\n";
  }
  std::string command = std::string(ALLOY_HOST_CXX) + " " ALLOY_EMULATION_FLAGS " -shared -o " + stem + ".so " + stem +
                        ".cpp > " + stem + ".log 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(stem + ".log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    ADD_FAILURE() << "the generated kernel does not compile for the host:\n" << text.substr(0, 4000);
    return nullptr;
  }
  void* handle = dlopen((stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    ADD_FAILURE() << "dlopen: " << dlerror();
    return nullptr;
  }
  auto fn = reinterpret_cast<EmulateFn>(dlsym(handle, "alloy_emulate"));
  return compiled[source] = fn;
}

std::vector<int64_t> concrete(const Value* v, const Bindings& b) {
  std::vector<int64_t> sizes;
  for (const Extent& e : v->shape()) sizes.push_back(*e.evaluate(b));
  return sizes;
}

// t as [rows, last axis], packed first where its strides do not allow that view (as the runtime's
// bitmask segment does on the GPU).
Tensor rows_of(const Tensor& t) {
  int64_t last = t.size(t.dim() - 1), rows = t.numel() / std::max<int64_t>(last, 1);
  Tensor v = t.view({rows, last});
  return v.defined() ? v : packed_cpu(t).view({rows, last});
}

// One bitmask segment: its output poisoned, then the kernel the runtime generates, launched with
// the runtime's own launch words, run on the CPU.
void emulate_bitmask_segment(const Op& op, const Bindings& bound, int sm_count, std::map<const Value*, Tensor>& values) {
  Tensor out = Tensor::empty(op.outputs[0]->dtype(), concrete(op.outputs[0], bound));
  std::memset(out.data(), 0xA5, size_t(out.numel()) * dtype_size(out.dtype()));
  values[op.outputs[0]] = out;
  std::vector<Tensor> views;
  for (Value* in : op.inputs) views.push_back(rows_of(values.at(in)));
  views.push_back(rows_of(out));
  ASSERT_EQ(views.back().data(), out.data()) << "the output is written in place";
  std::vector<const Tensor*> tensors;
  for (const Tensor& t : views) tensors.push_back(&t);
  cuda::BitmaskLaunch plan = cuda::plan_bitmask_launch(op.kind, tensors, sm_count);
  if (!plan.launch) return;
  EmulateFn run = compile_for_host(cuda::generate_bitmask_kernel(op.kind, op.inputs[0]->dtype(), "alloy_kernel"));
  ASSERT_NE(run, nullptr);
  run(plan.grid, 1, plan.block, plan.words.data(), 0);
}

// One generated kernel as the runtime launches it: host views made, outputs poisoned (a direct
// in-place output is its input's memory instead, as the program's Allocate makes it), the launch
// planned, the kernel generated, compiled for the host and run (its blocks in order, or shuffled by
// `block_order`; each launch's variant and grid appended to `launches` where given). Where the
// plan asks for a kernel a pass (split_stages), the passes run instead, as GeneratedKernel runs
// them, each counted in `split_passes`. `offsets64`: 64-bit offsets, as tensors of 2^30 elements
// or more get.
void emulate_kernel(const KernelAnalysis& a, const std::vector<const Op*>& ops, const std::vector<Value*>& inputs,
                    const Bindings& bound, const cuda::LaunchTarget& target, bool offsets64, std::map<const Value*, Tensor>& values,
                    int& split_passes, const Segmentation* in_place = nullptr, unsigned block_order = 0,
                    std::vector<std::string>* launches = nullptr) {
  for (const Op* view : a.host_views) {
    Tensor t = apply_view(*view, values.at(view->inputs[0]), concrete(view->outputs[0], bound));
    ASSERT_TRUE(t.defined()) << "a view the test cannot make on the host";
    values[view->outputs[0]] = t;
  }
  for (Value* out : a.outputs) {
    if (const Value* input = in_place ? in_place->direct_target(out) : nullptr) {
      values[out] = values.at(input);
      continue;
    }
    Tensor t = Tensor::empty(out->dtype(), concrete(out, bound));
    std::memset(t.data(), 0xFF, size_t(t.numel()) * dtype_size(t.dtype()));  // poison: NaN, -1
    values[out] = t;
  }
  // each leaf (a cat leaf: its sources; a position: made), each gather's source and positions, each output
  std::deque<Tensor> positions;
  std::vector<const Tensor*> tensors = cuda::launch_tensors(
      a, [&](const Value* v) -> const Tensor& { return values.at(v); }, [&](const Value* v) { return concrete(v, bound); }, positions);
  std::vector<int64_t> domain;
  for (const Extent& e : a.domain) domain.push_back(*e.evaluate(bound));
  std::vector<uint64_t> scalars = cuda::scalar_words(a, [&](const Value* v) -> const Tensor& { return values.at(v); });
  cuda::LaunchPlan plan = cuda::plan_launch(a, domain, tensors, scalars, target);
  if (!plan.launch) return;
  if (plan.split_stages) {
    if (auto split = split_by_stage(a, ops, inputs)) {
      for (const Value* v : split->intermediates) {
        Tensor t = Tensor::empty(v->dtype(), concrete(v, bound));
        std::memset(t.data(), 0xFF, size_t(t.numel()) * dtype_size(t.dtype()));
        values[v] = t;
      }
      for (const KernelAnalysis& pass : split->kernels) {
        ++split_passes;
        emulate_kernel(pass, {}, {}, bound, target, offsets64, values, split_passes, nullptr, block_order, launches);
      }
      return;
    }
  }
  ASSERT_EQ(int(plan.words.size()), cuda::param_words(a, plan.variant));
  if (offsets64) plan.variant.index32 = false;  // the Params words are the same
  // as the runtime does once the kernel is compiled: one wave at its occupancy (here assumed 3)
  cuda::fit_column_grid(plan, 3, target);
  std::vector<uint64_t> workspace(plan.workspace_bytes / 8 + 1);
  std::vector<unsigned> counters(plan.counter_bytes / 4 + 1, 0);
  if (plan.workspace_word >= 0) {
    plan.words[plan.workspace_word] = uint64_t(reinterpret_cast<uintptr_t>(workspace.data()));
    plan.words[plan.counters_word] = uint64_t(reinterpret_cast<uintptr_t>(counters.data()));
  }
  uint64_t flag[4] = {0, 0, 0, 0};  // gathers' out-of-range indices (backend/cuda/gather_fault.h)
  if (plan.error_word >= 0) plan.words[plan.error_word] = uint64_t(reinterpret_cast<uintptr_t>(flag));
  EmulateFn run = compile_for_host(cuda::generate_kernel(a, plan.variant, "alloy_kernel"));
  ASSERT_NE(run, nullptr);
  SCOPED_TRACE("variant " + plan.variant.key());
  if (launches) launches->push_back(plan.variant.key() + " grid " + std::to_string(plan.grid_x) + "x" + std::to_string(plan.grid_y));
  run(plan.grid_x, plan.grid_y, plan.block, plan.words.data(), block_order);
  for (unsigned c : counters) EXPECT_EQ(c, 0u) << "a kernel left its arrival counter set";
  // as the runtime does at the run's end: a set flag is the CPU reference's user error
  std::vector<cuda::GatherShapes> shapes;
  for (const GatherLoad& g : a.gathers) shapes.push_back({concrete(g.op->outputs[0], bound), concrete(g.op->inputs[0], bound)});
  cuda::check_gather_flag(a, flag, shapes);
}

// One multi-tensor segment as the runtime launches it: every member's outputs poisoned (a direct
// in-place output is its input's memory), members with strided tensors run as their own pointwise
// kernels, then the table planned from every member's tensors and the one kernel run.
void emulate_multi_tensor(const Segment& s, const Bindings& bound, const cuda::LaunchTarget& target, std::map<const Value*, Tensor>& values,
                          const Segmentation& segmentation, unsigned block_order, std::vector<std::string>* launches) {
  const MultiTensorGroup& group = *s.group;
  const KernelAnalysis& kernel = group.kernel();
  for (const Segment& member : group.members)
    for (Value* out : member.outputs) {
      if (const Value* input = segmentation.direct_target(out)) {
        values[out] = values.at(input);
        continue;
      }
      Tensor t = Tensor::empty(out->dtype(), concrete(out, bound));
      std::memset(t.data(), 0xFF, size_t(t.numel()) * dtype_size(t.dtype()));
      values[out] = t;
    }
  std::vector<std::vector<const Tensor*>> tensors;
  for (const auto& member : group.tensors) {
    tensors.emplace_back();
    for (const Value* v : member) tensors.back().push_back(&values.at(v));
  }
  auto value_of = [&](const Value* v) -> const Tensor& { return values.at(v); };
  const int members = int(group.members.size());
  cuda::MultiTensorLaunch plan = cuda::plan_multi_tensor_launch(kernel, group.per_member, members, tensors,
                                                                cuda::multi_tensor_scalar_words(group, value_of), target);
  for (size_t i : plan.apart) {
    const Segment& member = group.members[i];
    int passes = 0;
    if (launches) launches->push_back("apart: member " + std::to_string(i));
    emulate_kernel(*member.analysis, member.ops, member.inputs, bound, target, false, values, passes, &segmentation, block_order, launches);
  }
  if (!plan.launch) return;
  ASSERT_EQ(int(plan.words.size()), cuda::multi_tensor_param_words(kernel, group.per_member, members));
  EmulateFn run = compile_for_host(cuda::generate_multi_tensor_kernel(kernel, group.per_member, plan.variant, members, "alloy_kernel"));
  ASSERT_NE(run, nullptr);
  if (launches)
    launches->push_back("multi_tensor " + plan.variant.key() + " grid " + std::to_string(plan.grid) + ", " +
                        std::to_string(plan.tensors) + " tensors, " + std::to_string(plan.vectorized) + " in vectors");
  run(plan.grid, 1, plan.block, plan.words.data(), block_order);
}

// The kernel flavours a run can choose (LaunchTarget): the final pass's leaves loaded in that pass
// (ALLOY_NO_EARLY_LOADS=1; here also with the 64-bit offsets of large tensors), values recomputed
// (KernelTuning::recompute_values), and the default (values held, early loads).
enum class Flavour { late_loads, recompute, default_choice };
constexpr Flavour kFlavours[] = {Flavour::late_loads, Flavour::recompute, Flavour::default_choice};

// Runs `text` on `inputs` segment by segment through emulated kernels (every segment must be a
// generated kernel or views) into `outputs`. sm_count shapes the column kernels' and grid
// reductions' splits; `split_passes`, where given, gets the count of kernels run as passes of
// split normalizations; `in_place_written` the count of in-place outputs their kernels wrote into
// their inputs' memory (each checked to be that memory); `block_order` runs every kernel's blocks
// in order (0) or shuffled by it; `launches` gets each kernel's variant and grid; `tuning` is the
// architecture's kernel choices (the flavour sets recompute_values). A gather's out-of-range index
// is the UserError the runtime raises at the run's end.
void emulate_fusion(const std::string& text, const std::vector<Tensor>& inputs, Flavour flavour, int sm_count, std::vector<Tensor>& outputs,
                    int* split_passes = nullptr, int* in_place_written = nullptr, unsigned block_order = 0,
                    std::vector<std::string>* launches = nullptr, const cuda::KernelTuning& tuning = {}) {
  auto fusion = parse_fusion(text, "emulated.fusion", std::nullopt);
  auto lowered = unify_extents(*decompose_composites(*fusion));  // as the CUDA pipeline runs them
  lowered->take_output_aliases_from(*fusion);
  const Bindings bound = bind_inputs(*lowered, inputs);  // the inputs' sizes and the sizes derived from them (a cat's)
  Segmentation segmentation = segment_fusion(*lowered, Target::cuda);
  std::map<const Value*, Tensor> values;
  for (size_t i = 0; i < inputs.size(); ++i) values[lowered->inputs()[i]] = inputs[i];
  cuda::LaunchTarget target;
  target.sm_count = sm_count;
  target.shared_per_sm = 228 * 1024;
  target.tuning = tuning;
  target.tuning.recompute_values = flavour == Flavour::recompute;
  target.early_loads = flavour != Flavour::late_loads;
  int passes = 0;
  for (const Segment& s : segmentation.segments) {
    if (s.scheduler == SchedulerKind::noop) {  // views only, made on the host as the runtime makes them
      for (const Op* view : s.ops) {
        Tensor t = apply_view(*view, values.at(view->inputs[0]), concrete(view->outputs[0], bound));
        ASSERT_TRUE(t.defined()) << "a view the test cannot make on the host";
        values[view->outputs[0]] = t;
      }
      continue;
    }
    if (s.scheduler == SchedulerKind::bitmask) {  // relu_mask / relu_backward_mask: a kernel of its own shape
      emulate_bitmask_segment(*s.ops.at(0), bound, sm_count, values);
      continue;
    }
    if (s.scheduler == SchedulerKind::multi_tensor) {  // many chains, one launch over a table of their tensors
      emulate_multi_tensor(s, bound, target, values, segmentation, block_order, launches);
      continue;
    }
    ASSERT_TRUE(is_generated_kernel(s.scheduler) && s.analysis) << segmentation.str();
    emulate_kernel(*s.analysis, s.ops, s.inputs, bound, target, flavour == Flavour::late_loads, values, passes, &segmentation, block_order,
                   launches);
  }
  if (split_passes) *split_passes = passes;
  if (in_place_written) *in_place_written = 0;
  outputs.clear();
  for (Value* out : lowered->outputs()) {
    outputs.push_back(values.at(out));
    if (const Value* input = segmentation.direct_target(out)) {  // the kernel wrote its input's memory
      EXPECT_EQ(values.at(out).data(), values.at(input).data()) << out->name;
      if (in_place_written) ++*in_place_written;
    }
  }
}

const char* flavour_name(Flavour flavour) {
  const char* names[] = {"late loads, 64-bit offsets", "values recomputed", "default kernels"};
  return names[int(flavour)];
}

// Runs `text` through emulated kernels and compares with the CPU reference (which gets its own
// copies of the inputs that in-place outputs write). `given`: inputs by position (undefined ones
// are drawn at random).
void expect_emulation_matches_cpu(const std::string& text, const Bindings& sizes, Flavour flavour, int sm_count = 4,
                                  std::vector<Tensor> given = {}, int* split_passes = nullptr, int* in_place_written = nullptr,
                                  std::vector<std::string>* launches = nullptr, const cuda::KernelTuning& tuning = {}) {
  SCOPED_TRACE(flavour_name(flavour));
  auto fusion = parse_fusion(text, "emulated.fusion", std::nullopt);
  given.resize(fusion->inputs().size());
  std::vector<Tensor> inputs = complete_inputs(*fusion, given, sizes, 11);
  FusionExecutor reference(parse_fusion(text, "emulated.fusion", std::nullopt), {DeviceChoice::cpu});
  std::vector<Tensor> reference_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& targets = fusion->output_aliases();
    bool written = std::find(targets.begin(), targets.end(), fusion->inputs()[i]) != targets.end();
    reference_inputs.push_back(written ? cpu_copy(inputs[i]) : inputs[i]);
  }
  std::vector<Tensor> expected = reference.run(reference_inputs);
  std::vector<Tensor> actual;
  emulate_fusion(text, inputs, flavour, sm_count, actual, split_passes, in_place_written, 0, launches, tuning);
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(testing::tensors_close(actual[i], expected[i])) << "output " << fusion->outputs()[i]->name;
}

void every_flavour(const std::string& text, const Bindings& sizes, int sm_count = 4) {
  for (Flavour f : kFlavours) expect_emulation_matches_cpu(text, sizes, f, sm_count);
}

// Every case the GPU end-to-end tests run, here on the CPU.
class EmulatedKernelCase : public ::testing::TestWithParam<testing::KernelCase> {};

TEST_P(EmulatedKernelCase, MatchesTheCpu) {
  const testing::KernelCase& c = GetParam();
  every_flavour(c.file.empty() ? c.text : testing::read_file(testing::source_path(c.file)),
                c.emulated_sizes.empty() ? c.sizes : c.emulated_sizes);
}

INSTANTIATE_TEST_SUITE_P(EmulatedKernels, EmulatedKernelCase, ::testing::ValuesIn(testing::kernel_cases()),
                         [](const ::testing::TestParamInfo<testing::KernelCase>& info) { return info.param.name; });

TEST(EmulatedKernels, PointwiseWithBroadcastsAndCasts) {
  every_flavour(R"(fusion f(a: bf16[N, 64], b: bf16[64], c: f32[N, 1], h: f16[N, 64]) {
  m = mul(a, b)
  s = add(m, c)
  g = gelu(s, approximate="tanh")
  hf = cast(h, dtype=f32)
  t = maximum(hf, s)
  th = cast(t, dtype=f16)
  return g, th
})", {{"N", 37}});
}

TEST(EmulatedKernels, NormalizationsBlockAndWarpPerRow) {
  // 4096 columns: a block per row, the row in registers; 128 columns and 64+ rows: a warp per row
  for (auto [n, d] : {std::pair<int64_t, int64_t>{6, 4096}, {70, 128}})
    every_flavour(R"(fusion f(x: bf16[N, D], w: bf16[D], b: bf16[D]) {
  y = layer_norm(x, w, b, normalized_ndim=1, eps=1e-5)
  s = softmax(x, dim=1)
  r = rms_norm(x, w, normalized_ndim=1, eps=1e-6)
  v, m = var_mean(x, dims=[1], correction=1)
  return y, s, r, v, m
})", {{"N", n}, {"D", d}});
}

// Softmax of rows with -inf entries (masked attention): whole threads' shares masked, and one row
// masked entirely (NaN, as PyTorch gives) — the online softmax of the row kernels must agree.
TEST(EmulatedKernels, MaskedSoftmax) {
  std::string text = R"(fusion f(x: f32[N, D], keep: bool[N, D]) {
  zero = mul(x, 0.0)
  ninf = log(zero)
  xm = where(keep, x, ninf)
  s = softmax(xm, dim=1)
  return s
})";
  // a block per row (4096 columns), then a warp per row (128 columns, 70 rows)
  for (auto [n, d] : {std::pair<int64_t, int64_t>{6, 4096}, {70, 128}}) {
    Tensor mask = Tensor::empty(DType::boolean, {n, d});
    bool* m = mask.data_as<bool>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < d; ++c) {
        bool thread_masked = d > 1000 ? (c < 1000 || (c >= 2048 && c < 3048)) : c < 64;
        m[r * d + c] = r != 0 && !thread_masked && (r != 3 || c % 7 == 0);
      }
    for (Flavour f : kFlavours) expect_emulation_matches_cpu(text, {{"N", n}, {"D", d}}, f, 4, {Tensor(), mask});
  }
}

// A cat leaf along the reduced axis of row kernels: a block per row with the row in registers, a
// warp per row, and a row too long for registers, re-read from memory each pass.
TEST(EmulatedKernels, CatInRowKernelsOfEveryShape) {
  const std::string text = R"(fusion f(a: bf16[R, A], b: bf16[R, C]) {
  k = cat(a, b, dim=1)
  s = softmax(k, dim=1)
  v, m = var_mean(k, dims=[1], correction=1)
  return s, v, m
})";
  for (auto [r, a, c] : {std::tuple<int64_t, int64_t, int64_t>{20, 96, 160}, {70, 96, 160}, {2, 40000, 30000}})
    every_flavour(text, {{"R", r}, {"A", a}, {"C", c}});
}

// Edge elements: rows of an input that starts 3 elements past a vector boundary. Without
// per-element outputs its rows set where the vectors start (a head of 5, 4, ... elements, row by
// row); with softmax's output (aligned) setting it, the input is read element by element ('u').
TEST(EmulatedKernels, RowsStartingOffTheVectorBoundary) {
  const int64_t rows = 9, width = 1001;
  Tensor storage = Tensor::empty(DType::bf16, {rows * width + 3});
  for (int64_t i = 0; i < storage.numel(); ++i) store_double(storage.data(), DType::bf16, i, std::sin(double(i) * 0.37) * 3.0);
  Tensor x = storage.as_strided({rows, width}, {width, 1}, 3);
  const std::string log_sum_exp = testing::kLogSumExpRows;
  const std::string softmax = "fusion f(x: bf16[R, W]) {\n  s = softmax(x, dim=1)\n  return s\n}\n";
  for (const std::string& text : {log_sum_exp, softmax})
    for (Flavour f : kFlavours) expect_emulation_matches_cpu(text, {{"R", rows}, {"W", width}}, f, 4, {x});
}

// Normalizations over a non-contiguous axis as a kernel a pass (LaunchTarget::split_stages): column
// kernels for the row statistics (softmax: its max, then its sum of exps), then a pointwise kernel
// (a tile transpose where the per-element outputs are contiguous along the rows).
TEST(EmulatedKernels, NormalizationsOverANonContiguousAxisAsAKernelAPass) {
  std::map<std::string, const testing::KernelCase*> cases;
  for (const testing::KernelCase& c : testing::kernel_cases()) cases[c.name] = &c;
  for (const char* name : {"LayerNormOverANonContiguousAxis", "SoftmaxOverTheOuterAxis"}) {
    SCOPED_TRACE(name);
    const testing::KernelCase& c = *cases.at(name);
    for (Flavour f : kFlavours) {
      int passes = 0;
      expect_emulation_matches_cpu(c.text, c.emulated_sizes.empty() ? c.sizes : c.emulated_sizes, f, 4, {}, &passes);
      EXPECT_GE(passes, 2) << "not run as a kernel a pass";
    }
  }
}

// Log-sum-exp over rows long enough for the streaming pass (KernelVariant::streaming_online), an
// odd width: a random row, one whose first half is -inf (threads that see only -inf), one all
// -inf (NaN, as exp(-inf - -inf) in the reference), one with a NaN, one with +inf, one rising
// (the running max grows at every vector).
TEST(EmulatedKernels, LogSumExpOverLongRowsInOnePass) {
  const int64_t rows = 6, width = 20003;
  Tensor x = Tensor::empty(DType::bf16, {rows, width});
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      double v = std::sin(double(r * width + c) * 0.37) * 4.0;
      if (r == 1 && c < width / 2) v = -inf;
      if (r == 2) v = -inf;
      if (r == 3 && c == 7777) v = std::nan("");
      if (r == 4 && c == 12345) v = inf;
      if (r == 5) v = double(c) * 1e-3;
      store_double(x.data(), DType::bf16, r * width + c, v);
    }
  for (Flavour f : kFlavours) expect_emulation_matches_cpu(testing::kLogSumExpRows, {{"R", rows}, {"W", width}}, f, 4, {x});
}

// A softmax and the cross-entropy (its loss and gradient in one fusion) over rows not held in registers in registers (a block of 1024
// threads would hold more than row_held_bytes a thread: here 16, 8 bf16 elements): the max and the sum of exps in
// one streaming pass, then the pass that stores, reading the row again. The rows of the log-sum-exp
// test above (-inf halves, all -inf, NaN, +inf, rising), an odd width.
TEST(EmulatedKernels, SoftmaxOverRowsNotHeld_StreamsTheMaxAndTheSumInOnePass) {
  const int64_t rows = 6, width = 20003;
  Tensor x = Tensor::empty(DType::bf16, {rows, width});
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      double v = std::sin(double(r * width + c) * 0.37) * 4.0;
      if (r == 1 && c < width / 2) v = -inf;
      if (r == 2) v = -inf;
      if (r == 3 && c == 7777) v = std::nan("");
      if (r == 4 && c == 12345) v = inf;
      if (r == 5) v = double(c) * 1e-3;
      store_double(x.data(), DType::bf16, r * width + c, v);
    }
  cuda::KernelTuning tuning;
  tuning.row_held_bytes = 16;
  tuning.row_shared_bytes = 0;  // (not held in shared memory either: below)
  const std::string softmax = "fusion f(x: bf16[R, W]) {\n  y = softmax(x, dim=1)\n  return y\n}\n";
  for (Flavour f : kFlavours) {
    std::vector<std::string> launches;
    expect_emulation_matches_cpu(softmax, {{"R", rows}, {"W", width}}, f, 4, {x}, nullptr, nullptr, &launches, tuning);
    ASSERT_EQ(launches.size(), 1u);
    EXPECT_NE(launches[0].find("_so"), std::string::npos) << launches[0];
  }
  const std::string cross_entropy = testing::read_file(testing::source_path("examples/cross_entropy.fusion"));
  std::vector<std::string> launches;
  expect_emulation_matches_cpu(cross_entropy, {{"T", 5}, {"V", 20011}}, Flavour::default_choice, 4, {}, nullptr, nullptr, &launches, tuning);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0].find("_so"), std::string::npos) << launches[0];
  // the same rows held in shared memory (KernelVariant::shared_row): read once, each thread's
  // vectors its own, 96 threads a block (an odd number of warps; 27 vectors a thread of the row)
  tuning.row_shared_bytes = 232448;
  tuning.row_shared_threads = 96;
  launches.clear();
  expect_emulation_matches_cpu(softmax, {{"R", rows}, {"W", width}}, Flavour::default_choice, 4, {x}, nullptr, nullptr, &launches, tuning);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0].find("_t96_i27_b"), std::string::npos) << launches[0];
  EXPECT_NE(launches[0].find("_sh"), std::string::npos) << launches[0];
  launches.clear();
  expect_emulation_matches_cpu(cross_entropy, {{"T", 5}, {"V", 20011}}, Flavour::default_choice, 4, {}, nullptr, nullptr, &launches, tuning);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0].find("_sh"), std::string::npos) << launches[0];
}

// In-place outputs their kernels write into their inputs' memory (segment/in_place.h): a thread
// reads each element, then writes it. The results equal the reference run on copies: the AdamW
// step over a total off the vectors (edge elements, v non-negative), a bf16 target beside a
// broadcast operand and a scalar, and a target beside a transposed operand (a tile transpose: the
// other operand goes through shared memory, the target does not). The default kernels (the
// optimizer steps of kernel_cases.h run in every flavour).
TEST(EmulatedKernels, InPlaceOutputsWrittenByTheirKernels) {
  const int64_t n = 1001;
  Tensor v = Tensor::empty(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) store_double(v.data(), DType::f32, i, 0.5 + std::sin(double(i) * 0.37) * 0.4);
  struct Case {
    std::string text;
    Bindings sizes;
    std::vector<Tensor> given;
    int written;
  };
  std::vector<Case> cases = {
      {testing::read_file(testing::source_path("examples/adam_step.fusion")), {{"N", n}}, {Tensor(), Tensor(), Tensor(), v}, 3},
      {R"(fusion f(x: bf16[R, C], b: bf16[C], s: f32) {
  y = mul(x, b)
  z = add(y, s)
  w = cast(z, dtype=bf16)
  return w -> x
})", {{"R", 37}, {"C", 72}}, {}, 1},
      {R"(fusion f(x: f32[R, C], z: f32[C, R]) {
  zt = permute(z, dims=[1, 0])
  y = add(x, zt)
  return y -> x
})", {{"R", 70}, {"C", 96}}, {}, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    int written = 0;
    expect_emulation_matches_cpu(c.text, c.sizes, Flavour::default_choice, 4, c.given, nullptr, &written);
    EXPECT_EQ(written, c.written);
  }
}

// Issue 27, many tensors in one launch (segment/schedulers/multi_tensor.h): the AdamW step over
// parameters of 1, 3, 1000, 4099 and 37 x 29 elements, each written in place, is one launch over a
// table of their tensors, every tensor in vectors but for the elements after its last whole one
// (1 and 3 elements: no whole vector), equal to the CPU reference; with its blocks in another order.
TEST(EmulatedKernels, MultiTensorAdamStepOfOddSizes_IsOneLaunch) {
  const std::vector<std::vector<int64_t>> shapes = {{1}, {3}, {1000}, {4099}, {37, 29}};
  std::vector<Tensor> given(4 * shapes.size() + 4);
  for (size_t i = 0; i < shapes.size(); ++i) {  // v >= 0, as a second moment is
    Tensor v = Tensor::empty(DType::f32, shapes[i]);
    for (int64_t k = 0; k < v.numel(); ++k) store_double(v.data(), DType::f32, k, 0.5 + std::sin(double(k) * 0.37) * 0.4);
    given[4 * i + 3] = v;
  }
  int written = 0;
  std::vector<std::string> launches;
  expect_emulation_matches_cpu(testing::multi_adam_fusion(shapes), {}, Flavour::default_choice, 4, given, nullptr, &written, &launches);
  EXPECT_EQ(written, 15);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0].find("multi_tensor r1.0_v4_t256_i2_vvvv grid 7, 5 tensors, 5 in vectors"), std::string::npos) << launches[0];
}

// Two parameter groups (issue 27): the matrices with their own lr and wd, the vectors with theirs
// (wd 0, as biases and norm weights are), odd sizes, each written in place: one launch whose table
// gives each member its own lr and wd, equal to the CPU reference. The kernel reads a member's own scalars with its entry, once a chunk, and the shared ones from
// the parameters.
TEST(EmulatedKernels, MultiTensorAdamStepOfTwoParameterGroups_IsOneLaunchWithEachMembersScalars) {
  const std::vector<std::vector<int64_t>> shapes = {{1}, {37, 29}, {3}, {4099}, {5, 7}, {1000}};
  const std::string text = testing::multi_adam_fusion(shapes, "f32", true);
  std::vector<Tensor> given(4 * shapes.size() + 6);
  for (size_t i = 0; i < shapes.size(); ++i) {  // v >= 0, as a second moment is
    Tensor v = Tensor::empty(DType::f32, shapes[i]);
    for (int64_t k = 0; k < v.numel(); ++k) store_double(v.data(), DType::f32, k, 0.5 + std::sin(double(k) * 0.37) * 0.4);
    given[4 * i + 3] = v;
  }
  const double scalars[] = {0.01, 0.1, 0.03, 0.0, 0.9, 0.99};  // lr_d, wd_d, lr_n, wd_n, bc1, bc2
  for (size_t k = 0; k < 6; ++k) {
    Tensor t = Tensor::empty(DType::f32, {});
    store_double(t.data(), DType::f32, 0, scalars[k]);
    given[4 * shapes.size() + k] = t;
  }
  int written = 0;
  std::vector<std::string> launches;
  expect_emulation_matches_cpu(text, {}, Flavour::default_choice, 4, given, nullptr, &written, &launches);
  EXPECT_EQ(written, 18);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0].find("multi_tensor r1.0_v4_t256_i2_vvvv grid"), std::string::npos) << launches[0];
  EXPECT_NE(launches[0].find("6 tensors, 6 in vectors"), std::string::npos) << launches[0];
  // the kernel's text: lr and wd in each entry, bc1 and bc2 once
  auto fusion = parse_fusion(text, "emulated.fusion", std::nullopt);
  auto lowered = unify_extents(*decompose_composites(*fusion));
  lowered->take_output_aliases_from(*fusion);
  Segmentation segmentation = segment_fusion(*lowered, Target::cuda);
  ASSERT_EQ(segmentation.segments.size(), 1u);
  const MultiTensorGroup& group = *segmentation.segments[0].group;
  const KernelAnalysis& kernel = group.kernel();
  std::string source = cuda::generate_multi_tensor_kernel(kernel, group.per_member, cuda::multi_tensor_variant(kernel, {}), 6, "k");
  const size_t entry_begin = source.find("struct MultiTensorEntry"), entry_end = source.find("struct MultiParams");
  ASSERT_LT(entry_begin, entry_end);
  for (size_t k = 0; k < kernel.scalar_inputs.size(); ++k) {
    const std::string s = "s" + std::to_string(k), field = "double " + s + ";";
    SCOPED_TRACE(kernel.scalar_inputs[k]->name);
    const size_t at = source.find(field, entry_begin);
    ASSERT_NE(at, std::string::npos) << source.substr(entry_begin);
    EXPECT_EQ(at < entry_end, bool(group.per_member[k])) << source.substr(entry_begin);  // in MultiTensorEntry, or in MultiParams
    EXPECT_NE(source.find("p." + s + " = " + (group.per_member[k] ? "entry." : "mp.") + s + ";"), std::string::npos) << source.substr(entry_begin);
  }
  EXPECT_EQ(cuda::multi_tensor_param_words(kernel, group.per_member, 6), 2 + 2 + 6 * (3 + 7 + 2));
}

// Each tensor's own alignment decides: a parameter whose tensors start off a 16-byte boundary (views
// at an odd offset) is computed element by element in the same launch, and one whose gradient is a
// strided view runs as its chain's own pointwise kernel; bf16 chains read 8 elements a vector.
TEST(EmulatedKernels, MultiTensorViewsOffTheVectorsOrStrided_TakeTheirOwnPaths) {
  auto at_offset = [](DType dtype, int64_t n, int64_t offset) {
    Tensor whole = complete_inputs(*parse_fusion("fusion f(x: " + std::string(dtype_name(dtype)) + "[" + std::to_string(n + offset) +
                                                     "]) {\n  return x\n}\n", "x.fusion", std::nullopt),
                                   {Tensor()}, {}, 5)[0];
    return whole.as_strided({n}, {1}, offset);
  };
  const std::string text = R"(fusion f(x0: f32[1000], g0: f32[1000], x1: f32[1001], g1: f32[1001], x2: f32[64], g2: f32[64], s: f32) {
  a0 = mul(g0, s)
  y0 = add(x0, a0)
  a1 = mul(g1, s)
  y1 = add(x1, a1)
  a2 = mul(g2, s)
  y2 = add(x2, a2)
  return y0 -> x0, y1 -> x1, y2 -> x2
})";
  Tensor strided = at_offset(DType::f32, 128, 0).as_strided({64}, {2}, 0);
  std::vector<Tensor> given = {at_offset(DType::f32, 1000, 1), at_offset(DType::f32, 1000, 1), Tensor(), Tensor(), Tensor(), strided, Tensor()};
  int written = 0;
  std::vector<std::string> launches;
  expect_emulation_matches_cpu(text, {}, Flavour::default_choice, 4, given, nullptr, &written, &launches);
  EXPECT_EQ(written, 3);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0], "apart: member 2");
  EXPECT_NE(launches[2].find("2 tensors, 1 in vectors"), std::string::npos) << launches[2];

  const std::string halves = R"(fusion f(x0: bf16[7], x1: bf16[4099], x2: bf16[16, 3], s: f32) {
  y0 = mul(x0, s)
  z0 = cast(y0, dtype=bf16)
  y1 = mul(x1, s)
  z1 = cast(y1, dtype=bf16)
  y2 = mul(x2, s)
  z2 = cast(y2, dtype=bf16)
  return z0 -> x0, z1 -> x1, z2 -> x2
})";
  launches.clear();
  expect_emulation_matches_cpu(halves, {}, Flavour::default_choice, 4, {}, nullptr, &written, &launches);
  EXPECT_EQ(written, 3);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0].find("multi_tensor r1.0_v8_t256_i2_v grid 4, 3 tensors, 3 in vectors"), std::string::npos) << launches[0];
}

TEST(EmulatedKernels, LongRowsReReadFromMemory) {
  every_flavour(R"(fusion g(x: f32[3, 20000]) {
  y = softmax(x, dim=-1)
  v, m = var_mean(x, dims=[1])
  return y, v, m
})", {});
}

// Cross-entropy (examples/cross_entropy.fusion: each row's target logit gathered once a row, the
// one-hot rows from iota) in every row-kernel shape: a warp per row (70 rows of 100), a block per
// row holding it in registers (5 of 1001, with edge elements), rows re-read from memory each pass
// (2 of 70001); targets at both ends of the vocabulary (0 and V - 1), i64 (and i32 in registers).
TEST(EmulatedKernels, CrossEntropyInEveryRowKernelShape) {
  const std::string text = testing::read_file(testing::source_path("examples/cross_entropy.fusion"));
  std::string i32_text = text;
  i32_text.replace(i32_text.find("target: i64[T]"), 14, "target: i32[T]");
  for (auto [rows, vocabulary] : {std::pair<int64_t, int64_t>{70, 100}, {5, 1001}, {2, 70001}})
    for (DType dtype : {DType::i64, DType::i32}) {
      if (dtype == DType::i32 && vocabulary != 1001) continue;
      SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(vocabulary) + ", " + std::string(dtype_name(dtype)) + " targets");
      Tensor target = Tensor::empty(dtype, {rows});
      for (int64_t r = 0; r < rows; ++r)
        store_int(target.data(), dtype, r, r % 3 == 0 ? 0 : r % 3 == 1 ? vocabulary - 1 : (r * 7919) % vocabulary);
      for (Flavour f : kFlavours)
        expect_emulation_matches_cpu(dtype == DType::i64 ? text : i32_text, {{"T", rows}, {"V", vocabulary}}, f, 4, {Tensor(), target});
    }
}

// The UserError a run raises, or "" where it runs.
template <class Run>
std::string user_error_of(Run&& run) {
  try {
    run();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// An index outside its gather's axis: the kernel loads nothing there and sets its error flag, which
// the run reads at its end as the CPU reference's user error, word for word (one bad index, so the
// same position): an element gather past the axis' end, a negative i32 index along a middle axis,
// one inside a row reduction, and a cross-entropy target past the vocabulary in a row kernel
// holding the row and in the streaming log-sum-exp (i32). An index longer than its input off the
// axis is refused before the launch, as the reference refuses it.
TEST(EmulatedKernels, GatherIndexOutOfRange_IsTheCpusUserError) {
  const std::string cross_entropy = testing::read_file(testing::source_path("examples/cross_entropy.fusion"));
  std::string loss_only;
  for (const auto& k : testing::kernel_cases())
    if (k.name == "CrossEntropyLossOverLongRows") loss_only = k.text;
  ASSERT_FALSE(loss_only.empty());
  struct Case {
    std::string text;
    Bindings sizes;
    int64_t at;      // the element of input 1 (the index) made bad
    int64_t value;
    const char* expected;  // a part of the message
  };
  const Case cases[] = {
      {"fusion f(x: f32[R, 10], i: i64[R, 5]) {\n  g = gather(x, i, dim=1)\n  y = mul(g, 2.0)\n  return y\n}\n", {{"R", 7}}, 13, 10,
       "gather: index value 10 at index position [2, 3] is out of range for axis 1 of the input 'x' [7, 10]; expected 0 to 9"},
      {"fusion f(x: bf16[3, 10, 40], i: i32[3, 7, 32]) {\n  g = gather(x, i, dim=1)\n  return g\n}\n", {}, 300, -1,
       "index value -1 at index position [1, 2, 12] is out of range for axis 1 of the input 'x' [3, 10, 40]; expected 0 to 9 "
       "(negative indices are not taken"},
      {"fusion f(x: f32[R, 40], i: i64[R, K]) {\n  g = gather(x, i, dim=1)\n  s = sum(g, dims=[1])\n  return s\n}\n",
       {{"R", 3}, {"K", 301}}, 650, 40, "index value 40 at index position [2, 48] is out of range for axis 1"},
      {cross_entropy, {{"T", 5}, {"V", 1001}}, 3, 1001,
       "emulated.fusion:12:8: gather: index value 1001 at index position [3, 0] is out of range for axis 1 of the input 'x' "
       "[5, 1001]; expected 0 to 1000"},
      {loss_only, {{"T", 3}, {"V", 20003}}, 1, 50300, "index value 50300 at index position [1, 0] is out of range for axis 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto fusion = parse_fusion(c.text, "emulated.fusion", std::nullopt);
    std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), c.sizes, 11);
    store_int(inputs[1].data(), inputs[1].dtype(), c.at, c.value);
    FusionExecutor reference(parse_fusion(c.text, "emulated.fusion", std::nullopt), {DeviceChoice::cpu});
    std::string expected = user_error_of([&] { reference.run(inputs); });
    EXPECT_NE(expected.find(c.expected), std::string::npos) << expected;
    for (Flavour f : kFlavours) {
      SCOPED_TRACE(flavour_name(f));
      std::vector<Tensor> outputs;
      EXPECT_EQ(user_error_of([&] { emulate_fusion(c.text, inputs, f, 4, outputs); }), expected);
    }
  }
  // declared [A, 10] and [B, 3]: bound as 2 and 4 rows, the index is longer than the input on axis 0
  const std::string longer = "fusion f(x: f32[A, 10], i: i64[B, 3]) {\n  g = gather(x, i, dim=1)\n  return g\n}\n";
  auto fusion = parse_fusion(longer, "emulated.fusion", std::nullopt);
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(2), {{"A", 2}, {"B", 4}}, 11);
  FusionExecutor reference(parse_fusion(longer, "emulated.fusion", std::nullopt), {DeviceChoice::cpu});
  std::string expected = user_error_of([&] { reference.run(inputs); });
  EXPECT_NE(expected.find("gather: index [4, 3] is longer than the input [2, 10] on axis 0 (4 > 2)"), std::string::npos) << expected;
  std::vector<Tensor> outputs;
  EXPECT_EQ(user_error_of([&] { emulate_fusion(longer, inputs, Flavour::default_choice, 4, outputs); }), expected);
}

TEST(EmulatedKernels, ColumnReductionsOfBoolsAndHalves) {
  every_flavour(R"(fusion f(b: bool[T, H], h: f16[T, H]) {
  any = max(b, dims=[0])
  all = min(b, dims=[0])
  count = sum(b, dims=[0])
  a = mean(h, dims=[0], keepdim=true)
  return any, all, count, a
})", {{"T", 700}, {"H", 48}});
}

// var_mean over the outer axis of values far from zero with a small spread (a column kernel sums
// each step's values less the running mean): a first value far from the rest, a column that drifts
// row by row, a constant column, and noise around 1000; 700 rows, not a whole number of steps.
TEST(EmulatedKernels, ColumnVarMeanOfValuesFarFromZero) {
  const int64_t T = 700, H = 8;
  Tensor x = Tensor::empty(DType::f32, {T, H});
  float* v = x.data_as<float>();
  for (int64_t r = 0; r < T; ++r)
    for (int64_t c = 0; c < H; ++c) {
      float noise = float((r * 7919 + c * 104729) % 2001 - 1000) * 1e-6f;
      float value = 1000.0f + noise;
      if (c == 0 && r == 0) value = 1.0e4f;
      if (c == 1) value = 1000.0f + float(r) * 0.01f;
      if (c == 2) value = 1234.5f;
      v[r * H + c] = value;
    }
  for (Flavour f : kFlavours)
    expect_emulation_matches_cpu(R"(fusion f(x: f32[T, H]) {
  v, m = var_mean(x, dims=[0], correction=1)
  return v, m
})", {{"T", T}, {"H", H}}, f, 4, {x});
}

// var_mean over columns holding an infinity: the mean is +-inf and the variance NaN, as on the
// CPU (a thread's or a block's partial of no elements merged into an infinite mean made it NaN:
// mean + (0 - inf) * 0); grid and row forms alike.
TEST(EmulatedKernels, VarMeanOfAnInfiniteValue_IsAnInfiniteMean) {
  const int64_t T = 2, H = 4096;
  Tensor x = Tensor::empty(DType::f32, {T, H});
  float* v = x.data_as<float>();
  for (int64_t i = 0; i < T * H; ++i) v[i] = float(i % 13) * 0.25f;
  v[0 * H + 0] = 1.0f;
  v[1 * H + 0] = std::numeric_limits<float>::infinity();
  v[0 * H + 1] = -std::numeric_limits<float>::infinity();
  expect_emulation_matches_cpu("fusion f(x: f32[T, H]) {\n  v, m = var_mean(x, dims=[0], correction=1)\n  return v, m\n}\n",
                               {{"T", T}, {"H", H}}, Flavour::default_choice, 4, {x});
  expect_emulation_matches_cpu("fusion f(x: f32[T, H]) {\n  v, m = var_mean(x, dims=[1], correction=0)\n  return v, m\n}\n",
                               {{"T", T}, {"H", H}}, Flavour::default_choice, 4, {x});
}

// Column and row reductions reading views of the inputs (made on the host): a transposed input,
// a strided slice, and an operand broadcast along the kept axis.
TEST(EmulatedKernels, ReductionsOfViewsAndBroadcasts) {
  every_flavour(R"(fusion f(x: f32[H, T], y: bf16[T, H], c: bf16[T, 1], s: f32[600, 17]) {
  xt = permute(x, dims=[1, 0])
  a = sum(xt, dims=[0])
  yc = add(y, c)
  b = sum(yc, dims=[0], keepdim=true)
  sl = slice(s, starts=[0, 1], ends=[600, 17], steps=[1, 2])
  m = max(sl, dims=[0])
  r = sum(sl, dims=[1])
  return a, b, m, r
})", {{"H", 40}, {"T", 600}});
}

// A column kernel's split of the reduced axis is one wave: first from the threads an SM holds,
// then (fit_column_grid) from the compiled kernel's occupancy, which registers may lower.
TEST(EmulatedKernels, ColumnGridFitsTheKernelsOccupancy) {
  const std::string text = "fusion cs(x: bf16[T, H]) {\n  s = sum(x, dims=[0])\n  return s\n}\n";
  auto fusion = decompose_composites(*parse_fusion(text, "cs.fusion", std::nullopt));
  Segmentation segmentation = segment_for_cuda(*fusion);
  ASSERT_EQ(segmentation.segments.size(), 1u) << segmentation.str();
  const Segment& s = segmentation.segments[0];
  auto analyzed = analyze_kernel(s.ops, s.inputs, s.outputs);
  ASSERT_TRUE(std::holds_alternative<KernelAnalysis>(analyzed));
  const KernelAnalysis& a = std::get<KernelAnalysis>(analyzed);
  Tensor x = Tensor::empty(DType::bf16, {4096, 2048}), out = Tensor::empty(DType::bf16, {2048});
  cuda::LaunchTarget target;
  target.sm_count = 16;
  target.shared_per_sm = 228 * 1024;
  cuda::LaunchPlan plan = cuda::plan_launch(a, {4096, 2048}, {&x, &out}, {}, target);
  ASSERT_TRUE(plan.launch);
  ASSERT_GT(plan.variant.tile_x, 0) << "a column kernel";
  // 2048 kept columns: 16 blocks of 32 threads x 4 elements (column_max_vector); 8 threads a
  // block along the 4096 rows
  EXPECT_EQ(plan.variant.vector, 4);
  EXPECT_EQ(plan.grid_x, 16u);
  EXPECT_EQ(plan.grid_y, 8u);  // 16 SMs x 8 blocks of 256 threads, over 16 column blocks
  EXPECT_EQ(plan.column_max_splits, 4096 / (8 * 16));
  EXPECT_EQ(plan.workspace_bytes, 8 * plan.workspace_bytes_per_split);
  cuda::fit_column_grid(plan, 3, target);  // registers hold an SM to 3 blocks
  EXPECT_EQ(plan.grid_y, 3u);
  EXPECT_EQ(plan.workspace_bytes, 3 * plan.workspace_bytes_per_split);
  cuda::fit_column_grid(plan, 64, target);  // never more splits than 16 rows a thread allow
  EXPECT_EQ(plan.grid_y, 32u);
}

// Grid reductions (KernelVariant::grid): few long rows read along the reduced axis, each row split
// over blocks whose partials the row's last block to arrive combines. Each test states the
// structure first — one kernel, a grid reduction, its grid — then compares with the CPU reference.
struct GridRun {
  std::vector<Tensor> outputs, expected;
  std::vector<std::string> names, launches;
};

// Every output of `run` against the CPU reference's.
void expect_outputs_match(const GridRun& run) {
  for (size_t i = 0; i < run.expected.size(); ++i)
    EXPECT_TRUE(testing::tensors_close(run.outputs[i], run.expected[i])) << "output " << run.names[i];
}

// `text` on inputs drawn as expect_emulation_matches_cpu draws them (the same on every call), on
// 4 SMs, its kernels' blocks in order (0) or shuffled by `block_order`, under `tuning`, and the
// CPU reference.
void run_grid(const std::string& text, const Bindings& sizes, Flavour flavour, std::vector<Tensor> given, unsigned block_order,
              GridRun& run, const cuda::KernelTuning& tuning = {}) {
  auto fusion = parse_fusion(text, "emulated.fusion", std::nullopt);
  given.resize(fusion->inputs().size());
  std::vector<Tensor> inputs = complete_inputs(*fusion, given, sizes, 11);
  FusionExecutor reference(parse_fusion(text, "emulated.fusion", std::nullopt), {DeviceChoice::cpu});
  run.expected = reference.run(inputs);
  emulate_fusion(text, inputs, flavour, 4, run.outputs, nullptr, nullptr, block_order, &run.launches, tuning);
  for (const Value* out : fusion->outputs()) run.names.push_back(out->name);
}

// Each output of `a` has the bytes of `b`'s.
void expect_the_same_bytes(const GridRun& a, const GridRun& b, const std::string& what) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const Tensor &x = a.outputs[i], &y = b.outputs[i];
    ASSERT_EQ(x.numel(), y.numel());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), size_t(x.numel()) * dtype_size(x.dtype())), 0) << "output " << a.names[i] << " changed " << what;
  }
}

// One kernel whose variant names `mark` ("_g_", "_io_"), run with its blocks in order, then in three
// shuffled orders (alloy_emulate_grid), under `tuning`: each run's outputs have the first run's bytes.
void expect_the_same_bits_in_any_block_order(const std::string& text, const Bindings& sizes, const std::string& mark,
                                             const cuda::KernelTuning& tuning = {}) {
  GridRun first;
  run_grid(text, sizes, Flavour::default_choice, {}, 0, first, tuning);
  ASSERT_EQ(first.launches.size(), 1u);
  ASSERT_NE(first.launches[0].find(mark), std::string::npos) << first.launches[0];
  for (unsigned order : {0u, 1u, 2u, 3u}) {
    SCOPED_TRACE("block order " + std::to_string(order));
    GridRun again;
    run_grid(text, sizes, Flavour::default_choice, {}, order, again, tuning);
    expect_the_same_bytes(first, again, "with the block order");
  }
}

void expect_one_grid_reduction(const GridRun& run, const std::string& grid) {
  ASSERT_EQ(run.launches.size(), 1u) << ::testing::PrintToString(run.launches);
  EXPECT_NE(run.launches[0].find("_g_"), std::string::npos) << "not a grid reduction: " << run.launches[0];
  EXPECT_NE(run.launches[0].find(" grid " + grid), std::string::npos) << run.launches[0];
}

void expect_grid_reduction_matches_cpu(const std::string& text, const Bindings& sizes, const std::string& grid,
                                       std::vector<Tensor> given = {}) {
  for (Flavour f : kFlavours) {
    SCOPED_TRACE(flavour_name(f));
    GridRun run;
    run_grid(text, sizes, f, given, 0, run);
    expect_one_grid_reduction(run, grid);
    ASSERT_EQ(run.outputs.size(), run.expected.size());
    expect_outputs_match(run);
  }
}

// A bf16 vector of 10^6 + 3 elements to scalars: its sum (bf16), the sum of its squares in f32 and
// the root of that (a gradient norm), max, min and mean, in one kernel. On 4 SMs of 4 blocks: 16
// blocks of 256 threads, 8 elements a vector, the last 3 elements edge elements. Then the same
// vector starting 3 elements past a vector boundary (5 edge elements before the first vector).
TEST(EmulatedKernels, GridReductionsOfAnOddLengthBf16Vector) {
  const std::string text = testing::kLongVectorToScalars;
  const int64_t n = 1000003;
  expect_grid_reduction_matches_cpu(text, {{"N", n}}, "16x1");
  Tensor storage = Tensor::empty(DType::bf16, {n + 3});
  for (int64_t i = 0; i < storage.numel(); ++i) store_double(storage.data(), DType::bf16, i, std::sin(double(i) * 0.37) * 3.0 + 0.25);
  expect_grid_reduction_matches_cpu(text, {{"N", n}}, "16x1", {storage.as_strided({n}, {1}, 3)});
}

// [3, N] reduced over the long axis: each row (starting at another residue of the vector) split
// over 5 blocks (16 a wave, over 3 rows); sum, max and var_mean per row.
TEST(EmulatedKernels, GridReductionOfFewLongRows) {
  expect_grid_reduction_matches_cpu(R"(fusion f(x: bf16[R, N]) {
  s = sum(x, dims=[1])
  m = max(x, dims=[1], keepdim=true)
  v, mu = var_mean(x, dims=[1], correction=1)
  return s, m, v, mu
})", {{"R", 3}, {"N", 100003}}, "5x3");
}

// var_mean of a long vector of values far from zero with a small spread: every thread's steps sum
// their values less its running mean, blocks and the grid merge by Chan's formula. A first value
// far from the rest, then 1000 plus noise of 1e-3 with a slow drift; in f32, and in bf16 shifted
// by 1000 in f32 (the values' deviations near f32's resolution at 1000).
// n f32 values near 1000 (deviations of 1e-3 and a slow drift), the first an outlier of 10^4: a
// thread's first value is its first mean.
Tensor far_from_zero_values(int64_t n) {
  Tensor x = Tensor::empty(DType::f32, {n});
  float* v = x.data_as<float>();
  for (int64_t i = 0; i < n; ++i) v[i] = 1000.0f + float((i * 7919) % 2001 - 1000) * 1e-6f + float(i) * 1e-8f;
  v[0] = 1.0e4f;
  return x;
}

TEST(EmulatedKernels, GridVarMeanOfValuesFarFromZero) {
  const int64_t n = 300007;
  Tensor x = far_from_zero_values(n);
  expect_grid_reduction_matches_cpu(R"(fusion f(x: f32[N]) {
  v, m = var_mean(x, dims=[0], correction=1)
  return v, m
})", {{"N", n}}, "16x1", {x});
  expect_grid_reduction_matches_cpu(R"(fusion f(x: bf16[N]) {
  x32 = cast(x, dtype=f32)
  y = add(x32, 1000.0)
  v, m = var_mean(y, dims=[0], correction=0)
  return v, m
})", {{"N", n}}, "16x1");
}

// var_mean merging a thread's sums every M steps (grid_welford_steps), not every step: the values
// far from zero with an outlier first (the first mean of the thread), a row split over blocks with
// a sum and a max beside it, against the CPU reference and in any block order.
TEST(EmulatedKernels, GridVarMeanMergingEveryFewSteps) {
  const int64_t n = 300007;
  Tensor x = far_from_zero_values(n);
  const std::string far = R"(fusion f(x: f32[N]) {
  v, m = var_mean(x, dims=[0], correction=1)
  return v, m
})";
  const std::string rows = R"(fusion f(x: f32[R, N]) {
  y = add(x, 1000.0)
  s = sum(y, dims=[1])
  m = max(x, dims=[1])
  v, mu = var_mean(y, dims=[1], correction=1)
  return s, m, v, mu
})";
  for (int steps : {3, 16}) {
    SCOPED_TRACE(std::to_string(steps) + " steps a merge");
    cuda::KernelTuning tuning;
    tuning.grid_welford_steps = steps;
    const std::string mark = "_ws" + std::to_string(steps) + "_";
    GridRun run;
    run_grid(far, {{"N", n}}, Flavour::default_choice, {x}, 0, run, tuning);
    ASSERT_EQ(run.launches.size(), 1u);
    EXPECT_NE(run.launches[0].find(mark), std::string::npos) << run.launches[0];
    expect_outputs_match(run);
    GridRun split;
    run_grid(rows, {{"R", 3}, {"N", 200001}}, Flavour::default_choice, {}, 0, split, tuning);
    expect_outputs_match(split);
    if (steps == 3) expect_the_same_bits_in_any_block_order(rows, {{"R", 3}, {"N", 200001}}, mark, tuning);
  }
}

// Sum, max and var_mean of odd rows split over blocks (odd lengths, so a block's last step and the
// row's edge elements are partial), f32 and bf16, under `tuning`: one launch of the variant marked
// `mark`, matching the CPU reference, and (bf16) the same bits in any block order.
void expect_split_rows_match(const cuda::KernelTuning& tuning, const std::string& mark) {
  for (const char* type : {"f32", "bf16"}) {
    SCOPED_TRACE(type);
    const std::string rows = std::string("fusion f(x: ") + type + R"([R, N]) {
  x32 = cast(x, dtype=f32)
  y = add(x32, 1000.0)
  s = sum(y, dims=[1])
  m = max(x, dims=[1])
  v, mu = var_mean(y, dims=[1], correction=1)
  return s, m, v, mu
})";
    GridRun split;
    run_grid(rows, {{"R", 3}, {"N", 100001}}, Flavour::default_choice, {}, 0, split, tuning);
    ASSERT_EQ(split.launches.size(), 1u);
    EXPECT_NE(split.launches[0].find(mark), std::string::npos) << split.launches[0];
    expect_outputs_match(split);
    if (std::string(type) == "bf16") expect_the_same_bits_in_any_block_order(rows, {{"R", 3}, {"N", 100001}}, mark, tuning);
  }
}

// Grid reductions loading each step's vectors one step ahead (KernelVariant::loads_ahead): var_mean
// of values far from zero, and sum, max and var_mean of rows split over blocks (odd lengths, so a
// block's last step and the row's edge elements are partial), bf16 (two vectors a step) too, against
// the CPU reference and the same bits in any block order; with windowed var_mean, not ahead.
TEST(EmulatedKernels, GridReductionsLoadingAStepAhead) {
  cuda::KernelTuning tuning;
  tuning.grid_loads_ahead = true;
  const int64_t n = 300007;
  Tensor x = far_from_zero_values(n);
  GridRun run;
  run_grid("fusion f(x: f32[N]) {\n  v, m = var_mean(x, dims=[0], correction=1)\n  return v, m\n}\n", {{"N", n}}, Flavour::default_choice, {x},
           0, run, tuning);
  ASSERT_EQ(run.launches.size(), 1u);
  EXPECT_NE(run.launches[0].find("_g_la_"), std::string::npos) << run.launches[0];
  expect_outputs_match(run);
  expect_split_rows_match(tuning, "_la_");
  tuning.grid_welford_steps = 4;
  GridRun windows;
  run_grid("fusion f(x: f32[N]) {\n  v, m = var_mean(x, dims=[0], correction=1)\n  return v, m\n}\n", {{"N", n}}, Flavour::default_choice, {x},
           0, windows, tuning);
  EXPECT_EQ(windows.launches[0].find("_la"), std::string::npos) << windows.launches[0];
}

// Grid reductions loading 128 bytes a thread a step (KernelVariant::step_bytes: eight 16-byte
// vectors of one leaf, four of each of two): var_mean of values far from zero, a dot product's
// two leaves, and sum, max and var_mean of odd rows split over blocks (partial last steps), f32
// and bf16, against the CPU reference and the same bits in any block order.
TEST(EmulatedKernels, GridReductionsLoadingEightVectorsAStep) {
  cuda::KernelTuning tuning;
  tuning.grid_step_bytes = 128;
  const int64_t n = 300007;
  GridRun run;
  run_grid("fusion f(x: f32[N]) {\n  v, m = var_mean(x, dims=[0], correction=1)\n  return v, m\n}\n", {{"N", n}}, Flavour::default_choice,
           {far_from_zero_values(n)}, 0, run, tuning);
  ASSERT_EQ(run.launches.size(), 1u);
  EXPECT_NE(run.launches[0].find("_sb128_"), std::string::npos) << run.launches[0];
  expect_outputs_match(run);
  GridRun dot;
  run_grid("fusion f(x: f32[N], y: f32[N]) {\n  p = mul(x, y)\n  s = sum(p)\n  return s\n}\n", {{"N", n}}, Flavour::default_choice, {}, 0,
           dot, tuning);
  ASSERT_EQ(dot.launches.size(), 1u);
  EXPECT_NE(dot.launches[0].find("_sb128_"), std::string::npos) << dot.launches[0];
  expect_outputs_match(dot);
  expect_split_rows_match(tuning, "_sb128_");
}

// Bit-identical results whatever the order the blocks run in, hence whichever block of a row
// arrives last and combines the partials: the emulation runs every block in order twice, then in
// three shuffled orders, and every run's outputs must have the same bytes.
TEST(EmulatedKernels, GridReductionsGiveTheSameBitsInAnyBlockOrder) {
  const std::vector<std::pair<std::string, Bindings>> cases = {
      {R"(fusion g(x: bf16[N]) {
  x32 = cast(x, dtype=f32)
  sq = mul(x32, x32)
  ss = sum(sq)
  norm = sqrt(ss)
  return ss, norm
})", {{"N", 1000003}}},
      {R"(fusion f(x: f32[R, N]) {
  y = add(x, 1000.0)
  s = sum(y, dims=[1])
  m = max(x, dims=[1])
  v, mu = var_mean(y, dims=[1], correction=1)
  return s, m, v, mu
})", {{"R", 3}, {"N", 200001}}}};
  for (const auto& [text, sizes] : cases) {
    SCOPED_TRACE(text);
    expect_the_same_bits_in_any_block_order(text, sizes, "_g_");
  }
}

// Inner-outer kernels (SchedulerKind::inner_outer): the layer norm and RMSNorm backward, each
// block's next row loaded ahead, at 37 rows also not (KernelTuning::inner_outer_prefetch), and in
// bf16 at 37 rows its next three (inner_outer_rows_ahead: more rows ahead than some blocks have), on 4 SMs, in bf16
// with rows of 1000 (vectors of 8, the last thread's past the row's end) and in f32 with rows of
// 131 (vectors of one): one row (one block, no workspace); 3 rows (fewer than a full grid: 3
// blocks of one row, none to load ahead); 37 rows (blocks of one or more rows, partials combined
// in two levels, a row count no grid of 4 SMs divides: the blocks end on different rows). One
// kernel each, an inner-outer variant ("_io_"), loading ahead ("_pf_", "_pf3_") where asked, its results
// the CPU reference's. (Not the same bytes on and off: each variant is compiled on its own, and
// the compiler may contract a multiply and an add into one rounding in one and not the other; the
// same bits on every run of one variant are the claim, checked below.)
TEST(EmulatedKernels, InnerOuterNormalizationBackwardsOfOddSizes) {
  for (auto [T, d] : {std::pair<std::string, int64_t>{"bf16", 1000}, {"f32", 131}})
    for (int64_t n : {1, 3, 37})
      for (const std::string& text : {testing::layer_norm_backward(T), testing::rms_norm_backward(T)}) {
        SCOPED_TRACE(T + " N=" + std::to_string(n) + " D=" + std::to_string(d) + "\n" + text);
        for (int ahead : {1, 0, 3}) {
          if ((ahead == 3 && (n != 37 || T != "bf16")) || (ahead == 0 && n != 37)) continue;
          SCOPED_TRACE(std::to_string(ahead) + " rows loaded ahead");
          cuda::KernelTuning tuning;
          tuning.inner_outer_prefetch = ahead > 0;
          tuning.inner_outer_rows_ahead = std::max(1, ahead);
          GridRun run;
          run_grid(text, {{"N", n}, {"D", d}}, Flavour::default_choice, {}, 0, run, tuning);
          ASSERT_EQ(run.launches.size(), 1u) << ::testing::PrintToString(run.launches);
          const std::string& launch = run.launches[0];
          EXPECT_NE(launch.find("_io_"), std::string::npos) << "not an inner-outer kernel: " << launch;
          if (ahead == 0) EXPECT_EQ(launch.find("_pf"), std::string::npos) << launch;
          else EXPECT_NE(launch.find(ahead == 1 ? "_io_pf_" : "_io_pf" + std::to_string(ahead) + "_"), std::string::npos) << launch;
          int64_t grid = std::stoll(launch.substr(launch.find(" grid ") + 6));
          if (n <= 3) EXPECT_EQ(grid, n) << launch;
          else EXPECT_TRUE(grid > 1 && grid < n && n % grid != 0) << launch;
          ASSERT_EQ(run.outputs.size(), run.expected.size());
          expect_outputs_match(run);
        }
      }
}

// The kernel flavours of an inner-outer kernel (late loads with 64-bit offsets, values recomputed),
// the next row loaded ahead (the default).
TEST(EmulatedKernels, InnerOuterInEveryFlavour) {
  every_flavour(testing::layer_norm_backward("bf16"), {{"N", 60}, {"D", 1024}});
}

// Bit-identical column results whatever the order the blocks run in, hence whichever blocks arrive
// last and combine the partials (groups of blocks, then the groups): every block in order, then in
// three shuffled orders, each block's next row loaded ahead; each run's outputs must have the same
// bytes.
TEST(EmulatedKernels, InnerOuterGivesTheSameBitsInAnyBlockOrder) {
  for (const std::string& text : {testing::layer_norm_backward("f32"), testing::rms_norm_backward("bf16")}) {
    SCOPED_TRACE(text);
    expect_the_same_bits_in_any_block_order(text, {{"N", 64}, {"D", 512}}, "_io_pf_");
  }
}

// The partials combined by a tree of three levels (40 blocks: nodes of 4, 40 -> 10 -> 3 -> the
// root), of one (the last block reads all 40; KernelTuning::inner_outer_combine_levels) and over
// the grid (0: every block a share of the columns past the grid's barrier, which the plan takes at
// two blocks an SM or fewer: 8 blocks of 5 rows, 72 columns; the emulation runs the blocks twice): the CPU
// reference's results, the same bits in any block order.
TEST(EmulatedKernels, InnerOuterCombineTreesOfOtherDepths) {
  const std::string text = testing::layer_norm_backward("f32");
  for (int levels : {1, 3, 0}) {
    SCOPED_TRACE(std::to_string(levels) + " levels");
    cuda::KernelTuning tuning;
    tuning.inner_outer_combine_levels = levels;
    if (levels == 0) tuning.inner_outer_blocks_per_sm = 2;
    // (the grid's combine at 72 columns: its warp shuffles are the emulation's slowest part)
    const Bindings sizes{{"N", 40}, {"D", levels == 0 ? 72 : 256}};
    GridRun run;
    run_grid(text, sizes, Flavour::default_choice, {}, 0, run, tuning);
    ASSERT_EQ(run.launches.size(), 1u);
    EXPECT_NE(run.launches[0].find("_l" + std::to_string(levels) + "_"), std::string::npos) << run.launches[0];
    EXPECT_NE(run.launches[0].find(levels == 0 ? " grid 8" : " grid 40"), std::string::npos) << run.launches[0];
    ASSERT_EQ(run.outputs.size(), run.expected.size());
    expect_outputs_match(run);
    expect_the_same_bits_in_any_block_order(text, sizes, "_l" + std::to_string(levels) + "_", tuning);
  }
}

// Column partials in shared memory (KernelVariant::shared_partials, which the plan takes where a
// block has not the registers for them beside its row: 12288 bf16 columns and more; forced here
// at narrow rows): with the tree and with the combine over the grid, layer norm (two partials a
// column) and RMSNorm of an odd width, against the CPU reference, the same bits in any block order.
TEST(EmulatedKernels, InnerOuterPartialsInSharedMemory) {
  // (CI time: the layer norm over the grid, RMSNorm by the tree)
  for (const auto& [text, d, levels] : {std::tuple{testing::layer_norm_backward("f32"), int64_t(72), 0},
                                        {testing::rms_norm_backward("bf16"), int64_t(131), 3}}) {
    SCOPED_TRACE(std::to_string(levels) + " levels, D=" + std::to_string(d) + "\n" + text);
    cuda::KernelTuning tuning;
    tuning.inner_outer_shared_partials = true;
    tuning.inner_outer_combine_levels = levels;
    if (levels == 0) tuning.inner_outer_blocks_per_sm = 2;
    const Bindings sizes{{"N", 41}, {"D", d}};
    GridRun run;
    run_grid(text, sizes, Flavour::default_choice, {}, 0, run, tuning);
    ASSERT_EQ(run.launches.size(), 1u);
    EXPECT_NE(run.launches[0].find("_sp_"), std::string::npos) << run.launches[0];
    ASSERT_EQ(run.outputs.size(), run.expected.size());
    expect_outputs_match(run);
    if (levels == 0) expect_the_same_bits_in_any_block_order(text, sizes, "_sp_", tuning);
  }
}

// Row groups (KernelVariant::row_groups): a block reduces G rows at once, each group of threads
// its own row past its own named barrier, the groups' column partials summed in shared memory
// after the rows; with the tree and with the combine over the grid, rows that G does not divide
// (41), layer norm (two row sums) and RMSNorm, against the CPU reference, the same bits in any
// block order.
TEST(EmulatedKernels, InnerOuterRowGroups) {
  // (CI time: RMSNorm over the grid with 3 groups only; the block orders with 3 groups only)
  for (const char* which : {"layer_norm", "rms_norm"}) {
    const bool ln = std::string(which) == "layer_norm";
    const std::string text = ln ? testing::layer_norm_backward("f32") : testing::rms_norm_backward("f32");
    for (int levels : {3, 0})
      for (int groups : {2, 3}) {
        if (!ln && (levels != 0 || groups != 3)) continue;
        SCOPED_TRACE(std::string(which) + ", " + std::to_string(levels) + " levels, " + std::to_string(groups) + " row groups");
        cuda::KernelTuning tuning;
        tuning.inner_outer_combine_levels = levels;
        tuning.inner_outer_row_groups = groups;
        if (levels == 0) tuning.inner_outer_blocks_per_sm = 2;
        const Bindings sizes{{"N", 41}, {"D", 72}};
        GridRun run;
        run_grid(text, sizes, Flavour::default_choice, {}, 0, run, tuning);
        ASSERT_EQ(run.launches.size(), 1u);
        const std::string mark = "_rg" + std::to_string(groups) + "_";
        EXPECT_NE(run.launches[0].find(mark), std::string::npos) << run.launches[0];
        ASSERT_EQ(run.outputs.size(), run.expected.size());
        expect_outputs_match(run);
        if (groups == 3) expect_the_same_bits_in_any_block_order(text, sizes, mark, tuning);
      }
  }
  // without rows loaded ahead: a row group's barrier ends each of its rows
  cuda::KernelTuning plain;
  plain.inner_outer_row_groups = 3;
  plain.inner_outer_prefetch = false;
  GridRun run;
  run_grid(testing::layer_norm_backward("f32"), {{"N", 41}, {"D", 72}}, Flavour::default_choice, {}, 0, run, plain);
  ASSERT_EQ(run.launches.size(), 1u);
  EXPECT_NE(run.launches[0].find("_rg3_"), std::string::npos) << run.launches[0];
  EXPECT_EQ(run.launches[0].find("_pf"), std::string::npos) << run.launches[0];
  expect_outputs_match(run);
}

// Rows ahead through shared memory (KernelVariant::staged_rows): each thread copies its vectors of
// the row R ahead into a ring of R + 1 slots and reads the current row's from its slot (a plain
// copy here: the order of slots and rows is what runs); one and three rows ahead, with the tree and
// over the grid, in row groups, f32 (vectors of 16 bytes of 4 floats at 72 columns) and bf16 (and
// vectors of two bf16 at 70 columns: copies of 4 bytes), rows
// that the grid does not divide (41), against the CPU reference, the same bits in any block order.
TEST(EmulatedKernels, InnerOuterStagedRows) {
  struct Case {
    const char* which;
    const char* dtype;
    int staged, levels, groups;
  };
  for (const Case& c : {Case{"layer_norm", "f32", 1, 3, 1}, Case{"layer_norm", "bf16", 3, 0, 1}, Case{"rms_norm", "f32", 3, 3, 1},
                        Case{"layer_norm", "f32", 2, 0, 3}, Case{"rms_norm", "bf16", 2, 3, 1}}) {
    const bool ln = std::string(c.which) == "layer_norm";
    const std::string text = ln ? testing::layer_norm_backward(c.dtype) : testing::rms_norm_backward(c.dtype);
    SCOPED_TRACE(std::string(c.which) + " " + c.dtype + ", " + std::to_string(c.staged) + " rows staged, " + std::to_string(c.levels) +
                 " levels, " + std::to_string(c.groups) + " row groups");
    cuda::KernelTuning tuning;
    tuning.inner_outer_staged_rows = c.staged;
    tuning.inner_outer_combine_levels = c.levels;
    tuning.inner_outer_row_groups = c.groups;
    if (c.levels == 0) tuning.inner_outer_blocks_per_sm = 2;
    // (RMSNorm bf16 at 70 columns: vectors of two, copies of 4 bytes)
    const Bindings sizes{{"N", 41}, {"D", std::string(c.dtype) == "bf16" && !ln ? 70 : 72}};
    GridRun run;
    run_grid(text, sizes, Flavour::default_choice, {}, 0, run, tuning);
    ASSERT_EQ(run.launches.size(), 1u);
    const std::string ahead = c.staged > 1 ? "_pf" + std::to_string(c.staged) + "_" : "_pf_";
    EXPECT_NE(run.launches[0].find(ahead), std::string::npos) << run.launches[0];
    EXPECT_NE(run.launches[0].find("_sr_"), std::string::npos) << run.launches[0];
    ASSERT_EQ(run.outputs.size(), run.expected.size());
    expect_outputs_match(run);
    if (c.staged == 3 && ln) expect_the_same_bits_in_any_block_order(text, sizes, "_sr_", tuning);
  }
}

// Why `text` is not all generated kernels and views on CUDA ("" when it is): the segments the
// segmenter gave other schedulers, with their notes.
std::string why_not_kernels(const std::string& text) {
  auto lowered = unify_extents(*decompose_composites(*parse_fusion(text, "random.fusion", std::nullopt)));
  Segmentation segmentation = segment_for_cuda(*lowered);
  std::string why;
  for (const Segment& s : segmentation.segments)
    if (s.scheduler != SchedulerKind::noop && s.scheduler != SchedulerKind::bitmask && !is_generated_kernel(s.scheduler))
      why += std::string(scheduler_name(s.scheduler)) + " " + s.note + "\n";
  return why.empty() ? why : why + segmentation.str();
}

// Fusions nobody wrote (random_fusions.h), every flavour. ALLOY_RANDOM_FUSIONS=COUNT[:SEED] runs
// a longer campaign (and logs each fusion to stdout); by default a few fixed ones, for CI.
TEST(EmulatedKernels, RandomFusionsMatchTheCpu) {
  int count = 2;  // ~10 s alone, ~15 s beside other tests under ctest -j2 (the campaigns run apart)
  uint64_t seed = 1;
  const char* campaign = std::getenv("ALLOY_RANDOM_FUSIONS");
  if (campaign) {
    std::string c = campaign;
    count = std::stoi(c);
    if (auto colon = c.find(':'); colon != std::string::npos) seed = std::stoull(c.substr(colon + 1));
  }
  int fallbacks = 0, failed = 0;
  for (int i = 0; i < count; ++i) {
    testing::RandomFusion f = testing::RandomFusionWriter(seed * 1000003 + uint64_t(i)).write();
    std::string trace = "random fusion " + std::to_string(seed) + "/" + std::to_string(i) + " sm_count " +
                        std::to_string(f.sm_count) + " sizes:";
    for (const auto& [name, size] : f.sizes) trace += " " + name + "=" + std::to_string(size);
    SCOPED_TRACE(trace + "\n" + f.text);
    if (campaign) std::cout << "=== " << trace << "\n" << f.text << std::flush;
    int parts = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    try {
      if (std::string why = why_not_kernels(f.text); !why.empty()) {
        ++fallbacks;
        std::cout << "=== not kernels: " << why << std::flush;
        continue;
      }
      for (Flavour flavour : kFlavours) expect_emulation_matches_cpu(f.text, f.sizes, flavour, f.sm_count);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    if (::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() != parts) {
      ++failed;
      if (campaign) std::cout << "=== FAILED " << trace << "\n" << std::flush;
    }
  }
  std::cout << "random fusions: " << count << " run, " << fallbacks << " not all kernels, " << failed << " failed\n";
}

#endif  // ALLOY_HAVE_CUDA

}  // namespace
}  // namespace alloy
