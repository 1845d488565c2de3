// In-place outputs in the text format: `return y -> x` writes output y into input x's buffer.
// Parsing, printing (round trip), the static checks, and the run (CPU) that updates the input.
#include <cmath>

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "alloy/passes/sharding/propagate_sharding.h"
#include "alloy/runtime/executor.h"

namespace alloy {
namespace {

constexpr const char* kStep = R"(fusion sgd(p: f32[N], g: f32[N]) {
  s = mul(g, 0.5)
  q = sub(p, s)
  n = sum(g)
  return q -> p, n
}
)";

std::string error_of(const std::string& text) {
  try {
    parse_fusion(text, "alias.fusion");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(OutputAlias, ParsesAndPrintsAsAnArrow) {
  auto fusion = parse_fusion(kStep, "alias.fusion");
  ASSERT_EQ(fusion->output_aliases().size(), 2u);
  EXPECT_EQ(fusion->output_aliases()[0], fusion->inputs()[0]);
  EXPECT_EQ(fusion->output_aliases()[1], nullptr);
  std::string printed = print_fusion(*fusion, {false});
  EXPECT_NE(printed.find("return q -> p, n"), std::string::npos) << printed;
  EXPECT_EQ(print_fusion(*parse_fusion(printed, "again.fusion"), {false}), printed);
}

TEST(OutputAlias, CloneKeepsTheAlias) {
  auto fusion = parse_fusion(kStep, "alias.fusion");
  auto copy = fusion->clone();
  EXPECT_EQ(copy->output_aliases()[0], copy->inputs()[0]);
}

TEST(OutputAlias, MistakesAreLocatedUserErrors) {
  EXPECT_EQ(error_of("fusion f(x: f32[3]) {\n  y = cast(x, dtype=f64)\n  return y -> x\n}"),
            "alias.fusion:3:10: return y -> x: the output is f64[3] but the input is f32[3]; expected the same dtype and shape");
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = neg(x)\n  z = exp(x)\n  return y -> x, z -> x\n}").find("already updated"),
            std::string::npos);
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = neg(x)\n  return y -> y\n}").find("not a tensor input"), std::string::npos);
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = neg(x)\n  return y ->\n}").find("expected the name of the input"),
            std::string::npos);
  // a lone '-' or '>' elsewhere is still what it was
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = add(x, ->1)\n  return y\n}"), "");
}

TEST(OutputAlias, RunWritesTheInputAndReturnsIt) {
  FusionExecutor executor(parse_fusion(kStep, "alias.fusion"), {DeviceChoice::cpu});
  float p[4] = {1, 1, 1, 1}, g[4] = {0, 1, 2, 3};
  Tensor pt = Tensor::borrow(p, Device{}, DType::f32, {4}, {1}), gt = Tensor::borrow(g, Device{}, DType::f32, {4}, {1});
  std::vector<Tensor> out = executor.run({pt, gt});
  EXPECT_EQ(out[0].data(), static_cast<void*>(p));
  EXPECT_FLOAT_EQ(p[3], -0.5f);
  EXPECT_FLOAT_EQ(load_as_double(out[1].data(), DType::f32, 0), 6.0);
  executor.run({pt, gt});
  EXPECT_FLOAT_EQ(p[3], -2.0f);
}

// Outputs are the fusion's values before any in-place write: a view of the updated input, the
// input itself, and a swap of two inputs all see the old values.
TEST(OutputAlias, OtherOutputsViewingTheUpdatedInputKeepItsOldValues) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[2, 2]) {\n  y = exp(x)\n  t = permute(x, dims=[1, 0])\n  return y -> x, t, x\n}",
                                       "alias.fusion"),
                          {DeviceChoice::cpu});
  float x[4] = {0, 1, 2, 3};
  std::vector<Tensor> out = executor.run({Tensor::borrow(x, Device{}, DType::f32, {2, 2}, {2, 1})});
  EXPECT_FLOAT_EQ(x[1], std::exp(1.0f));  // updated in place
  Tensor t = out.at(1), old = out.at(2);
  EXPECT_NE(t.data(), static_cast<void*>(x));
  EXPECT_FLOAT_EQ(load_as_double(t.data(), DType::f32, t.stride(0) * 0 + t.stride(1) * 1), 2.0);  // t[0][1] = old x[1][0]
  EXPECT_FLOAT_EQ(load_as_double(t.data(), DType::f32, t.stride(0) * 1 + t.stride(1) * 0), 1.0);  // t[1][0] = old x[0][1]
  EXPECT_FLOAT_EQ(load_as_double(old.data(), DType::f32, 3), 3.0);

  FusionExecutor swap(parse_fusion("fusion s(a: f32[2], b: f32[2]) {\n  return b -> a, a -> b\n}", "swap.fusion"), {DeviceChoice::cpu});
  float a[2] = {1, 2}, b[2] = {3, 4};
  swap.run({Tensor::borrow(a, Device{}, DType::f32, {2}, {1}), Tensor::borrow(b, Device{}, DType::f32, {2}, {1})});
  EXPECT_EQ(std::vector<float>(a, a + 2), (std::vector<float>{3, 4}));
  EXPECT_EQ(std::vector<float>(b, b + 2), (std::vector<float>{1, 2}));
}

TEST(OutputAlias, SizesOfDifferentSymbolsMustAgreeAtRunTime) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[N], y: f32[M]) {\n  z = neg(y)\n  return z -> x\n}", "alias.fusion"),
                          {DeviceChoice::cpu});
  float x[3] = {}, y[4] = {};
  EXPECT_THROW(executor.run({Tensor::borrow(x, Device{}, DType::f32, {3}, {1}), Tensor::borrow(y, Device{}, DType::f32, {4}, {1})}),
               UserError);
}

// ---- the aliasing rule: a target shares no memory with another input ----------------------

std::string run_error(FusionExecutor& executor, const std::vector<Tensor>& inputs) {
  try {
    executor.run(inputs);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

Tensor f32_view(float* data, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  return Tensor::borrow(data, Device{}, DType::f32, std::move(sizes), std::move(strides));
}

TEST(OutputAlias, ATargetOverlappingAnotherInput_IsAnErrorNamingBoth) {
  FusionExecutor executor(parse_fusion(kStep, "alias.fusion"), {DeviceChoice::cpu});
  float memory[6] = {1, 1, 1, 1, 1, 1};
  std::string e = run_error(executor, {f32_view(memory, {5}, {1}), f32_view(memory + 1, {5}, {1})});
  EXPECT_NE(e.find("input 'p': is updated in place (`return q -> p`) but its memory overlaps input 'g'"), std::string::npos) << e;
  EXPECT_EQ(std::vector<float>(memory, memory + 6), std::vector<float>(6, 1.0f));  // nothing written
  // the same memory given twice, and a reversed view of it
  EXPECT_NE(run_error(executor, {f32_view(memory, {6}, {1}), f32_view(memory, {6}, {1})}).find("overlaps input 'g'"), std::string::npos);
  EXPECT_NE(run_error(executor, {f32_view(memory, {3}, {1}), f32_view(memory + 3, {3}, {-1})}).find("overlaps input 'g'"),
            std::string::npos);
  // disjoint parts of one array are two inputs
  EXPECT_EQ(run_error(executor, {f32_view(memory, {3}, {1}), f32_view(memory + 3, {3}, {1})}), "no error");
  EXPECT_FLOAT_EQ(memory[0], 0.5f);
  EXPECT_FLOAT_EQ(memory[3], 1.0f);
}

TEST(OutputAlias, TargetsOverlappingEachOther_AreAnError) {
  FusionExecutor swap(parse_fusion("fusion s(a: f32[2], b: f32[2]) {\n  return b -> a, a -> b\n}", "swap.fusion"), {DeviceChoice::cpu});
  float memory[3] = {1, 2, 3};
  std::string e = run_error(swap, {f32_view(memory, {2}, {1}), f32_view(memory + 1, {2}, {1})});
  EXPECT_NE(e.find("input 'a': is updated in place (`return b -> a`) but its memory overlaps input 'b', which is also updated in place"),
            std::string::npos) << e;
  EXPECT_EQ(std::vector<float>(memory, memory + 3), (std::vector<float>{1, 2, 3}));
}

// The overlaps are found by one sweep over the inputs' spans sorted by address (an optimizer step
// has hundreds of targets): a target that meets a read-only input lying inside a wider read-only
// one is found whatever the order, and inputs that are only read may still overlap each other.
TEST(OutputAlias, ATargetMeetingAnInputInsideAWiderOne_IsFoundBySortedSpans) {
  FusionExecutor executor(parse_fusion("fusion f(w: f32[8], r: f32[2], x: f32[2]) {\n  a = add(r, x)\n  s = sum(w, dims=[0])\n"
                                       "  return a -> x, s\n}",
                                       "alias.fusion"),
                          {DeviceChoice::cpu});
  float wide[8] = {}, apart[2] = {};
  // r lies inside w (both read only): fine; x apart
  EXPECT_EQ(run_error(executor, {f32_view(wide, {8}, {1}), f32_view(wide + 2, {2}, {1}), f32_view(apart, {2}, {1})}), "no error");
  // the target x inside w too, after r: w ends further than r, and x meets both
  std::string e = run_error(executor, {f32_view(wide, {8}, {1}), f32_view(wide + 2, {2}, {1}), f32_view(wide + 5, {2}, {1})});
  EXPECT_NE(e.find("input 'x': is updated in place (`return a -> x`) but its memory overlaps input 'w'"), std::string::npos) << e;
  // the target just past the wide input, meeting only r, which starts inside the wide one
  float memory[10] = {};
  e = run_error(executor, {f32_view(memory, {8}, {1}), f32_view(memory + 7, {2}, {1}), f32_view(memory + 8, {2}, {1})});
  EXPECT_NE(e.find("input 'x': is updated in place (`return a -> x`) but its memory overlaps input 'r'"), std::string::npos) << e;
}

TEST(OutputAlias, ATargetWithAZeroStride_IsAnError) {
  FusionExecutor executor(parse_fusion(kStep, "alias.fusion"), {DeviceChoice::cpu});
  float one = 1, g[4] = {0, 1, 2, 3};
  std::string e = run_error(executor, {f32_view(&one, {4}, {0}), f32_view(g, {4}, {1})});
  EXPECT_NE(e.find("input 'p': is updated in place (`return q -> p`) but has stride 0 on axis 0 of size 4"), std::string::npos) << e;
  EXPECT_FLOAT_EQ(one, 1.0f);
  // a zero stride on an axis of size 1 is one element: fine
  FusionExecutor single(parse_fusion("fusion f(x: f32[1, 2]) {\n  y = neg(x)\n  return y -> x\n}", "alias.fusion"), {DeviceChoice::cpu});
  float x[2] = {1, 2};
  EXPECT_EQ(run_error(single, {f32_view(x, {1, 2}, {0, 1})}), "no error");
  EXPECT_FLOAT_EQ(x[1], -2.0f);
}

// A target with no elements writes nothing, whatever its strides (NumPy 2 gives np.zeros((0, 3))
// strides (0, 0)).
TEST(OutputAlias, AnEmptyTargetWithZeroStrides_Runs) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[?, ?]) {\n  y = neg(x)\n  return y -> x\n}", "alias.fusion"),
                          {DeviceChoice::cpu});
  float unused = 1;
  std::vector<Tensor> out;
  ASSERT_NO_THROW(out = executor.run({f32_view(&unused, {0, 3}, {0, 0})}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_FLOAT_EQ(unused, 1.0f);
}

// Inputs that are only read may share memory; an output viewing one of them that is not written
// is that memory as it is.
TEST(OutputAlias, OverlappingInputsThatAreOnlyRead_Run) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[3], a: f32[3], b: f32[3]) {\n  s = add(a, b)\n  return s -> x, a\n}",
                                       "alias.fusion"),
                          {DeviceChoice::cpu});
  float x[3] = {}, ab[4] = {1, 2, 3, 4};
  std::vector<Tensor> out = executor.run({f32_view(x, {3}, {1}), f32_view(ab, {3}, {1}), f32_view(ab + 1, {3}, {1})});
  EXPECT_EQ(std::vector<float>(x, x + 3), (std::vector<float>{3, 5, 7}));
  EXPECT_FLOAT_EQ(load_as_double(out[1].data(), DType::f32, 2), 3.0);
}

// `return y -> p` writes each device's part of y into its part of p: y must be laid out as p.
TEST(OutputAlias, AnInPlaceOutputOfAnotherSharding_IsALocatedError) {
  auto fusion = parse_fusion(
      "fusion f(p: f32[8] @mesh[0, 1] shard(axis=0), g: f32[8] @mesh[0, 1] replicated) {\n  y = add(g, 1.0)\n  return y -> p\n}",
      "alias.fusion");
  std::string e;
  try {
    propagate_sharding(*fusion);
  } catch (const UserError& error) {
    e = error.what();
  }
  EXPECT_NE(e.find("alias.fusion:3:10: return y -> p: 'y' is @mesh[0, 1] replicated"), std::string::npos) << e;
  EXPECT_NE(e.find("but input 'p' is @mesh[0, 1] shard(axis=0)"), std::string::npos) << e;
  // the same layout, or an annotation that reshards y into it, is fine
  EXPECT_NO_THROW(propagate_sharding(*parse_fusion(
      "fusion f(p: f32[8] @mesh[0, 1] shard(axis=0), g: f32[8] @mesh[0, 1] replicated) {\n  y = add(g, 1.0) @mesh[0, 1] shard(axis=0)\n"
      "  return y -> p\n}",
      "alias.fusion")));
  EXPECT_NO_THROW(propagate_sharding(*parse_fusion(
      "fusion f(p: f32[8] @mesh[0, 1] shard(axis=0), g: f32[8] @mesh[0, 1] shard(axis=0)) {\n  y = add(p, g)\n  return y -> p\n}",
      "alias.fusion")));
}

}  // namespace
}  // namespace alloy
