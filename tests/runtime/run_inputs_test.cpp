// Inputs for runs without full data: size resolution from tensors and --bind requests, seeded
// random tensors, and the one-line output summary.
#include "alloy/runtime/run_inputs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "alloy/ir/parser.h"

namespace alloy {
namespace {

std::unique_ptr<Fusion> masked_mean() {
  return parse_fusion(
      "fusion masked_mean(h: f32[B, T, ?], mask: bool[B, T]) {\n"
      "  keep = cast(mask, dtype=f32)\n"
      "  keep3 = unsqueeze(keep, dim=2)\n"
      "  kept = mul(h, keep3)\n"
      "  return kept\n"
      "}\n",
      "mm.fusion");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

Tensor f32_values(std::vector<int64_t> sizes, std::vector<float> values) {
  Tensor t = Tensor::empty(DType::f32, std::move(sizes));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

TEST(ResolveInputSizes, GivenTensor_BindsItsSymbolsAndDynamicAxes) {
  auto f = masked_mean();
  std::vector<Tensor> given{Tensor::empty(DType::f32, {2, 3, 5}), Tensor()};
  Bindings b = resolve_input_sizes(*f, given, {});
  EXPECT_EQ(b.at("B"), 2);
  EXPECT_EQ(b.at("T"), 3);
  auto dynamic = f->inputs()[0]->shape()[2].as_symbol();
  ASSERT_TRUE(dynamic.has_value());
  EXPECT_EQ(b.at(*dynamic), 5);
}

TEST(ResolveInputSizes, Requests_BindSymbolsAndInputDotAxisNamesADynamicAxis) {
  auto f = masked_mean();
  Bindings b = resolve_input_sizes(*f, {Tensor(), Tensor()}, {{"B", 4}, {"T", 6}, {"h.2", 8}});
  EXPECT_EQ(b.at("B"), 4);
  EXPECT_EQ(b.at("T"), 6);
  EXPECT_EQ(b.at(*f->inputs()[0]->shape()[2].as_symbol()), 8);
}

TEST(ResolveInputSizes, UnboundSizesOfInputsToDraw_AreListedTogether) {
  auto f = masked_mean();
  std::string e = error_of([&] { resolve_input_sizes(*f, {Tensor(), Tensor()}, {{"T", 6}}); });
  EXPECT_NE(e.find("fusion 'masked_mean': sizes not bound: B (input 'h', axis 0); input 'h', axis 2, declared ? (--bind h.2=N)"),
            std::string::npos)
      << e;
}

TEST(ResolveInputSizes, SizeOnlyAGivenInputUses_NeedsNoBinding) {
  auto f = masked_mean();
  // mask is given (B, T); h is drawn and needs its ? axis: still unbound.
  std::string e = error_of([&] { resolve_input_sizes(*f, {Tensor(), Tensor::empty(DType::boolean, {2, 3})}, {}); });
  EXPECT_NE(e.find("sizes not bound: input 'h', axis 2"), std::string::npos) << e;
  EXPECT_EQ(e.find("B ("), std::string::npos) << e;
}

TEST(ResolveInputSizes, BadRequests_AreUserErrorsNamingTheRequest) {
  auto f = masked_mean();
  std::vector<Tensor> none{Tensor(), Tensor()};
  EXPECT_EQ(error_of([&] { resolve_input_sizes(*f, none, {{"Q", 1}}); }),
            "--bind Q=1: fusion 'masked_mean' has no size named 'Q'; its sizes are B, T");
  EXPECT_NE(error_of([&] { resolve_input_sizes(*f, none, {{"h.7", 1}}); }).find("expected INPUT.AXIS with AXIS in 0..2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_input_sizes(*f, none, {{"x.0", 1}}); }).find("has no input named 'x'"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_input_sizes(*f, none, {{"B", -2}}); }).find("expected a size of 0 or more"), std::string::npos);
  std::vector<Tensor> h_given{Tensor::empty(DType::f32, {2, 3, 5}), Tensor()};
  EXPECT_EQ(error_of([&] { resolve_input_sizes(*f, h_given, {{"T", 4}}); }),
            "--bind T=4: contradicts input 'h', axis 1, which has size 3");
}

TEST(ResolveInputSizes, GivenTensorOfTheWrongRank_IsAUserError) {
  auto f = masked_mean();
  EXPECT_NE(error_of([&] { resolve_input_sizes(*f, {Tensor::empty(DType::f32, {2, 3}), Tensor()}, {}); })
                .find("input 'h': expected 3 dims (declared f32[B, T, ?]), found 2 dims f32[2, 3]"),
            std::string::npos);
}

TEST(RandomTensor, SameSeed_SameValues_OtherSeed_OtherValues) {
  Tensor a = random_tensor(DType::f32, {100}, 5), b = random_tensor(DType::f32, {100}, 5), c = random_tensor(DType::f32, {100}, 6);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 400), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), 400), 0);
}

TEST(RandomTensor, Floats_AreStandardNormal) {
  Tensor t = random_tensor(DType::f64, {20000}, 1);
  double sum = 0, squares = 0;
  for (int i = 0; i < 20000; ++i) sum += t.data_as<double>()[i];
  double mean = sum / 20000;
  for (int i = 0; i < 20000; ++i) squares += std::pow(t.data_as<double>()[i] - mean, 2);
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(squares / 20000), 1.0, 0.03);
}

TEST(RandomTensor, IntegersAreDigitsAndBoolsAreBothValues) {
  Tensor ints = random_tensor(DType::i32, {1000}, 2);
  bool seen[10] = {};
  for (int i = 0; i < 1000; ++i) {
    int32_t v = ints.data_as<int32_t>()[i];
    ASSERT_TRUE(v >= 0 && v <= 9) << v;
    seen[v] = true;
  }
  for (bool s : seen) EXPECT_TRUE(s);
  Tensor bools = random_tensor(DType::boolean, {1000}, 3);
  int trues = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_LE(bools.data_as<uint8_t>()[i], 1);
    trues += bools.data_as<uint8_t>()[i];
  }
  EXPECT_GT(trues, 400);
  EXPECT_LT(trues, 600);
}

TEST(RandomTensor, Bf16_HoldsRoundedNormalValues) {
  Tensor t = random_tensor(DType::bf16, {4}, 9);
  Tensor f = random_tensor(DType::f64, {4}, 9);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(load_as_double(t.data(), DType::bf16, i), double(bf16_bits_to_float(float_to_bf16_bits(float(f.data_as<double>()[i])))));
}

TEST(CompleteInputs, GivingOneInput_LeavesTheOthersValuesUnchanged) {
  auto f = masked_mean();
  Bindings b{{"B", 2}, {"T", 3}, {*f->inputs()[0]->shape()[2].as_symbol(), 4}};
  std::vector<Tensor> drawn = complete_inputs(*f, {Tensor(), Tensor()}, b, 11);
  Tensor mine = f32_values({2, 3, 4}, std::vector<float>(24, 0.5f));
  std::vector<Tensor> partly = complete_inputs(*f, {mine, Tensor()}, b, 11);
  EXPECT_EQ(partly[0].data(), mine.data());
  ASSERT_EQ(drawn[1].sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(drawn[1].data(), partly[1].data(), 6), 0);
  EXPECT_EQ(drawn[0].sizes(), (std::vector<int64_t>{2, 3, 4}));
}

TEST(SummarizeTensor, KnownValues_GiveMeanPopulationStdMinMaxAndTheFirstFour) {
  EXPECT_EQ(summarize_tensor(f32_values({5}, {1, 2, 3, 4, 5})), "mean=3 std=1.414 min=1 max=5 first=[1, 2, 3, 4, ...]");
}

TEST(SummarizeTensor, NansAndInfinities_AreCountedApart) {
  EXPECT_EQ(summarize_tensor(f32_values({4}, {1, NAN, INFINITY, 3})), "mean=2 std=1 min=1 max=3 nan=1 inf=1 first=[1, nan, inf, 3]");
  EXPECT_EQ(summarize_tensor(f32_values({1}, {NAN})), "nan=1 first=[nan]");
}

TEST(SummarizeTensor, IntegersBoolsAndEmptyTensors) {
  Tensor ints = Tensor::empty(DType::i64, {3});
  ints.data_as<int64_t>()[0] = -7, ints.data_as<int64_t>()[1] = 1, ints.data_as<int64_t>()[2] = 12;
  EXPECT_EQ(summarize_tensor(ints), "mean=2 std=7.789 min=-7 max=12 first=[-7, 1, 12]");
  Tensor bools = Tensor::empty(DType::boolean, {3});
  bools.data_as<uint8_t>()[0] = 1, bools.data_as<uint8_t>()[1] = 0, bools.data_as<uint8_t>()[2] = 1;
  EXPECT_EQ(summarize_tensor(bools), "true=2/3 first=[true, false, true]");
  EXPECT_EQ(summarize_tensor(Tensor::empty(DType::f32, {0, 4})), "empty");
}

TEST(SummarizeTensor, StridedView_IsReadInItsOwnCOrder) {
  Tensor t = f32_values({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(summarize_tensor(t.permute({1, 0})), "mean=2.5 std=1.118 min=1 max=4 first=[1, 3, 2, 4]");
}

TEST(TensorTypeStr, SpellsDtypeAndSizes) {
  EXPECT_EQ(tensor_type_str(Tensor::empty(DType::bf16, {8, 128})), "bf16[8, 128]");
  EXPECT_EQ(tensor_type_str(Tensor::empty(DType::f32, {})), "f32[]");
}

}  // namespace
}  // namespace alloy
