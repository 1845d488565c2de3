// The launch planning's decisions (plan_launch), on fake tensors laid out as a run would pass
// them (no GPU, nothing read): when a pointwise kernel is a tile transpose and with which tiles and
// vectors, how rows and totals that are not a multiple of the vector keep vectorized bodies, and
// when a reduction of a few long rows is a grid reduction and over how many blocks.
#include <gtest/gtest.h>

#include <deque>
#include <map>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/launch_plan.h"
#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/backend/cpu/views.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"
#include "alloy/segment/schedulers/kernel_analysis.h"
#include "backend/cuda/kernel_cases.h"
#include "test_util.h"

namespace alloy {
namespace {

#ifndef ALLOY_HAVE_CUDA
TEST(LaunchPlan, NeedsTheCudaToolkit) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

// The plan of the fusion's only generated kernel for contiguous inputs of `sizes` at a fake address
// aligned like a fresh allocation (moved by `misalign` elements of the first input where given).
struct Planned {
  cuda::LaunchPlan plan;
  std::string leaves;  // the kernel's leaves by name, in order, comma-separated
  int transpose_shared_bytes = 0;
};

// `streaming_online`: LaunchTarget::streaming_online (log-sum-exp over long rows in one pass).
// `tuning`: the architecture's kernel choices (LaunchTarget::tuning).
Planned plan_of(const std::string& text, const Bindings& sizes, int64_t misalign = 0, bool streaming_online = true,
                const cuda::KernelTuning& tuning = {}) {
  auto fusion = decompose_composites(*parse_fusion(text, "plan.fusion", std::nullopt));
  Segmentation segmentation = segment_for_cuda(*fusion);
  const Segment* kernel = nullptr;
  for (const Segment& s : segmentation.segments)
    if (s.scheduler != SchedulerKind::noop) kernel = &s;
  EXPECT_NE(kernel, nullptr) << segmentation.str();
  if (!kernel) return {};
  auto analyzed = analyze_kernel(kernel->ops, kernel->inputs, kernel->outputs);
  EXPECT_TRUE(std::holds_alternative<KernelAnalysis>(analyzed));
  const KernelAnalysis& a = std::get<KernelAnalysis>(analyzed);
  std::map<const Value*, Tensor> values;
  auto shape_of = [&](const Value* v) {
    std::vector<int64_t> shape;
    for (const Extent& e : v->shape()) shape.push_back(*e.evaluate(sizes));
    return shape;
  };
  uintptr_t fake = uintptr_t(1) << 30;
  for (Value* in : fusion->inputs()) {
    std::vector<int64_t> shape = shape_of(in);
    uintptr_t at = fake + (in == fusion->inputs()[0] ? uintptr_t(misalign * dtype_size(in->dtype())) : 0);
    values[in] = Tensor::borrow(reinterpret_cast<void*>(at), Device{}, in->dtype(), shape, contiguous_strides(shape));
  }
  for (const Op* view : a.host_views) values[view->outputs[0]] = apply_view(*view, values.at(view->inputs[0]), shape_of(view->outputs[0]));
  for (Value* out : a.outputs) {
    std::vector<int64_t> shape = shape_of(out);
    values[out] = Tensor::borrow(reinterpret_cast<void*>(fake), Device{}, out->dtype(), shape, contiguous_strides(shape));
  }
  std::deque<Tensor> positions;  // iotas' and gathers' (no memory)
  std::vector<const Tensor*> tensors =
      cuda::launch_tensors(a, [&](const Value* v) -> const Tensor& { return values.at(v); }, shape_of, positions);
  std::vector<int64_t> domain;
  for (const Extent& e : a.domain) domain.push_back(*e.evaluate(sizes));
  cuda::LaunchTarget target;
  target.sm_count = 132;
  target.shared_per_sm = 228 * 1024;
  target.streaming_online = streaming_online;
  target.tuning = tuning;
  Planned p{cuda::plan_launch(a, domain, tensors, std::vector<uint64_t>(a.scalar_inputs.size(), 0), target), "", 0};
  p.transpose_shared_bytes = cuda::transpose_shared_bytes(a, p.plan.variant);
  for (const Value* leaf : a.leaves) p.leaves += (p.leaves.empty() ? "" : ",") + leaf->name;
  return p;
}

const char* kTransposedAdd = R"(fusion f(x: DT[M, N], z: DT[N, M]) {
  zt = permute(z, dims=[1, 0])
  s = mul(zt, 2.0)
  y = add(x, s)
  return y
})";

std::string with_dtype(std::string text, const std::string& dtype) {
  for (size_t at; (at = text.find("DT")) != std::string::npos;) text.replace(at, 2, dtype);
  return text;
}

// Rows of an odd width beside per-row operands (the cross-entropy's gradient over 50257 logits)
// are not one collapsed axis: 16-byte vectors along each row from its first aligned element, the
// per-row operands one value a vector, the positions computed.
TEST(LaunchPlan, OddRowsBesidePerRowOperandsKeepTheirVectors) {
  Planned p = plan_of(testing::kCrossEntropyGradient, {{"T", 64}, {"V", 50257}});
  ASSERT_TRUE(p.plan.launch);
  const cuda::KernelVariant& v = p.plan.variant;
  EXPECT_EQ(v.outer_rank, 2);
  EXPECT_EQ(v.vector, 8);
  EXPECT_TRUE(v.edge_elements);
  EXPECT_EQ(p.leaves, "logits,lse2,ids,tg,g2");
  EXPECT_EQ(v.leaf_modes, "vbpbb");
  // a slot more a row than its whole vectors: 64 rows of 50257 / 8 + 1 = 6283 slots
  EXPECT_EQ(p.plan.grid_x, unsigned((64 * 6283 + 255) / 256));
}

TEST(LaunchPlan, TransposedOperandIsStagedThroughSharedMemory) {
  Planned p = plan_of(with_dtype(kTransposedAdd, "bf16"), {{"M", 8192}, {"N", 8192}});
  ASSERT_TRUE(p.plan.launch);
  const cuda::KernelVariant& v = p.plan.variant;
  EXPECT_EQ(v.transpose_axis, 0);
  ASSERT_EQ(p.leaves, "zt,x");
  EXPECT_EQ(v.staged, "t.") << "the permuted operand is staged, x is read along its rows";
  EXPECT_EQ(v.vector, 8) << "16-byte vectors along both sides";
  EXPECT_EQ(v.threads, 256);
  EXPECT_EQ(p.plan.grid_x, 128u * 128u) << "a block a 64x64 tile";
  EXPECT_EQ(p.transpose_shared_bytes, 64 * 64 * 2);
}

TEST(LaunchPlan, TransposeTilesCoverSizesOffTheTileWithNarrowerVectors) {
  Planned f32 = plan_of(with_dtype(kTransposedAdd, "f32"), {{"M", 100}, {"N", 132}});
  ASSERT_TRUE(f32.plan.launch);
  EXPECT_EQ(f32.plan.variant.transpose_axis, 0);
  EXPECT_EQ(f32.plan.variant.vector, 4);
  EXPECT_EQ(f32.plan.grid_x, 3u * 2u) << "ceil(132 / 64) x ceil(100 / 64) tiles";
  // an odd side: coalesced still, one element at a time
  Planned odd = plan_of(with_dtype(kTransposedAdd, "bf16"), {{"M", 8192}, {"N", 8191}});
  EXPECT_EQ(odd.plan.variant.transpose_axis, 0);
  EXPECT_EQ(odd.plan.variant.vector, 1);
}

TEST(LaunchPlan, TransposeIsNotChosenWhereLayoutsAgreeOrASideIsShort) {
  Planned same = plan_of(R"(fusion f(x: bf16[M, N], z: bf16[M, N]) {
  y = add(x, z)
  return y
})", {{"M", 512}, {"N", 512}});
  EXPECT_EQ(same.plan.variant.transpose_axis, -1);
  EXPECT_EQ(same.plan.variant.vector, 8);
  // 8 columns: too short a side for a tile; the plain kernel reads the operand strided
  Planned short_side = plan_of(with_dtype(kTransposedAdd, "bf16"), {{"M", 4096}, {"N", 8}});
  EXPECT_EQ(short_side.plan.variant.transpose_axis, -1);
  // a broadcast operand is no transpose
  Planned broadcast = plan_of(R"(fusion f(x: bf16[M, N], b: bf16[M, 1]) {
  y = add(x, b)
  return y
})", {{"M", 512}, {"N", 512}});
  EXPECT_EQ(broadcast.plan.variant.transpose_axis, -1);
}

TEST(LaunchPlan, TransposeAroundBatchAxesPicksTheOperandsContiguousAxis) {
  Planned p = plan_of(R"(fusion f(x: bf16[B, M, N], z: bf16[B, N, M]) {
  zt = permute(z, dims=[0, 2, 1])
  y = mul(x, zt)
  return y
})", {{"B", 6}, {"M", 256}, {"N", 192}});
  ASSERT_TRUE(p.plan.launch);
  EXPECT_EQ(p.plan.variant.transpose_axis, 1);
  EXPECT_EQ(p.plan.variant.outer_rank, 3);
  EXPECT_EQ(p.plan.grid_x, 6u * 4u * 3u);
}

const char* const kLogSumExp = testing::kLogSumExpRows;

TEST(LaunchPlan, LogSumExpOverLongRowsStreamsThemOnce) {
  // 50257 columns would fill a block of 1024 threads' registers (one block an SM): one pass with a
  // running max instead, nothing held, 256 threads a row
  Planned p = plan_of(kLogSumExp, {{"R", 8192}, {"W", 50257}});
  ASSERT_TRUE(p.plan.launch);
  EXPECT_TRUE(p.plan.variant.streaming_online);
  EXPECT_EQ(p.plan.variant.threads, 256);
  EXPECT_EQ(p.plan.variant.items, 0);
  EXPECT_EQ(p.plan.variant.vector, 8);
  EXPECT_TRUE(p.plan.variant.edge_elements);
  EXPECT_NE(p.plan.variant.key().find("_so"), std::string::npos);
  // rows that fit a block of 256 threads stay in registers
  EXPECT_FALSE(plan_of(kLogSumExp, {{"R", 8192}, {"W", 8192}}).plan.variant.streaming_online);
  // softmax stores a value per element: a row a block of 1024 threads holds (32 elements a
  // bf16 a thread, row_held_bytes) stays in registers to be read again; a longer one is held in shared
  // memory where the SM has it (row_shared_bytes; of 1024 and 512 threads the one whose blocks an
  // SM's 228 KiB hold more of: 50257 bf16 columns in 512 threads of 13 vectors, 106496 bytes, two;
  // in 1024 threads 114688 bytes, one); else it streams its max and its sum in one pass, then
  // reads the row again to store (reread_threads a block). Never a log-sum-exp in shared memory:
  // its streaming pass reads the row once.
  const char* const softmax = "fusion f(x: bf16[R, W]) {\n  y = softmax(x, dim=1)\n  return y\n}\n";
  Planned held = plan_of(softmax, {{"R", 64}, {"W", 32768}});
  EXPECT_FALSE(held.plan.variant.streaming_online);
  EXPECT_FALSE(held.plan.variant.shared_row);
  EXPECT_EQ(held.plan.variant.threads, 1024);
  EXPECT_EQ(held.plan.variant.items, 4);
  Planned shared = plan_of(softmax, {{"R", 64}, {"W", 50257}});
  EXPECT_TRUE(shared.plan.variant.shared_row);
  EXPECT_FALSE(shared.plan.variant.streaming_online);
  EXPECT_EQ(shared.plan.variant.threads, 512);
  EXPECT_EQ(shared.plan.variant.items, 13);
  EXPECT_EQ(shared.plan.variant.min_blocks, 2);
  EXPECT_EQ(shared.plan.dynamic_shared, 106496u);
  EXPECT_EQ(shared.plan.grid_x, 64u);
  Planned wider = plan_of(softmax, {{"R", 64}, {"W", 100000}});  // 13 vectors of 1024 threads, 212992 bytes
  EXPECT_TRUE(wider.plan.variant.shared_row);
  EXPECT_EQ(wider.plan.variant.threads, 1024);
  EXPECT_EQ(wider.plan.variant.min_blocks, 1);
  EXPECT_EQ(wider.plan.dynamic_shared, 212992u);
  EXPECT_FALSE(plan_of(kLogSumExp, {{"R", 64}, {"W", 50257}}).plan.variant.shared_row);
  cuda::KernelTuning tuning;
  tuning.row_shared_bytes = 0;
  Planned reread = plan_of(softmax, {{"R", 64}, {"W", 50257}}, 0, true, tuning);
  EXPECT_TRUE(reread.plan.variant.streaming_online);
  EXPECT_EQ(reread.plan.variant.threads, 1024);
  EXPECT_EQ(reread.plan.variant.items, 0);
  EXPECT_EQ(reread.plan.grid_x, 64u);
  // rows past the shared memory (f32 65536: 262144 bytes) or the bytes a block may take stream
  const char* const f32_softmax = "fusion f(x: f32[R, W]) {\n  y = softmax(x, dim=1)\n  return y\n}\n";
  EXPECT_TRUE(plan_of(f32_softmax, {{"R", 64}, {"W", 65536}}).plan.variant.streaming_online);
  tuning.row_shared_bytes = 110000;
  EXPECT_TRUE(plan_of(f32_softmax, {{"R", 64}, {"W", 50257}}, 0, true, tuning).plan.variant.streaming_online);
  tuning = {};
  tuning.row_held_bytes = 128;
  tuning.reread_threads = 512;
  EXPECT_FALSE(plan_of(softmax, {{"R", 64}, {"W", 50257}}, 0, true, tuning).plan.variant.streaming_online);
  tuning.row_held_bytes = 16;
  tuning.row_shared_bytes = 0;
  EXPECT_EQ(plan_of(softmax, {{"R", 64}, {"W", 32768}}, 0, true, tuning).plan.variant.threads, 512);
  // a max and a sum of something else: no online pass
  Planned other = plan_of("fusion f(x: f32[R, W]) {\n  m = max(x, dims=[1])\n  s = sum(x, dims=[1])\n  return m, s\n}\n",
                          {{"R", 64}, {"W", 50257}});
  EXPECT_FALSE(other.plan.variant.streaming_online);
}

TEST(LaunchPlan, OddWidthRowsKeepVectorsWithEdgeElements) {
  // 50257 columns: 16-byte vectors from each row's first aligned column, 7 a thread in registers
  // (with the streaming pass off, up to 64 elements held a thread)
  cuda::KernelTuning held;
  held.row_held_bytes = 128;
  Planned p = plan_of(kLogSumExp, {{"R", 8192}, {"W", 50257}}, 0, false, held);
  ASSERT_TRUE(p.plan.launch);
  EXPECT_FALSE(p.plan.variant.streaming_online);
  EXPECT_EQ(p.plan.variant.vector, 8);
  EXPECT_TRUE(p.plan.variant.edge_elements);
  EXPECT_EQ(p.plan.variant.leaf_modes, "v");
  EXPECT_EQ(p.plan.variant.threads, 1024);
  EXPECT_EQ(p.plan.variant.items, 7);
  EXPECT_FALSE(p.plan.variant.full_rows);
  EXPECT_EQ(p.plan.grid_x, 8192u);
  // a width the vector divides needs no edges
  Planned even = plan_of(kLogSumExp, {{"R", 8192}, {"W", 50256}});
  EXPECT_EQ(even.plan.variant.vector, 8);
  EXPECT_FALSE(even.plan.variant.edge_elements);
  // a vector is taken only where a row holds two: narrower ones for short rows, else none
  Planned short_rows = plan_of(kLogSumExp, {{"R", 100}, {"W", 13}});
  EXPECT_EQ(short_rows.plan.variant.vector, 4);
  Planned tiny = plan_of(kLogSumExp, {{"R", 100}, {"W", 3}});
  EXPECT_EQ(tiny.plan.variant.vector, 1);
}

TEST(LaunchPlan, OddWidthRowsReadOperandsOutOfStepElementByElement) {
  // layer norm's weight and bias start every row at the same address, the rows do not: the rows and
  // the output are read and written in vectors, the weight and bias element by element
  Planned p = plan_of("fusion f(x: bf16[R, W], w: bf16[W], b: bf16[W]) {\n  y = layer_norm(x, w, b, normalized_ndim=1)\n  return y\n}\n",
                      {{"R", 4096}, {"W", 50257}});
  EXPECT_EQ(p.plan.variant.vector, 8);
  EXPECT_TRUE(p.plan.variant.edge_elements);
  ASSERT_EQ(p.leaves, "x,w,b");
  EXPECT_EQ(p.plan.variant.leaf_modes, "vuu");
  // an input 3 elements off the vector boundary: the output sets where vectors start
  Planned off = plan_of("fusion f(x: bf16[R, W]) {\n  y = softmax(x, dim=1)\n  return y\n}\n", {{"R", 64}, {"W", 4096}}, 3);
  EXPECT_TRUE(off.plan.variant.edge_elements);
  EXPECT_EQ(off.plan.variant.leaf_modes, "u");
  // without an output per element, the input does
  Planned lse = plan_of(kLogSumExp, {{"R", 64}, {"W", 4096}}, 3);
  EXPECT_TRUE(lse.plan.variant.edge_elements);
  EXPECT_EQ(lse.plan.variant.leaf_modes, "v");
}

TEST(LaunchPlan, OddTotalsKeepVectorsWithEdgeElements) {
  const char* chain = "fusion f(a: bf16[N], b: bf16[N], c: bf16[N]) {\n  m = mul(a, b)\n  s = add(m, c)\n  y = gelu(s)\n  return y\n}\n";
  Planned p = plan_of(chain, {{"N", 100000003}});
  ASSERT_TRUE(p.plan.launch);
  EXPECT_EQ(p.plan.variant.vector, 8);
  EXPECT_TRUE(p.plan.variant.edge_elements);
  EXPECT_EQ(p.plan.variant.leaf_modes, "vvv");
  EXPECT_EQ(p.plan.grid_x, unsigned((100000003 / 8 + 255) / 256));
  Planned even = plan_of(chain, {{"N", 100000000}});
  EXPECT_FALSE(even.plan.variant.edge_elements);
  // the first operand 3 elements off: read element by element, the others still in vectors
  Planned off = plan_of(chain, {{"N", 100000000}}, 3);
  EXPECT_TRUE(off.plan.variant.edge_elements);
  EXPECT_EQ(off.plan.variant.leaf_modes, "uvv");
}

TEST(LaunchPlan, RowKernelsTakeTheirBlockCapAndLaunchBoundsFromTheTuning) {
  const char* softmax = "fusion f(x: bf16[N, D]) {\n  s = softmax(x, dim=1)\n  return s\n}\n";
  // 4096 columns of bf16: 512 vectors of 8, two a thread of the built-in 256
  Planned built_in = plan_of(softmax, {{"N", 1000}, {"D", 4096}});
  EXPECT_EQ(built_in.plan.variant.threads, 256);
  EXPECT_EQ(built_in.plan.variant.items, 2);
  EXPECT_EQ(built_in.plan.variant.min_blocks, 0);
  cuda::KernelTuning tuning;
  tuning.row_threads = 128;
  tuning.row_min_blocks = 3;
  tuning.recompute_values = true;
  Planned tuned = plan_of(softmax, {{"N", 1000}, {"D", 4096}}, 0, true, tuning);
  EXPECT_EQ(tuned.plan.variant.threads, 128);
  EXPECT_EQ(tuned.plan.variant.items, 4);
  EXPECT_EQ(tuned.plan.variant.min_blocks, 3);
  EXPECT_TRUE(tuned.plan.variant.recompute);
  EXPECT_EQ(tuned.plan.block, 128u);
}

// The layer norm backward at [8192, 4096] bf16 on 132 SMs, by the built-in tuning: an inner-outer
// kernel of 512 threads, one vector of 8 a thread, each block's next row loaded ahead; its 16 f32
// partials of dw and db a thread in shared memory, for two blocks an SM (in registers one block
// an SM holds): 264 blocks, combined over the grid (a cooperative launch; a row of 4096 x 2 float
// partials a block, the barrier's two counters). With one block an SM by the tuning: the partials
// in registers, 132 blocks; by a tree of three levels: nodes of 6 (132 -> 22 -> 4 -> the root),
// whose partials take (132 + 22 + 4) x 4096 x 2 floats, and 27 counters. With the tuning of
// before (32 accumulators, two levels): 256 threads of two vectors, two blocks an SM, 264 blocks
// in groups of 17 (16 groups), (264 + 16) rows of partials, 17 counters. The tuning's keys change
// the block and the grid (more than two blocks an SM combine by a tree of three levels); one row
// is one block, no workspace.
TEST(LaunchPlan, InnerOuterKernelsSizeTheirBlockAndPersistentGrid) {
  const std::string text = testing::layer_norm_backward("bf16");
  Planned p = plan_of(text, {{"N", 8192}, {"D", 4096}});
  ASSERT_TRUE(p.plan.launch);
  const cuda::KernelVariant& v = p.plan.variant;
  EXPECT_TRUE(v.inner_outer);
  EXPECT_TRUE(v.prefetch);
  EXPECT_EQ(v.key(), "r1.1_v8_t512_i1_b2_io_pf_l0_sp_32_f_vvvss");
  EXPECT_EQ(p.plan.grid_x, 264u);
  EXPECT_EQ(p.plan.grid_y, 1u);
  EXPECT_TRUE(p.plan.cooperative);
  EXPECT_EQ(p.plan.dynamic_shared, size_t(512) * 16 * 4);
  EXPECT_EQ(p.plan.workspace_bytes, size_t(264) * 4096 * 8);
  EXPECT_EQ(p.plan.counter_bytes, size_t(2) * 4);
  EXPECT_FALSE(p.plan.split_stages);
  cuda::KernelTuning one;
  one.inner_outer_blocks_per_sm = 1;
  Planned alone = plan_of(text, {{"N", 8192}, {"D", 4096}}, 0, true, one);
  EXPECT_EQ(alone.plan.variant.key(), "r1.1_v8_t512_i1_b1_io_pf_l0_32_f_vvvss");
  EXPECT_EQ(alone.plan.grid_x, 132u);
  EXPECT_EQ(alone.plan.dynamic_shared, 0u);
  EXPECT_EQ(alone.plan.workspace_bytes, size_t(132) * 4096 * 8);
  cuda::KernelTuning tree = one;
  tree.inner_outer_combine_levels = 3;
  Planned by_tree = plan_of(text, {{"N", 8192}, {"D", 4096}}, 0, true, tree);
  EXPECT_EQ(by_tree.plan.variant.key(), "r1.1_v8_t512_i1_b1_io_pf_l3_32_f_vvvss");
  EXPECT_FALSE(by_tree.plan.cooperative);
  EXPECT_EQ(cuda::inner_outer_tree(132, 3).fanout, 6);
  EXPECT_EQ(by_tree.plan.workspace_bytes, size_t(132 + 22 + 4) * 4096 * 8);
  EXPECT_EQ(by_tree.plan.counter_bytes, size_t(22 + 4 + 1) * 4);
  cuda::KernelTuning before;
  before.inner_outer_accumulators = 32;
  before.inner_outer_combine_levels = 2;
  Planned old = plan_of(text, {{"N", 8192}, {"D", 4096}}, 0, true, before);
  EXPECT_EQ(old.plan.variant.key(), "r1.1_v8_t256_i2_b2_io_pf_32_f_vvvss");
  EXPECT_EQ(old.plan.grid_x, 264u);
  EXPECT_EQ(cuda::inner_outer_tree(264, 2).fanout, 17);
  EXPECT_EQ(old.plan.workspace_bytes, size_t(264 + 16) * 4096 * 8);
  EXPECT_EQ(old.plan.counter_bytes, size_t(17) * 4);
  cuda::KernelTuning tuning;
  tuning.inner_outer_accumulators = 64;
  tuning.inner_outer_blocks_per_sm = 3;
  Planned tuned = plan_of(text, {{"N", 8192}, {"D", 4096}}, 0, true, tuning);
  EXPECT_EQ(tuned.plan.variant.threads, 128);
  EXPECT_EQ(tuned.plan.variant.items, 4);
  EXPECT_EQ(tuned.plan.grid_x, 396u);
  // more than two blocks an SM (3 here, 8 at 768 columns): a tree of three levels, not the grid's combine
  EXPECT_EQ(tuned.plan.variant.combine_levels, 3);
  EXPECT_FALSE(tuned.plan.cooperative);
  Planned narrow = plan_of(text, {{"N", 32768}, {"D", 768}});
  EXPECT_GT(narrow.plan.variant.min_blocks, 2);
  EXPECT_EQ(narrow.plan.variant.combine_levels, 3);
  EXPECT_FALSE(narrow.plan.cooperative);
  // 264 blocks in three levels: nodes of 7 (7^3 >= 264), 264 -> 38 -> 6 -> the root; 308 rows, 45 counters
  cuda::KernelTuning three = before;
  three.inner_outer_combine_levels = 3;
  Planned deeper = plan_of(text, {{"N", 8192}, {"D", 4096}}, 0, true, three);
  EXPECT_EQ(deeper.plan.variant.key(), "r1.1_v8_t256_i2_b2_io_pf_l3_32_f_vvvss");
  EXPECT_EQ(deeper.plan.workspace_bytes, size_t(264 + 38 + 6) * 4096 * 8);
  EXPECT_EQ(deeper.plan.counter_bytes, size_t(38 + 6 + 1) * 4);
  EXPECT_FALSE(deeper.plan.cooperative);
  // the combine over the grid with two rows ahead; cut to the blocks the compiled kernel fits at once
  cuda::KernelTuning grid;
  grid.inner_outer_combine_levels = 0;
  grid.inner_outer_rows_ahead = 2;
  Planned over_grid = plan_of(text, {{"N", 8192}, {"D", 4096}}, 0, true, grid);
  EXPECT_EQ(over_grid.plan.variant.key(), "r1.1_v8_t512_i1_b1_io_pf2_l0_32_f_vvvss");
  EXPECT_TRUE(over_grid.plan.cooperative);
  EXPECT_EQ(over_grid.plan.grid_x, 132u);
  EXPECT_EQ(over_grid.plan.workspace_bytes, size_t(132) * 4096 * 8);
  EXPECT_EQ(over_grid.plan.counter_bytes, size_t(2) * 4);
  cuda::LaunchTarget target;
  target.sm_count = 132;
  cuda::LaunchPlan cut = over_grid.plan;
  EXPECT_TRUE(cuda::fit_cooperative_grid(cut, 1, target));
  EXPECT_EQ(cut.grid_x, 132u);
  cut.grid_x = 264;
  EXPECT_TRUE(cuda::fit_cooperative_grid(cut, 1, target));
  EXPECT_EQ(cut.grid_x, 132u);
  EXPECT_FALSE(cuda::fit_cooperative_grid(cut, 0, target));
  Planned one_row = plan_of(text, {{"N", 1}, {"D", 4096}});
  EXPECT_EQ(one_row.plan.grid_x, 1u);
  EXPECT_EQ(one_row.plan.workspace_word, -1);
  // an odd width: vectors of one (a thread's columns are the same in every row)
  Planned odd = plan_of(text, {{"N", 1000}, {"D", 4099}});
  EXPECT_EQ(odd.plan.variant.vector, 1);
  EXPECT_FALSE(odd.plan.variant.edge_elements);
}

// The next row loaded ahead (KernelTuning::inner_outer_prefetch) holds a second row's registers,
// which the register estimate counts: the RMSNorm backward at [8192, 4096] bf16 (128 threads of
// four vectors of 8) fits two blocks an SM with it, four without (and the layer norm's keeps two).
// Off, the variant is the kernel of before, its name without "_pf". Rows so wide that a block's
// threads may not have the registers for a second row (16384 columns: 1024 threads, 64 registers)
// are not loaded ahead.
TEST(LaunchPlan, InnerOuterRowsLoadedAheadCountTheirRegisters) {
  cuda::KernelTuning before;  // 32 accumulators, two levels: the tuning these widths were written for
  before.inner_outer_accumulators = 32;
  before.inner_outer_combine_levels = 2;
  cuda::KernelTuning off = before;
  off.inner_outer_prefetch = false;
  const std::string rms = testing::rms_norm_backward("bf16"), ln = testing::layer_norm_backward("bf16");
  Planned ahead = plan_of(rms, {{"N", 8192}, {"D", 4096}}, 0, true, before), plain = plan_of(rms, {{"N", 8192}, {"D", 4096}}, 0, true, off);
  EXPECT_EQ(ahead.plan.variant.key(), "r1.1_v8_t128_i4_b2_io_pf_32_f_vvvs");
  EXPECT_EQ(ahead.plan.grid_x, 264u);
  EXPECT_EQ(plain.plan.variant.key(), "r1.1_v8_t128_i4_b4_io_32_f_vvvs");
  EXPECT_EQ(plain.plan.grid_x, 528u);
  Planned ln_plain = plan_of(ln, {{"N", 8192}, {"D", 4096}}, 0, true, off);
  EXPECT_EQ(ln_plain.plan.variant.key(), "r1.1_v8_t256_i2_b2_io_32_f_vvvss");
  EXPECT_EQ(ln_plain.plan.grid_x, 264u);
  Planned wide = plan_of(ln, {{"N", 2048}, {"D", 16384}});
  EXPECT_EQ(wide.plan.variant.threads, 1024);
  EXPECT_FALSE(wide.plan.variant.prefetch);
  // by the built-in tuning (16 accumulators), 8192 columns would be 1024 threads of one vector,
  // which have no registers for a second row: 512 threads of two vectors instead, loading ahead
  Planned ln8k = plan_of(ln, {{"N", 8192}, {"D", 8192}});
  EXPECT_EQ(ln8k.plan.variant.threads, 512);
  EXPECT_EQ(ln8k.plan.variant.items, 2);
  EXPECT_TRUE(ln8k.plan.variant.prefetch);
}

// The combine tree of B blocks' partials over L levels: the fanout is the least S with S^L >= B,
// the rows every block's and every node's below the root, the counters a node's.
TEST(LaunchPlan, InnerOuterCombineTreeShapes) {
  struct Expect { int64_t blocks; int levels; int64_t fanout, rows, counters; };
  for (const Expect& e : {Expect{1, 2, 1, 0, 0}, Expect{2, 2, 2, 2, 1}, Expect{264, 2, 17, 280, 17}, Expect{264, 3, 7, 308, 45},
                          Expect{264, 1, 264, 264, 1}, Expect{1000, 4, 6, 1000 + 167 + 28 + 5, 167 + 28 + 5 + 1}, Expect{37, 3, 4, 37 + 10 + 3, 10 + 3 + 1}}) {
    cuda::InnerOuterTree t = cuda::inner_outer_tree(e.blocks, e.levels);
    EXPECT_EQ(t.fanout, e.fanout) << e.blocks << " blocks, " << e.levels << " levels";
    EXPECT_EQ(t.rows, e.rows) << e.blocks << " blocks, " << e.levels << " levels";
    EXPECT_EQ(t.counters, e.counters) << e.blocks << " blocks, " << e.levels << " levels";
  }
}

// A block width that would leave threads without a vector in every row gives way to the nearest
// that leaves fewer: 768 bf16 columns are 96 vectors of 8, one a thread of 96 threads (not 128, a
// quarter idle), for the layer norm's and the RMSNorm's backward alike; 1600 columns (200 vectors)
// one a thread of 224 (24 idle, where 256 threads left 56). Widths that fill the block keep it.
TEST(LaunchPlan, InnerOuterBlocksLeaveTheFewestThreadsIdle) {
  for (const std::string& text : {testing::layer_norm_backward("bf16"), testing::rms_norm_backward("bf16")}) {
    Planned narrow = plan_of(text, {{"N", 32768}, {"D", 768}});
    EXPECT_EQ(narrow.plan.variant.threads, 96);
    EXPECT_EQ(narrow.plan.variant.items, 1);
    EXPECT_TRUE(narrow.plan.variant.full_rows);
  }
  Planned xl = plan_of(testing::layer_norm_backward("bf16"), {{"N", 8192}, {"D", 1600}});
  EXPECT_EQ(xl.plan.variant.threads, 224);
  EXPECT_EQ(xl.plan.variant.items, 1);
  Planned filled = plan_of(testing::layer_norm_backward("bf16"), {{"N", 8192}, {"D", 2048}});
  EXPECT_EQ(filled.plan.variant.threads, 256);
  EXPECT_EQ(filled.plan.variant.items, 1);
}

// Row groups (inner_outer_row_groups): the block is the group's threads times the groups, the
// grid a block for every G rows at most, blocks an SM counted on the whole block; at most what a
// block of 1024 threads and 48 KiB of shared memory hold (the partials of every group but the first).
TEST(LaunchPlan, InnerOuterRowGroupsMakeOneBlockOfSeveralRows) {
  cuda::KernelTuning seven;
  seven.inner_outer_row_groups = 7;
  Planned p = plan_of(testing::layer_norm_backward("bf16"), {{"N", 32768}, {"D", 768}}, 0, true, seven);
  EXPECT_EQ(p.plan.variant.threads, 96);
  EXPECT_EQ(p.plan.variant.row_groups, 7);
  EXPECT_EQ(p.plan.block, 672u);
  EXPECT_EQ(p.plan.variant.min_blocks, 1) << "65536 registers hold one block of 672 threads";
  EXPECT_EQ(p.plan.variant.combine_levels, 0) << "one block an SM: the combine over the grid";
  EXPECT_TRUE(p.plan.cooperative);
  EXPECT_NE(p.plan.variant.key().find("_rg7_"), std::string::npos) << p.plan.variant.key();
  // few rows: no more groups than rows, no more blocks than sets of G rows
  Planned few = plan_of(testing::layer_norm_backward("bf16"), {{"N", 20}, {"D", 768}}, 0, true, seven);
  EXPECT_EQ(few.plan.variant.row_groups, 7);
  EXPECT_EQ(few.plan.grid_x, 3u);
  Planned two = plan_of(testing::layer_norm_backward("bf16"), {{"N", 2}, {"D", 768}}, 0, true, seven);
  EXPECT_EQ(two.plan.variant.row_groups, 2);
  EXPECT_EQ(two.plan.grid_x, 1u);
  // 8192 columns: 512 threads of two vectors; a second group's partials (64 KiB) exceed 48 KiB
  Planned wide = plan_of(testing::layer_norm_backward("bf16"), {{"N", 8192}, {"D", 8192}}, 0, true, seven);
  EXPECT_EQ(wide.plan.variant.row_groups, 1);
  EXPECT_EQ(wide.plan.block, unsigned(wide.plan.variant.threads));
  // the default: one group, as before
  Planned one = plan_of(testing::layer_norm_backward("bf16"), {{"N", 32768}, {"D", 768}});
  EXPECT_EQ(one.plan.variant.row_groups, 1);
  EXPECT_EQ(one.plan.block, 96u);
}

// Rows ahead through shared memory (inner_outer_staged_rows): as many rows as asked where their
// ring of slots fits 48 KiB, no register held for them, so at least the blocks an SM of rows ahead
// in registers; fewer rows where the ring would not fit; and where a row's leaf is not read in
// whole vectors of 4 to 16 bytes (odd bf16 widths: vectors of one 2-byte element), rows ahead in
// registers as before.
TEST(LaunchPlan, InnerOuterStagedRowsFitTheirRingOfSlots) {
  cuda::KernelTuning three;
  three.inner_outer_staged_rows = 3;
  Planned narrow = plan_of(testing::layer_norm_backward("bf16"), {{"N", 32768}, {"D", 768}}, 0, true, three);
  EXPECT_TRUE(narrow.plan.variant.staged_rows);
  EXPECT_EQ(narrow.plan.variant.prefetch, 3);
  EXPECT_EQ(narrow.plan.variant.threads, 96);
  Planned registers = plan_of(testing::layer_norm_backward("bf16"), {{"N", 32768}, {"D", 768}});
  EXPECT_FALSE(registers.plan.variant.staged_rows);
  EXPECT_EQ(registers.plan.variant.min_blocks, 7);
  // the ring's estimate is past ptxas' cap at 7 blocks of 96 threads (80 registers a thread)
  EXPECT_EQ(narrow.plan.variant.min_blocks, 6);
  EXPECT_NE(narrow.plan.variant.key().find("_pf3_"), std::string::npos) << narrow.plan.variant.key();
  EXPECT_NE(narrow.plan.variant.key().find("_sr_"), std::string::npos) << narrow.plan.variant.key();
  // 4096 bf16 columns: 512 threads of a vector, two leaves, 16 KiB a slot: two slots (one row ahead)
  Planned wide = plan_of(testing::layer_norm_backward("bf16"), {{"N", 8192}, {"D", 4096}}, 0, true, three);
  EXPECT_TRUE(wide.plan.variant.staged_rows);
  EXPECT_EQ(wide.plan.variant.prefetch, 1);
  // 4099 bf16 columns: vectors of one element
  Planned odd = plan_of(testing::layer_norm_backward("bf16"), {{"N", 1000}, {"D", 4099}}, 0, true, three);
  EXPECT_FALSE(odd.plan.variant.staged_rows);
  EXPECT_EQ(odd.plan.variant.key().find("_sr"), std::string::npos) << odd.plan.variant.key();
}

// The inner-outer kernel's registers as ptxas caps them under its launch bounds (a quarter of the
// SM's warps on each 16K-register partition): RMSNorm's backward over 3072 bf16 columns, estimated
// above the 96 registers 3 blocks of 192 threads have, runs 2 blocks an SM (it spilled 84 bytes at
// 3); over 12288, one row ahead in 384 threads of four vectors is estimated above their 168: 768
// threads of two vectors, no row ahead (it spilled 268 bytes).
TEST(LaunchPlan, InnerOuterBlocksAndRowsAheadFitPtxasRegisterCap) {
  Planned mid = plan_of(testing::rms_norm_backward("bf16"), {{"N", 8192}, {"D", 3072}});
  EXPECT_EQ(mid.plan.variant.threads, 192);
  EXPECT_EQ(mid.plan.variant.min_blocks, 2);
  EXPECT_EQ(mid.plan.grid_x, 264u);
  Planned wide = plan_of(testing::rms_norm_backward("bf16"), {{"N", 8192}, {"D", 12288}});
  EXPECT_EQ(wide.plan.variant.threads, 768);
  EXPECT_EQ(wide.plan.variant.items, 2);
  EXPECT_EQ(wide.plan.variant.prefetch, 0);
  // the layer norm's at 768 columns keeps 7 blocks of 96 threads (its estimate of 84 fits ptxas' 80)
  Planned narrow = plan_of(testing::layer_norm_backward("bf16"), {{"N", 32768}, {"D", 768}});
  EXPECT_EQ(narrow.plan.variant.threads, 96);
  EXPECT_EQ(narrow.plan.variant.min_blocks, 7);
}

// Rows too wide for a thread's column partials beside its row in registers even in 1024 threads
// (64 registers each): the layer norm backward over 16384 bf16 columns keeps its two partials a
// column in shared memory (128 KiB: 1024 threads x 16 columns x 8 bytes), a block an SM; at 8192
// they stay in registers. Past what a block's shared memory holds (32768 columns), registers.
TEST(LaunchPlan, InnerOuterPartialsInSharedMemoryForRowsTooWideForRegisters) {
  Planned wide = plan_of(testing::layer_norm_backward("bf16"), {{"N", 4096}, {"D", 16384}});
  EXPECT_TRUE(wide.plan.variant.shared_partials) << wide.plan.variant.key();
  EXPECT_EQ(wide.plan.variant.threads, 1024);
  EXPECT_EQ(wide.plan.variant.min_blocks, 1);
  EXPECT_EQ(wide.plan.dynamic_shared, 131072u);
  Planned narrower = plan_of(testing::layer_norm_backward("bf16"), {{"N", 4096}, {"D", 8192}});
  EXPECT_FALSE(narrower.plan.variant.shared_partials) << narrower.plan.variant.key();
  EXPECT_EQ(narrower.plan.dynamic_shared, 0u);
  Planned widest = plan_of(testing::layer_norm_backward("bf16"), {{"N", 4096}, {"D", 32768}});
  EXPECT_FALSE(widest.plan.variant.shared_partials) << widest.plan.variant.key();
}

// Partials in shared memory for a second block an SM, where in registers they leave one: the layer
// norm backward over 4096 bf16 columns at 8192 rows (two blocks of 512 threads, each with 16 rows
// or more), and over 1600 f32 columns (416 threads of one vector of 4); not at 2048 rows (8 a
// block: a second block's partials cost more than its warps give), not where a thread holds more
// than one vector (RMSNorm's over 4096 f32 columns: 256 threads of four; over 5120 bf16: 320
// threads of two), not where the registers already
// hold two blocks (RMSNorm's over 4096 bf16: 256 threads of two vectors), not where the tuning
// fixes the blocks an SM.
TEST(LaunchPlan, InnerOuterPartialsInSharedMemoryForASecondBlockAnSm) {
  const std::string ln = testing::layer_norm_backward("bf16");
  Planned two = plan_of(ln, {{"N", 8192}, {"D", 4096}});
  EXPECT_TRUE(two.plan.variant.shared_partials) << two.plan.variant.key();
  EXPECT_EQ(two.plan.variant.min_blocks, 2);
  EXPECT_EQ(two.plan.variant.threads, 512);
  EXPECT_EQ(two.plan.grid_x, 264u);
  Planned f32 = plan_of(testing::layer_norm_backward("f32"), {{"N", 8192}, {"D", 1600}});
  EXPECT_TRUE(f32.plan.variant.shared_partials) << f32.plan.variant.key();
  EXPECT_EQ(f32.plan.variant.threads, 416);
  EXPECT_EQ(f32.plan.variant.min_blocks, 2);
  Planned few = plan_of(ln, {{"N", 2048}, {"D", 4096}});
  EXPECT_FALSE(few.plan.variant.shared_partials) << few.plan.variant.key();
  EXPECT_EQ(few.plan.variant.min_blocks, 1);
  EXPECT_EQ(few.plan.grid_x, 132u);
  Planned four = plan_of(testing::rms_norm_backward("f32"), {{"N", 8192}, {"D", 4096}});
  EXPECT_FALSE(four.plan.variant.shared_partials) << four.plan.variant.key();
  EXPECT_EQ(four.plan.variant.items, 4);
  EXPECT_EQ(four.plan.variant.min_blocks, 1);
  Planned pair = plan_of(testing::rms_norm_backward("bf16"), {{"N", 8192}, {"D", 5120}});
  EXPECT_FALSE(pair.plan.variant.shared_partials) << pair.plan.variant.key();
  EXPECT_EQ(pair.plan.variant.items, 2);
  EXPECT_EQ(pair.plan.variant.min_blocks, 1);
  Planned rms = plan_of(testing::rms_norm_backward("bf16"), {{"N", 8192}, {"D", 4096}});
  EXPECT_FALSE(rms.plan.variant.shared_partials) << rms.plan.variant.key();
  EXPECT_EQ(rms.plan.variant.key(), "r1.1_v8_t256_i2_b2_io_pf_l0_32_f_vvvs");
  cuda::KernelTuning fixed;
  fixed.inner_outer_blocks_per_sm = 1;
  EXPECT_FALSE(plan_of(ln, {{"N", 8192}, {"D", 4096}}, 0, true, fixed).plan.variant.shared_partials);
}

TEST(LaunchPlan, NormalizationOverANonContiguousAxisRunsAKernelAPass) {
  // layer norm of permute(x), x stored [4096, 8192]: the 8192 rows are x's contiguous axis
  const char* permuted = R"(fusion f(x: bf16[C, R], w: bf16[C], b: bf16[C]) {
  xt = permute(x, dims=[1, 0])
  y = layer_norm(xt, w, b, normalized_ndim=1, eps=1e-5)
  return y
})";
  Planned p = plan_of(permuted, {{"C", 4096}, {"R", 8192}});
  ASSERT_TRUE(p.plan.launch);
  EXPECT_TRUE(p.plan.split_stages) << "column kernels for the statistics, then a pointwise kernel";
  EXPECT_EQ(p.plan.grid_x, 8192u) << "where the split cannot be made: a block per row";
  // over the contiguous axis: one row kernel, a block per row
  Planned rows = plan_of("fusion f(x: f32[N, D]) {\n  s = softmax(x, dim=1)\n  return s\n}\n", {{"N", 1000}, {"D", 4096}});
  EXPECT_FALSE(rows.plan.split_stages);
  EXPECT_EQ(rows.plan.grid_x, 1000u);
}

// A gradient norm: the sum of the squares of a bf16 vector, in f32, and its root.
const char* const kGradNorm = R"(fusion f(x: bf16[N]) {
  x32 = cast(x, dtype=f32)
  sq = mul(x32, x32)
  s = sum(sq)
  n = sqrt(s)
  return n
})";

TEST(LaunchPlan, LongReductionsToAFewValuesRunAsGridReductions) {
  // 10^8 bf16 to one value: one row split over a full wave (132 SMs x 4 blocks of 256 threads),
  // 16-byte vectors, a partial of one word a block and one arrival counter
  Planned p = plan_of(kGradNorm, {{"N", 100000000}});
  ASSERT_TRUE(p.plan.launch);
  const cuda::KernelVariant& v = p.plan.variant;
  EXPECT_TRUE(v.grid);
  EXPECT_NE(v.key().find("_g_"), std::string::npos);
  EXPECT_EQ(v.tile_x, 0);
  EXPECT_EQ(v.vector, 8);
  EXPECT_EQ(v.leaf_modes, "v");
  EXPECT_FALSE(v.edge_elements);
  EXPECT_EQ(v.threads, 256);
  EXPECT_EQ(v.min_blocks, 4);
  EXPECT_EQ(p.plan.grid_x, 528u);
  EXPECT_EQ(p.plan.grid_y, 1u);
  EXPECT_EQ(p.plan.block, 256u);
  EXPECT_EQ(p.plan.workspace_bytes, 528u * 8);
  EXPECT_EQ(p.plan.counter_bytes, 4u);
  EXPECT_EQ(p.plan.workspace_word, 3);
  EXPECT_EQ(p.plan.counters_word, 4);
  EXPECT_EQ(p.plan.column_max_splits, 0) << "the split is not resized by the compiled kernel's occupancy";
  // the split depends on the sizes, the SM count and the tuning only: planned again, the same launch
  Planned again = plan_of(kGradNorm, {{"N", 100000000}});
  EXPECT_EQ(again.plan.words, p.plan.words);
  EXPECT_EQ(again.plan.grid_x, p.plan.grid_x);
  // an odd length keeps its vectors, with edge elements
  Planned odd = plan_of(kGradNorm, {{"N", 100000003}});
  EXPECT_TRUE(odd.plan.variant.grid);
  EXPECT_EQ(odd.plan.variant.vector, 8);
  EXPECT_TRUE(odd.plan.variant.edge_elements);
  EXPECT_EQ(odd.plan.grid_x, 528u);
  // [4, 25M] over its last axis: 132 blocks a row; var_mean's partials take three words
  Planned rows = plan_of("fusion f(x: bf16[R, N]) {\n  v, m = var_mean(x, dims=[1])\n  s = sum(x, dims=[1])\n  return v, m, s\n}\n",
                         {{"R", 4}, {"N", 25000000}});
  EXPECT_TRUE(rows.plan.variant.grid);
  EXPECT_EQ(rows.plan.grid_x, 132u);
  EXPECT_EQ(rows.plan.grid_y, 4u);
  EXPECT_EQ(rows.plan.workspace_bytes, 4u * 132 * (3 + 1) * 8);
  EXPECT_EQ(rows.plan.counter_bytes, 4u * 4);
  // a shorter vector: split only as far as each thread loads grid_min_vectors (8) vectors
  Planned shorter = plan_of(kGradNorm, {{"N", 1 << 20}});
  EXPECT_TRUE(shorter.plan.variant.grid);
  EXPECT_EQ(shorter.plan.grid_x, unsigned((1 << 20) / 8 / (256 * 8)));
  // the tuning table sets the block and the wave
  cuda::KernelTuning tuning;
  tuning.grid_threads = 512;
  tuning.grid_blocks_per_sm = 2;
  Planned tuned = plan_of(kGradNorm, {{"N", 100000000}}, 0, true, tuning);
  EXPECT_EQ(tuned.plan.block, 512u);
  EXPECT_EQ(tuned.plan.variant.min_blocks, 2);
  EXPECT_EQ(tuned.plan.grid_x, 264u);
}

TEST(LaunchPlan, GridReductionsLeaveOtherShapesToTheirKernels) {
  const char* row_sum = "fusion f(x: bf16[R, N]) {\n  s = sum(x, dims=[1])\n  return s\n}\n";
  // rows of moderate length, enough of them for a block each: a row kernel
  Planned many = plan_of(row_sum, {{"R", 8192}, {"N", 8192}});
  EXPECT_FALSE(many.plan.variant.grid);
  EXPECT_EQ(many.plan.variant.tile_x, 0);
  EXPECT_EQ(many.plan.grid_x, 8192u);
  // few rows too short to split (each thread would load under 8 vectors): the column kernel of
  // few long rows
  Planned few = plan_of(row_sum, {{"R", 4}, {"N", 20000}});
  EXPECT_FALSE(few.plan.variant.grid);
  EXPECT_TRUE(few.plan.variant.ty_fast);
  // a reduction over the outer axis reads the kept axis contiguously: a column kernel
  Planned outer = plan_of("fusion f(x: bf16[N, R]) {\n  s = sum(x, dims=[0])\n  return s\n}\n", {{"R", 4}, {"N", 25000000}});
  EXPECT_FALSE(outer.plan.variant.grid);
  EXPECT_GT(outer.plan.variant.tile_x, 0);
  // a value stored per element beside the sum: the column kernel stores it as it goes
  Planned stored = plan_of("fusion f(x: bf16[N]) {\n  y = mul(x, 2.0)\n  s = sum(x)\n  return y, s\n}\n", {{"N", 100000000}});
  EXPECT_FALSE(stored.plan.variant.grid);
  EXPECT_TRUE(stored.plan.variant.ty_fast);
  // grid_blocks_per_sm 0 turns grid reductions off: the column kernel of before
  cuda::KernelTuning off;
  off.grid_blocks_per_sm = 0;
  Planned before = plan_of(kGradNorm, {{"N", 100000000}}, 0, true, off);
  EXPECT_FALSE(before.plan.variant.grid);
  EXPECT_TRUE(before.plan.variant.ty_fast);
}

// Positions and gathers run in pointwise and row kernels: cross-entropy at GPT-2's vocabulary is a
// block per row holding it in shared memory (read once: its max, its sum, then the gradient stored),
// with edge elements (the logits in vectors, the target once a row, the iota's positions
// computed: 'p'), its Params ending in the gather's error flag; a
// single-pass reduction of one-hot rows over the outer axis, a column kernel without the iota,
// stays a row kernel.
TEST(LaunchPlan, GathersAndPositionsRunInPointwiseAndRowKernels) {
  Planned ce = plan_of(testing::read_file(testing::source_path("examples/cross_entropy.fusion")), {{"T", 8192}, {"V", 50257}});
  EXPECT_EQ(ce.leaves, "logits,t,ids");
  EXPECT_EQ(ce.plan.variant.key(), "r1.1_v8_t512_i13_b2_sh_32_e_vsp");
  EXPECT_EQ(ce.plan.error_word, int(ce.plan.words.size()) - 1);
  const std::string one_hot_counts = R"(fusion f(t: i64[T], x: f32[T, V]) {
  ids = iota(length=V, dtype=i64)
  tt = unsqueeze(t, dim=1)
  hit = eq(ids, tt)
  h = cast(hit, dtype=f32)
  hx = mul(h, x)
  c = sum(hx, dims=[0])
  return c
})";
  Planned counts = plan_of(one_hot_counts, {{"T", 4096}, {"V", 512}});
  EXPECT_EQ(counts.plan.variant.tile_x, 0) << counts.plan.variant.key();
  EXPECT_EQ(counts.plan.error_word, -1) << "no gathers, no flag";
  Planned plain = plan_of(R"(fusion f(x: f32[T, V]) {
  c = sum(x, dims=[0])
  return c
})", {{"T", 4096}, {"V", 512}});
  EXPECT_GT(plain.plan.variant.tile_x, 0) << "the same reduction without positions is a column kernel";
}

#endif  // ALLOY_HAVE_CUDA

}  // namespace
}  // namespace alloy
