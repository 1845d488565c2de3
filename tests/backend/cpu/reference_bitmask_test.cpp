// The ReLU bit masks on the CPU reference, against bits packed here by plain loops: relu_mask of
// odd widths (1, 31, 33, 100), multiples of 32 and 128, batched leading axes, strided inputs and
// several dtypes; relu_backward_mask with masks whose padding bits are set; the text format's
// round trip and the located errors of bad masks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "alloy/common/error.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "alloy/runtime/executor.h"
#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

std::vector<Tensor> run_on_cpu(const std::string& text, const std::vector<Tensor>& inputs) {
  FusionExecutor executor(parse_fusion(text, "t.fusion", std::nullopt), {DeviceChoice::cpu});
  return executor.run(inputs);
}

std::string shape_text(const Shape& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out;
}

// Values with positives, negatives, zeros (and, for floats, NaN, -0 and infinities).
std::vector<double> mixed_values(int64_t n, bool floating, uint32_t seed) {
  std::vector<double> v = random_values(n, seed, -3.0, 3.0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 7 == 3) v[i] = 0.0;
    if (!floating) v[i] = std::round(v[i]);
    else if (i % 11 == 5) v[i] = std::numeric_limits<double>::quiet_NaN();
    else if (i % 13 == 6) v[i] = -0.0;
    else if (i % 17 == 8) v[i] = (i % 2 ? 1 : -1) * std::numeric_limits<double>::infinity();
  }
  return v;
}

// Bit j of word k of row r is x[r, 32k + j] > 0: one word at a time, one bit at a time.
std::vector<uint32_t> packed_by_hand(const std::vector<double>& x, int64_t rows, int64_t n) {
  int64_t words = (n + 31) / 32;
  std::vector<uint32_t> out(size_t(rows * words), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c)
      if (x[size_t(r * n + c)] > 0) out[size_t(r * words + c / 32)] |= uint32_t(1) << (c % 32);
  return out;
}

std::vector<uint32_t> words_of(const Tensor& mask) {
  std::vector<uint32_t> out;
  for (int64_t w : ints(mask)) out.push_back(uint32_t(int32_t(w)));
  return out;
}

TEST(ReluMask, PacksTheLastAxis_OddWidthsAndBatchedAxes) {
  for (const char* dtype : {"bf16", "f32", "f16", "f64", "i32", "i64"}) {
    DType dt = *parse_dtype(dtype);
    bool floating = is_floating(dt);
    for (int64_t n : {1, 31, 32, 33, 100, 128, 256}) {
      SCOPED_TRACE(std::string(dtype) + ", N = " + std::to_string(n));
      Shape shape{2, 3, n};
      int64_t words = (n + 31) / 32;
      std::string text = "fusion f(x: " + std::string(dtype) + "[" + shape_text(shape) + "]) {\n  m = relu_mask(x)\n  return m\n}\n";
      std::vector<double> x = mixed_values(6 * n, floating, uint32_t(n));
      Tensor input = make(dt, shape, x);
      std::vector<double> stored = values(input);  // as the dtype holds them (bf16 rounds, NaN stays)
      Tensor mask = run_on_cpu(text, {input})[0];
      EXPECT_EQ(mask.dtype(), DType::i32);
      EXPECT_EQ(mask.sizes(), (Shape{2, 3, words}));
      EXPECT_EQ(words_of(mask), packed_by_hand(stored, 6, n));
    }
  }
}

TEST(ReluMask, OfAStridedInput_ReadsTheLogicalLastAxis) {
  // x is [100, 3] in memory; its permute [3, 100] is packed along the 100 (stride 3)
  std::vector<double> x = mixed_values(300, true, 9);
  Tensor input = make(DType::f32, {100, 3}, x);
  Tensor mask = run_on_cpu("fusion f(x: f32[100, 3]) {\n  p = permute(x, dims=[1, 0])\n  m = relu_mask(p)\n  return m\n}\n",
                           {input})[0];
  std::vector<double> transposed(300);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 100; ++c) transposed[size_t(r * 100 + c)] = x[size_t(c * 3 + r)];
  EXPECT_EQ(words_of(mask), packed_by_hand(transposed, 3, 100));
}

TEST(ReluMask, BitsPastTheWidthAreZero) {
  Tensor ones = make(DType::f32, {2, 33}, std::vector<double>(66, 1.0));
  Tensor mask = run_on_cpu("fusion f(x: f32[2, 33]) {\n  m = relu_mask(x)\n  return m\n}\n", {ones})[0];
  EXPECT_EQ(words_of(mask), (std::vector<uint32_t>{0xffffffffu, 1u, 0xffffffffu, 1u}));
}

TEST(ReluBackwardMask, KeepsTheGradientWhereTheBitIsSet_IgnoringPaddingBits) {
  for (const char* dtype : {"bf16", "f32", "i64"}) {
    DType dt = *parse_dtype(dtype);
    for (int64_t n : {1, 31, 33, 100, 128}) {
      SCOPED_TRACE(std::string(dtype) + ", N = " + std::to_string(n));
      int64_t words = (n + 31) / 32;
      std::vector<double> grad = random_values(4 * n, uint32_t(n) + 1, -5, 5);
      if (!is_floating(dt))
        for (double& g : grad) g = std::round(g);
      std::vector<int64_t> bits(size_t(4 * words));
      uint32_t state = 12345;
      for (int64_t& w : bits) {  // every bit random, those past N included
        state = state * 1664525u + 1013904223u;
        w = int32_t(state);
      }
      Tensor g = make(dt, {2, 2, n}, grad), m = make_ints(DType::i32, {2, 2, words}, bits);
      std::string text = "fusion f(g: " + std::string(dtype) + "[2, 2, " + std::to_string(n) + "], m: i32[2, 2, " +
                         std::to_string(words) + "]) {\n  d = relu_backward_mask(g, m)\n  return d\n}\n";
      Tensor d = run_on_cpu(text, {g, m})[0];
      EXPECT_EQ(d.dtype(), dt);
      std::vector<double> stored = values(g), got = values(d);
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < n; ++c) {
          bool set = (uint32_t(bits[size_t(r * words + c / 32)]) >> (c % 32)) & 1u;
          ASSERT_EQ(got[size_t(r * n + c)], set ? stored[size_t(r * n + c)] : 0.0) << "row " << r << ", column " << c;
        }
    }
  }
}

// The forward's mask fed to the backward gives relu_backward of the pre-activation.
TEST(ReluBackwardMask, OfTheForwardMask_EqualsReluBackward) {
  std::string text = R"(fusion f(h: bf16[B, 3, 100], dy: bf16[B, 3, 100]) {
  m = relu_mask(h)
  a = relu_backward_mask(dy, m)
  b = relu_backward(dy, h)
  return a, b
})";
  Tensor h = make(DType::bf16, {2, 3, 100}, mixed_values(600, true, 3));
  Tensor dy = make(DType::bf16, {2, 3, 100}, random_values(600, 4));
  std::vector<Tensor> out = run_on_cpu(text, {h, dy});
  std::vector<double> a = values(out[0]), b = values(out[1]), hv = values(h);
  for (size_t i = 0; i < a.size(); ++i)
    if (!std::isnan(hv[i])) EXPECT_EQ(a[i], b[i]) << i;  // relu_backward passes NaN's gradient; the mask's bit is 0
}

TEST(ReluMask, RoundTripsThroughTheText_WithInferredTypes) {
  std::string text = R"(fusion f(x: bf16[T, 100], y: f32[T, H], dy: f32[T, H], saved: i32[T, W]) {
  m = relu_mask(x)
  my = relu_mask(y)
  d = relu_backward_mask(dy, my)
  e = relu_backward_mask(dy, saved)
  return m, d, e
})";
  auto fusion = parse_fusion(text, "t.fusion", std::nullopt);
  std::string printed = print_fusion(*fusion);
  EXPECT_NE(printed.find("m = relu_mask(x)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("i32[T, 4]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("e = relu_backward_mask(dy, saved)"), std::string::npos) << printed;
  EXPECT_EQ(print_fusion(*parse_fusion(printed, "p.fusion", std::nullopt)), printed);
  // H symbolic: the mask's width is ceil(H / 32), bound at run time; `saved` must have that width
  FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
  auto inputs = [](int64_t h, int64_t w) {
    return std::vector<Tensor>{make(DType::bf16, {2, 100}, random_values(200, 1)), make(DType::f32, {2, h}, random_values(2 * h, 2)),
                               make(DType::f32, {2, h}, random_values(2 * h, 3)), make_ints(DType::i32, {2, w}, std::vector<int64_t>(size_t(2 * w), -1))};
  };
  std::vector<Tensor> out = executor.run(inputs(70, 3));
  EXPECT_EQ(out[0].sizes(), (Shape{2, 4}));
  EXPECT_EQ(values(out[2]), values(inputs(70, 3)[2]));  // every bit set: dy unchanged
  try {
    executor.run(inputs(70, 2));
    ADD_FAILURE() << "a mask of 2 words for 70 columns was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("relu_backward_mask at t.fusion:5:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mask words of the last axis"), std::string::npos) << e.what();
  }
}

std::string error_of(const std::string& text) {
  try {
    parse_fusion(text, "t.fusion", std::nullopt);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ReluBackwardMask, BadMasks_AreLocatedUserErrors) {
  EXPECT_EQ(error_of("fusion f(g: bf16[4, 100], m: f32[4, 4]) {\n  d = relu_backward_mask(g, m)\n  return d\n}\n"),
            "t.fusion:2:7: relu_backward_mask: mask is f32[4, 4]; expected i32[4, 4] (relu_mask of a tensor of grad's "
            "shape: the last axis 100 packed 32 to a word)");
  EXPECT_NE(error_of("fusion f(g: bf16[4, 100], m: i32[4, 3]) {\n  d = relu_backward_mask(g, m)\n  return d\n}\n")
                .find("t.fusion:2:7: relu_backward_mask: mask is i32[4, 3]; expected i32[4, 4]"),
            std::string::npos);
  EXPECT_NE(error_of("fusion f(g: bf16[4, 100], m: i32[4]) {\n  d = relu_backward_mask(g, m)\n  return d\n}\n")
                .find("t.fusion:2:7: relu_backward_mask: mask is i32[4]; expected i32[4, 4]"),
            std::string::npos);
  EXPECT_NE(error_of("fusion f(g: bf16[2, 4, 100], m: i32[3, 4, 4]) {\n  d = relu_backward_mask(g, m)\n  return d\n}\n")
                .find("t.fusion:2:7: relu_backward_mask: mask is i32[3, 4, 4]; expected i32[2, 4, 4]"),
            std::string::npos);
  EXPECT_EQ(error_of("fusion f(x: bool[4, 100]) {\n  m = relu_mask(x)\n  return m\n}\n"),
            "t.fusion:2:7: relu_mask: input must be a numeric tensor, found bool[4, 100]");
  EXPECT_EQ(error_of("fusion f(x: f32[]) {\n  m = relu_mask(x)\n  return m\n}\n"),
            "t.fusion:2:7: relu_mask: input must have at least 1 dimension, found f32[]");
  EXPECT_EQ(error_of("fusion f(x: f32) {\n  m = relu_mask(x)\n  return m\n}\n"),
            "t.fusion:2:7: relu_mask: input must be a tensor, found a scalar f32");
}

}  // namespace
}  // namespace alloy
