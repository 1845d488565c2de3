// How in-place outputs (`return y -> x`) are written (segment/in_place.h): by the pointwise kernel
// that computes y, straight into x's memory, or through a copy after the run, each saying why in
// `--dump segments` and `--dump program`. The CUDA plan is made on the host: no GPU needed.
#include "alloy/segment/in_place.h"

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/pipeline/pipeline.h"
#include "test_util.h"

namespace alloy {
namespace {

// The plan a run makes of `text` (the pipeline to the lowered program, no kernels compiled); it
// keeps the fusion the program's values belong to.
struct Plan {
  CompiledFusion compiled;
  const host_ir::Program& program() const { return *compiled.lowered; }
  const Segmentation& segmentation() const { return compiled.lowered->segmentation; }
  std::string str() const { return program().str(); }
};

Plan plan_for(const std::string& text, Target target) {
  auto fusion = parse_fusion(text, "in_place.fusion", std::nullopt);
  CompileOptions options;
  options.stop_after_lowering = true;
  return Plan{compile_fusion(*fusion, target, options)};
}

Plan cuda_plan(const std::string& text) { return plan_for(text, Target::cuda); }

Plan cuda_plan_of_file(const std::string& example) {
  return cuda_plan(testing::read_file(testing::source_path("examples/" + example)));
}

const InPlaceOutput& decision(const Segmentation& s, const std::string& value) {
  for (const InPlaceOutput& o : s.in_place)
    if (o.value->name == value) return o;
  ADD_FAILURE() << "no in-place output '" << value << "' in\n" << s.str();
  static const InPlaceOutput none;
  return none;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// ---- the optimizer steps: one kernel, every target written in place, no copy ----------------

TEST(InPlace, AdamStep_IsOneKernelWritingTheParametersAndBothMomentsInPlace) {
  Plan plan = cuda_plan_of_file("adam_step.fusion");
  const Segmentation& s = plan.segmentation();
  ASSERT_EQ(s.segments.size(), 1u) << s.str();
  EXPECT_EQ(s.segments[0].scheduler, SchedulerKind::pointwise);
  ASSERT_EQ(s.in_place.size(), 3u) << s.str();
  for (const InPlaceOutput& o : s.in_place) {
    EXPECT_TRUE(o.direct) << o.str();
    EXPECT_EQ(o.segment, 0);
  }
  std::string segments = s.str(), program = plan.str();
  EXPECT_TRUE(contains(segments, "in-place outputs:\n"
                                 "  p2 -> p: written in place by segment 0: pointwise, 'p' read and written at the same element by one "
                                 "thread; nothing else reads it\n"))
      << segments;
  EXPECT_TRUE(contains(segments, "  v2 -> v: written in place by segment 0:")) << segments;
  // each target's memory is its result's buffer: three such Allocates, no other, and no copy
  EXPECT_TRUE(contains(program, "Allocate p2: f32[N] = the memory of input p (written in place)")) << program;
  EXPECT_EQ(count(program, "= the memory of input"), 3) << program;
  EXPECT_EQ(count(program, "Allocate"), 3) << program;
  EXPECT_EQ(count(program, "Launch"), 1) << program;
  EXPECT_FALSE(contains(program, "Copy")) << program;
}

TEST(InPlace, SgdWithMomentum_IsOneKernelWritingTheParametersAndTheBufferInPlace) {
  Plan plan = cuda_plan_of_file("sgd_momentum.fusion");
  ASSERT_EQ(plan.segmentation().segments.size(), 1u) << plan.segmentation().str();
  ASSERT_EQ(plan.segmentation().in_place.size(), 2u);
  EXPECT_TRUE(decision(plan.segmentation(), "p2").direct) << plan.segmentation().str();
  EXPECT_TRUE(decision(plan.segmentation(), "buf2").direct) << plan.segmentation().str();
  EXPECT_FALSE(contains(plan.str(), "Copy")) << plan.str();
}

// `alloy compile --dump segments|program` prints the same plan, offline.
TEST(InPlace, OfflineDumpsShowThePlanOfAGpuRun) {
  auto fusion = parse_fusion_file(testing::source_path("examples/adam_step.fusion"));
  std::string segments = offline_dump(*fusion, "segments"), program = offline_dump(*fusion, "program");
  EXPECT_TRUE(contains(segments, "segments (cuda): 1\n")) << segments;
  EXPECT_EQ(count(segments, "written in place by segment 0"), 3) << segments;
  EXPECT_EQ(count(program, "= the memory of input"), 3) << program;
  EXPECT_FALSE(contains(program, "Copy")) << program;
}

TEST(InPlace, ATargetTheKernelDoesNotRead_IsWrittenInPlace) {
  Plan plan = cuda_plan("fusion f(p: f32[N], g: f32[N]) {\n  y = mul(g, 2.0)\n  return y -> p\n}\n");
  const InPlaceOutput& o = decision(plan.segmentation(), "y");
  EXPECT_TRUE(o.direct);
  EXPECT_EQ(o.why, "pointwise; nothing reads 'p'");
}

// ---- where writing in place is not safe: a copy after the run, saying why --------------------

// The aliasing rule: an output that is the target, or a view of it, keeps the old values.
TEST(InPlace, TheOldValueAlsoReturned_GoesThroughACopy) {
  for (const char* returned : {"p", "pt"}) {
    SCOPED_TRACE(returned);
    Plan plan = cuda_plan(std::string("fusion f(p: f32[N, N], g: f32[N, N]) {\n  s = mul(g, 0.1)\n  p2 = sub(p, s)\n"
                                                  "  pt = permute(p, dims=[1, 0])\n  return p2 -> p, ") +
                                      returned + "\n}\n");
    const InPlaceOutput& o = decision(plan.segmentation(), "p2");
    EXPECT_FALSE(o.direct);
    std::string why = std::string(returned) == "p" ? "'p' is also returned" : "'pt', a view of 'p', is also returned";
    EXPECT_EQ(o.why, why + ", and every other output keeps the values from before the write (the aliasing rule)");
    EXPECT_TRUE(contains(plan.segmentation().str(), "p2 -> p: through a copy after the run: " + why)) << plan.segmentation().str();
    EXPECT_TRUE(contains(plan.str(), "Allocate p2: f32[N, N]\n")) << plan.str();
    EXPECT_TRUE(contains(plan.str(), "Copy p2 into input p after the run: " + why)) << plan.str();
  }
}

// Another segment reads the target's old values (a GEMM here): writing the target while it reads
// it (on another stream), or before, would change what it sees.
TEST(InPlace, ATargetReadByAnotherSegment_GoesThroughACopy) {
  Plan plan = cuda_plan(R"(fusion f(p: f32[N, K], g: f32[N, K], m: f32[N, K], w: f32[K, K]) {
  s = mul(g, 0.1)
  p2 = sub(p, s)
  m2 = add(m, g)
  h = matmul(m, w)
  return p2 -> p, m2 -> m, h
}
)");
  const Segmentation& s = plan.segmentation();
  EXPECT_TRUE(decision(s, "p2").direct) << s.str();
  const InPlaceOutput& m = decision(s, "m2");
  EXPECT_FALSE(m.direct);
  EXPECT_TRUE(contains(m.why, "'m' is also read by 'h = matmul' in segment 1 [matmul]")) << s.str();
  EXPECT_EQ(count(plan.str(), "Copy "), 1) << plan.str();
  EXPECT_TRUE(contains(plan.str(), "Copy m2 into input m after the run: 'm' is also read by 'h = matmul'")) << plan.str();
}

// A reduction of the target in the step's own kernel (a gradient norm of the momentum) makes it a
// normalization kernel, which reads its rows before it writes them in a later pass: a copy.
TEST(InPlace, ATargetReadByAReduction_GoesThroughACopy) {
  Plan plan = cuda_plan(R"(fusion f(p: f32[N], g: f32[N], buf: f32[N]) {
  kept = mul(buf, 0.9)
  buf2 = add(kept, g)
  s = mul(buf2, 0.1)
  p2 = sub(p, s)
  sq = mul(buf, buf)
  norm = sum(sq, dims=[0])
  return p2 -> p, buf2 -> buf, norm
}
)");
  ASSERT_EQ(plan.segmentation().segments.size(), 1u) << plan.segmentation().str();
  for (const InPlaceOutput& o : plan.segmentation().in_place) {
    EXPECT_FALSE(o.direct) << o.str();
    EXPECT_TRUE(contains(o.why, "is computed by segment 0 [normalization]; only a generated pointwise kernel reads and writes each "
                                "element in one thread")) << o.str();
  }
  EXPECT_EQ(count(plan.str(), "Copy "), 2) << plan.str();
}

// The kernel itself reads the target at other elements than it writes (a transposed view, a cat):
// a thread could read an element another thread already wrote.
TEST(InPlace, ATargetReadAtOtherElementsByItsKernel_GoesThroughACopy) {
  Plan transposed = cuda_plan(R"(fusion f(v: f32[N, N]) {
  vt = permute(v, dims=[1, 0])
  v2 = add(v, vt)
  return v2 -> v
}
)");
  const InPlaceOutput& o = decision(transposed.segmentation(), "v2");
  EXPECT_FALSE(o.direct) << transposed.segmentation().str();
  EXPECT_TRUE(contains(o.why, "segment 0 reads 'v' through the view 'vt' (by 'v2 = add') at other elements than it writes")) << o.why;

  // rows shifted up by one: a's second row, then b's first
  Plan concatenated = cuda_plan(R"(fusion f(a: f32[2, 64], b: f32[2, 64]) {
  a1 = slice(a, starts=[1, 0], ends=[2, 64], steps=[1, 1])
  b0 = slice(b, starts=[0, 0], ends=[1, 64], steps=[1, 1])
  c = cat(a1, b0, dim=0)
  y = add(c, 1.0)
  return y -> a
}
)");
  ASSERT_EQ(concatenated.segmentation().segments.size(), 1u) << concatenated.segmentation().str();
  const InPlaceOutput& shifted = decision(concatenated.segmentation(), "y");
  EXPECT_FALSE(shifted.direct);
  EXPECT_TRUE(contains(shifted.why, "segment 0 reads 'a' through the view 'a1' (by 'c = cat')")) << shifted.why;

  // a gather of the target (held-out checks: the decision threw reading the source's layout)
  Plan gathered = cuda_plan(R"(fusion f(x: f32[3, 4], idx: i64[3, 4]) {
  y = gather(x, idx, dim=1)
  return y -> x
}
)");
  const InPlaceOutput& g = decision(gathered.segmentation(), "y");
  EXPECT_FALSE(g.direct);
  EXPECT_TRUE(contains(g.why, "segment 0 reads 'x' (by 'y = gather') at other elements than it writes")) << g.why;
}

// Only a pointwise kernel computes each element in the thread that stores it; a normalization
// reads its rows in passes.
TEST(InPlace, AResultOfANormalizationKernel_GoesThroughACopy) {
  Plan plan = cuda_plan(R"(fusion f(x: f32[R, C]) {
  m = max(x, dims=[1], keepdim=true)
  y = sub(x, m)
  return y -> x
}
)");
  const InPlaceOutput& o = decision(plan.segmentation(), "y");
  EXPECT_FALSE(o.direct);
  EXPECT_EQ(o.why, "'y' is computed by segment 0 [normalization]; only a generated pointwise kernel reads and writes each element in one thread");
}

// One result into two inputs: one of them is its buffer, the other a copy of it.
TEST(InPlace, OneResultIntoTwoInputs_WritesTheFirstInPlaceAndCopiesTheOther) {
  Plan plan = cuda_plan("fusion f(p: f32[N], q: f32[N], g: f32[N]) {\n  y = add(g, 1.0)\n  return y -> p, y -> q\n}\n");
  ASSERT_EQ(plan.segmentation().in_place.size(), 2u);
  EXPECT_TRUE(plan.segmentation().in_place[0].direct);
  EXPECT_FALSE(plan.segmentation().in_place[1].direct);
  EXPECT_EQ(plan.segmentation().in_place[1].why, "'y' is already written in place into 'p'");
}

TEST(InPlace, OnTheCpu_EveryTargetIsACopyOfItsResult) {
  Plan plan = plan_for(testing::read_file(testing::source_path("examples/adam_step.fusion")), Target::cpu);
  ASSERT_EQ(plan.segmentation().in_place.size(), 3u);
  for (const InPlaceOutput& o : plan.segmentation().in_place) {
    EXPECT_FALSE(o.direct);
    EXPECT_EQ(o.why, "the CPU reference computes every op into a buffer of its own");
  }
  EXPECT_EQ(count(plan.str(), "Copy "), 3) << plan.str();
}

}  // namespace
}  // namespace alloy
