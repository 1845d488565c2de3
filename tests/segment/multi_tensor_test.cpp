// Multi-tensor segments (segment/schedulers/multi_tensor.h): independent pointwise chains of one
// structure over tensors of any sizes become one launch; chains of other structures form groups of
// their own, and every chain left out says why in `--dump segments`. The CUDA plan is made on the
// host: no GPU needed.
#include "alloy/segment/schedulers/multi_tensor.h"

#include <gtest/gtest.h>

#include <functional>

#include "alloy/ir/parser.h"
#include "alloy/pipeline/pipeline.h"
#include "backend/cuda/kernel_cases.h"

namespace alloy {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

CompiledFusion cuda_plan(const std::string& text) {
  auto fusion = parse_fusion(text, "multi_tensor.fusion", std::nullopt);
  CompileOptions options;
  options.stop_after_lowering = true;
  return compile_fusion(*fusion, Target::cuda, options);
}

const Segmentation& segmentation(const CompiledFusion& c) { return c.lowered->segmentation; }

std::vector<const Segment*> of_kind(const Segmentation& s, SchedulerKind kind) {
  std::vector<const Segment*> out;
  for (const Segment& segment : s.segments)
    if (segment.scheduler == kind) out.push_back(&segment);
  return out;
}

TEST(MultiTensor, AdamStepOverGpt2sParameters_IsOneLaunchWritingEveryTensorInPlace) {
  std::vector<std::vector<int64_t>> shapes = testing::gpt2_shapes(768, 50257, 1024);
  ASSERT_EQ(shapes.size(), 148u);
  CompiledFusion plan = cuda_plan(testing::multi_adam_fusion(shapes));
  const Segmentation& s = segmentation(plan);
  ASSERT_EQ(s.segments.size(), 1u) << s.str();
  const Segment& group = s.segments[0];
  EXPECT_EQ(group.scheduler, SchedulerKind::multi_tensor);
  ASSERT_NE(group.group, nullptr);
  EXPECT_EQ(group.group->members.size(), 148u);
  EXPECT_EQ(group.ops.size(), 148u * 17);
  EXPECT_TRUE(contains(group.note, "148 chains of 17 ops, 4 tensors read and 3 written each")) << group.note;
  // the table: each member's leaves then outputs, in the kernel's order (the template's p is p0's place)
  const KernelAnalysis& kernel = group.group->kernel();
  ASSERT_EQ(kernel.leaves.size(), 4u);
  for (size_t i = 0; i < 148; ++i) {
    const std::vector<Value*>& tensors = group.group->tensors[i];
    ASSERT_EQ(tensors.size(), 7u);
    for (size_t k = 0; k < tensors.size(); ++k) {
      std::string model = k < 4 ? kernel.leaves[k]->name : kernel.outputs[k - 4]->name;
      std::string expected = model.substr(0, model.size() - 1) + std::to_string(i);  // "m0" -> "m17", "p2_0" -> "p2_17"
      EXPECT_EQ(tensors[k]->name, expected);
    }
  }
  ASSERT_EQ(s.in_place.size(), 3u * 148);
  for (const InPlaceOutput& o : s.in_place) EXPECT_TRUE(o.direct) << o.str();
  std::string program = plan.lowered->str();
  EXPECT_EQ(program.find("Copy"), std::string::npos) << program.substr(0, 2000);
  EXPECT_TRUE(contains(s.str(), "chains (the same ops, storing): {m2_0, v2_0, p2_0} {m2_1, v2_1, p2_1}")) << s.str();
  EXPECT_TRUE(s.refusals.empty()) << s.str();
}

TEST(MultiTensor, ChainsOfOtherStructures_AreGroupsOfTheirOwn_AndEachLeftOutSaysWhy) {
  CompiledFusion plan = cuda_plan(R"(fusion f(a: f32[4], b: f32[5, 6], c: f32[7], d: f32[8], e: f32[9], h: bf16[3], k: f32[3],
                                              l: f32[3], s: f32, t: f32) {
  a2 = mul(a, 2.0)
  b2 = mul(b, 2.0)
  c2 = mul(c, 2.0)
  d3 = mul(d, 3.0)
  e3 = mul(e, 3.0)
  h2 = mul(h, 2.0)
  ks = mul(k, s)
  lt = mul(l, t)
  return a2, b2, c2, d3, e3, h2, ks, lt
})");
  const Segmentation& s = segmentation(plan);
  std::vector<const Segment*> groups = of_kind(s, SchedulerKind::multi_tensor);
  ASSERT_EQ(groups.size(), 3u) << s.str();
  EXPECT_EQ(groups[0]->outputs.size(), 3u);  // a2, b2, c2: any sizes and ranks
  EXPECT_EQ(groups[0]->outputs[1]->name, "b2");
  EXPECT_EQ(groups[1]->outputs.size(), 2u);  // d3, e3: another literal
  ASSERT_EQ(groups[2]->outputs.size(), 2u);  // ks, lt: a scalar in the same place, each chain's own
  EXPECT_EQ(groups[2]->group->per_member, std::vector<bool>{true});
  EXPECT_TRUE(contains(groups[2]->note, "; scalars per member: s|t")) << groups[2]->note;
  EXPECT_EQ(of_kind(s, SchedulerKind::pointwise).size(), 1u) << s.str();  // h2, the rest
  std::string text = s.str();
  EXPECT_TRUE(contains(text, "multi_tensor refused {h2=mul}: no other chain has its structure")) << text;
}

// Two parameter groups of PyTorch's usual AdamW setup: the matrices decay (their own lr_d and
// wd_d), the biases and norm weights do not (lr_n and wd_n). Chains that differ only in the scalars
// they read are one launch; each member's table entry holds its own lr and wd, while bc1 and bc2,
// read by every chain, are passed once.
TEST(MultiTensor, TwoWeightDecayGroupsOfAnAdamWStep_AreOneLaunch_EachChainWithItsOwnScalars) {
  std::vector<std::vector<int64_t>> shapes = testing::gpt2_shapes(768, 50257, 1024);
  CompiledFusion plan = cuda_plan(testing::multi_adam_fusion(shapes, "f32", true));
  const Segmentation& s = segmentation(plan);
  ASSERT_EQ(s.segments.size(), 1u) << s.str();
  const Segment& segment = s.segments[0];
  ASSERT_EQ(segment.scheduler, SchedulerKind::multi_tensor);
  const MultiTensorGroup& group = *segment.group;
  ASSERT_EQ(group.members.size(), 148u);
  const KernelAnalysis& kernel = group.kernel();
  ASSERT_EQ(kernel.scalar_inputs.size(), 4u);
  ASSERT_EQ(group.per_member.size(), 4u);
  std::vector<std::string> own, shared;
  for (size_t k = 0; k < 4; ++k) (group.per_member[k] ? own : shared).push_back(kernel.scalar_inputs[k]->name);
  EXPECT_EQ(own, (std::vector<std::string>{"lr_d", "wd_d"}));  // member 0, wte, is a matrix
  EXPECT_EQ(shared, (std::vector<std::string>{"bc1", "bc2"}));
  for (size_t i = 0; i < 148; ++i) {
    ASSERT_EQ(group.scalars[i].size(), 2u);
    const std::string g = shapes[i].size() >= 2 ? "_d" : "_n";
    EXPECT_EQ(group.scalars[i][0]->name, "lr" + g) << "member " << i;
    EXPECT_EQ(group.scalars[i][1]->name, "wd" + g) << "member " << i;
  }
  EXPECT_TRUE(contains(segment.note, "148 chains of 17 ops, 4 tensors read and 3 written each: one launch over a table of their tensors; "
                                     "scalars per member: lr_d|lr_n, wd_d|wd_n"))
      << segment.note;
  EXPECT_TRUE(contains(s.str(), "scalars per member (each chain's own): {lr_d, wd_d} {lr_d, wd_d} {lr_n, wd_n} {lr_n, wd_n} {lr_d, wd_d}"))
      << s.str().substr(0, 3000);
  ASSERT_EQ(s.in_place.size(), 3u * 148);
  for (const InPlaceOutput& o : s.in_place) EXPECT_TRUE(o.direct) << o.str();
  EXPECT_TRUE(s.refusals.empty()) << s.str();
  // each entry two words longer: 333 AdamW members a launch (399 with every scalar shared)
  EXPECT_EQ(max_multi_tensor_members(4, 3, 2, 2), 333);
  EXPECT_EQ(max_multi_tensor_members(4, 3, 4, 0), 399);
}

// Only which scalar a place reads may differ: a chain that reads one scalar in two places is not
// one that reads two, and a chain of other ops stays apart, each saying why.
TEST(MultiTensor, ChainsReadingOtherScalars_AreOneGroup_ButNotChainsOfAnotherStructure) {
  CompiledFusion plan = cuda_plan(R"(fusion f(x0: f32[4], x1: f32[5], x2: f32[6], x3: f32[7], x4: f32[8], x5: f32[9], s: f32, t: f32) {
  y0 = mul(x0, s)
  y1 = mul(x1, t)
  y2 = mul(x2, s)
  z3 = add(x3, s)
  a4 = mul(x4, s)
  w4 = add(a4, t)
  a5 = mul(x5, s)
  w5 = add(a5, s)
  return y0, y1, y2, z3, w4, w5
})");
  const Segmentation& s = segmentation(plan);
  std::vector<const Segment*> groups = of_kind(s, SchedulerKind::multi_tensor);
  ASSERT_EQ(groups.size(), 1u) << s.str();
  ASSERT_EQ(groups[0]->outputs.size(), 3u) << s.str();
  EXPECT_EQ(groups[0]->group->per_member, std::vector<bool>{true});
  EXPECT_TRUE(contains(groups[0]->note, "; scalars per member: s|t")) << groups[0]->note;
  std::string text = s.str();
  EXPECT_TRUE(contains(text, "scalars per member (each chain's own): {s} {t} {s}")) << text;
  EXPECT_TRUE(contains(text, "multi_tensor refused {z3=add}: no other chain has its structure")) << text;
  EXPECT_TRUE(contains(text, "multi_tensor refused {a4=mul, w4=add}: no other chain has its structure")) << text;
  EXPECT_TRUE(contains(text, "multi_tensor refused {a5=mul, w5=add}: no other chain has its structure")) << text;
}

TEST(MultiTensor, ADependentChainOrABroadcast_IsLeftOutAndSaysWhy) {
  CompiledFusion plan = cuda_plan(R"(fusion f(x0: f32[4], x1: f32[5], x2: f32[6], r: f32[2, 3], q: f32[3]) {
  y0 = mul(x0, 2.0)
  y1 = mul(x1, 2.0)
  y2 = mul(x2, 2.0)
  z = mul(y1, 2.0)
  w = add(r, q)
  return y0, y1, y2, z, w
})");
  const Segmentation& s = segmentation(plan);
  std::vector<const Segment*> groups = of_kind(s, SchedulerKind::multi_tensor);
  ASSERT_EQ(groups.size(), 1u) << s.str();
  ASSERT_EQ(groups[0]->outputs.size(), 2u) << s.str();
  EXPECT_EQ(groups[0]->outputs[0]->name, "y0");
  EXPECT_EQ(groups[0]->outputs[1]->name, "y2");
  std::string text = s.str();
  // z reads y1: one chain of two ops, of another structure
  EXPECT_TRUE(contains(text, "multi_tensor refused {y1=mul, z=mul}: no other chain has its structure")) << text;
  EXPECT_TRUE(contains(text, "multi_tensor refused {w=add}: 'r' (f32[2, 3]) and 'q' (f32[3]) differ in shape")) << text;
}

TEST(MultiTensor, AScalarComputedOnceForEveryChain_IsReadByTheGroup) {
  CompiledFusion plan = cuda_plan(R"(fusion f(x0: f32[4], x1: f32[5], lr: f32, wd: f32) {
  k = mul(lr, wd)
  keep = sub(1.0, k)
  y0 = mul(x0, keep)
  y1 = mul(x1, keep)
  return y0 -> x0, y1 -> x1
})");
  const Segmentation& s = segmentation(plan);
  std::vector<const Segment*> groups = of_kind(s, SchedulerKind::multi_tensor);
  ASSERT_EQ(groups.size(), 1u) << s.str();
  EXPECT_EQ(groups[0]->id, int(s.segments.size()) - 1);  // after the scalar's segment
  EXPECT_EQ(groups[0]->group->kernel().scalar_inputs.size(), 1u);
  EXPECT_EQ(groups[0]->group->kernel().scalar_inputs[0]->name, "keep");
  EXPECT_EQ(groups[0]->group->per_member, std::vector<bool>{false});  // one value, passed once
  for (const InPlaceOutput& o : s.in_place) EXPECT_TRUE(o.direct) << o.str();
}

// `chains` independent chains y<i> = mul(x<i>, factor(i)) over x<i>: f32[i + 1], with `more`
// parameters after the x's (", s: f32" where a factor names one).
std::string many_chains(int chains, const std::function<std::string(int)>& factor, const std::string& more) {
  std::string params, body, results;
  for (int i = 0; i < chains; ++i) {
    std::string n = std::to_string(i);
    params += (i ? ", x" : "x") + n + ": f32[" + std::to_string(i + 1) + "]";
    body += "  y" + n + " = mul(x" + n + ", " + factor(i) + ")\n";
    results += (i ? ", y" : "y") + n;
  }
  return "fusion f(" + params + more + ") {\n" + body + "  return " + results + "\n}\n";
}

TEST(MultiTensor, MoreChainsThanOneLaunchsParametersHold_AreSeveralLaunches) {
  const int chains = 1000, most = max_multi_tensor_members(1, 1, 0, 0);
  ASSERT_EQ(most, 799);
  CompiledFusion plan = cuda_plan(many_chains(chains, [](int) { return "2.0"; }, ""));
  const Segmentation& s = segmentation(plan);
  std::vector<const Segment*> groups = of_kind(s, SchedulerKind::multi_tensor);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0]->group->members.size(), size_t(most));
  EXPECT_EQ(groups[1]->group->members.size(), size_t(chains - most));
}

// A scalar of each member's own makes each entry a word longer: fewer members a launch.
TEST(MultiTensor, ChainsWithScalarsOfTheirOwn_HoldFewerMembersALaunch) {
  const int chains = 1000, most = max_multi_tensor_members(1, 1, 0, 1);
  ASSERT_EQ(most, 666);
  CompiledFusion plan = cuda_plan(many_chains(chains, [](int i) { return i % 2 ? "t" : "s"; }, ", s: f32, t: f32"));
  const Segmentation& s = segmentation(plan);
  std::vector<const Segment*> groups = of_kind(s, SchedulerKind::multi_tensor);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0]->group->members.size(), size_t(most));
  EXPECT_EQ(groups[1]->group->members.size(), size_t(chains - most));
  EXPECT_EQ(groups[1]->group->scalars.at(1).at(0)->name, (most + 1) % 2 ? "t" : "s");
}

TEST(MultiTensor, OnTheCpu_EveryOpIsItsOwnSegment) {
  auto fusion = parse_fusion(testing::multi_adam_fusion({{4}, {5}}), "multi_tensor.fusion", std::nullopt);
  CompileOptions options;
  options.stop_after_lowering = true;
  CompiledFusion plan = compile_fusion(*fusion, Target::cpu, options);
  EXPECT_TRUE(of_kind(segmentation(plan), SchedulerKind::multi_tensor).empty());
}

}  // namespace
}  // namespace alloy
