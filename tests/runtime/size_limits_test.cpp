// Hostile and careless sizes and literals (issue 16): each is a located user error, at check time
// where the sizes are known and at run time once they are bound; nothing wraps or overflows.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

// The message of the UserError `work` throws, or "no error".
template <class Work>
std::string user_error_of(Work&& work) {
  try {
    work();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

std::string check_error(const std::string& text) {
  return user_error_of([&] { parse_fusion(text, "t.fusion"); });
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(SizeLimits, AnOverflowingConstantShape_IsALocatedErrorAtCheckTime) {
  std::string e = check_error("fusion f(x: f32[4]) {\n  b = expand(x, shape=[4294967296, 4294967296, 4])\n  s = sum(b)\n  return s\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "'b' would have at least 4294967296 * 4294967296 * 4 elements")) << e;
  e = check_error("fusion f(x: f32[1099511627776, 1099511627776]) {\n  return x\n}");
  EXPECT_TRUE(has(e, "t.fusion:1:")) << e;
  EXPECT_TRUE(has(e, "at most 2^48")) << e;
  // a symbolic size with a large constant factor counts its factor
  e = check_error("fusion f(x: f32[N]) {\n  b = broadcast_in_dim(x, shape=[1125899906842624, 1024, N], broadcast_dims=[2])\n  return b\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
}

TEST(SizeLimits, ASizeProductPast2To62InAShapeRule_IsLocatedAtItsStatement) {
  // the reshape's -1 divides the input's size by a product of the others that overflows first
  std::string e = check_error("fusion f(x: f32[4]) {\n  r = reshape(x, shape=[281474976710656, 281474976710656, -1])\n  return r\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "reshape: size 281474976710656 * 281474976710656 is too large (sizes must stay below 2^62)")) << e;
}

TEST(SizeLimits, AScalarInputGivenAOneElementTensorWithAxes_IsAnInputError) {
  auto fusion = parse_fusion("fusion f(s: f32) {\n  y = add(s, 0)\n  return y\n}", "t.fusion");
  Tensor one = Tensor::empty(DType::f32, {1});
  one.data_as<float>()[0] = 1.0f;
  std::string e = user_error_of([&] { bind_inputs(*fusion, {one}); });
  EXPECT_EQ(e, "input 's': expected a scalar f32 (a number, or a tensor of 0 dims), found f32[1]");
  Tensor scalar = Tensor::empty(DType::f32, {});
  scalar.data_as<float>()[0] = 1.0f;
  EXPECT_EQ(user_error_of([&] { bind_inputs(*fusion, {scalar}); }), "no error");
}

TEST(SizeLimits, BoundSizesTooLargeToRun_AreUserErrorsAtTheStatementNotCrashes) {
  auto run = [](const std::string& text, Bindings sizes) {
    auto fusion = parse_fusion(text, "r.fusion");
    std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes, 1);
    FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
    return user_error_of([&] { executor.run(inputs); });
  };
  // elements past 2^48 through a bound symbol: the statement that makes them
  std::string e = run("fusion f(x: f32[N]) {\n  b = broadcast_in_dim(x, shape=[1048576, 1048576, N], broadcast_dims=[2])\n  c = exp(b)\n  return c\n}",
                      {{"N", 1024}});
  EXPECT_TRUE(has(e, "r.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "at most 2^48")) << e;
  // fewer elements, but more bytes than the machine has: on the CPU, whose reference kernels load
  // every operand as doubles, the broadcast view itself is refused
  const std::string text =
      "fusion f(x: f32[N]) {\n  b = broadcast_in_dim(x, shape=[1048576, 1048576, N], broadcast_dims=[2])\n  c = exp(b)\n  return c\n}";
  e = run(text, {{"N", 4}});
  EXPECT_TRUE(has(e, "r.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "'b' (f32[1048576, 1048576, N]) needs 35184372088832 bytes for the bound sizes (the CPU reference holds each element as a double)")) << e;
  // where views are free (a GPU's kernels read them in place), the materialized result is refused
  auto fusion = parse_fusion(text, "r.fusion");
  e = user_error_of([&] { check_run_sizes(*fusion, {{"N", 4}}, int64_t(1) << 40, "cuda:0"); });
  EXPECT_TRUE(has(e, "r.fusion:3:")) << e;
  EXPECT_TRUE(has(e, "'c' (f32[1048576, 1048576, N]) needs 17592186044416 bytes for the bound sizes; cuda:0 has 1099511627776")) << e;
}

// A sum over an expand of 2^32 elements: a view, but the CPU reference would hold it as 32 GiB of
// doubles; refused at its statement before anything is allocated.
TEST(SizeLimits, ABroadcastViewTheCpuWouldMaterialize_IsRefusedAtItsStatement) {
  auto fusion = parse_fusion("fusion f(x: f32[N]) {\n  b = expand(x, shape=[65536, N])\n  s = sum(b)\n  return s\n}", "v.fusion");
  std::string e = user_error_of([&] { check_run_sizes(*fusion, {{"N", 65536}}, int64_t(16) << 30, "cpu", true); });
  EXPECT_TRUE(has(e, "v.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "'b' (f32[65536, N]) needs 34359738368 bytes")) << e;
  EXPECT_NO_THROW(check_run_sizes(*fusion, {{"N", 64}}, int64_t(16) << 30, "cpu", true));
}

// --bind past 2^48, and random inputs larger than this machine's memory: user errors naming the
// bind or the input, before anything is drawn (no internal error, no allocation failure).
TEST(SizeLimits, ValuesThatFitOneByOneButNotTogether_AreAUserErrorOnTheCpu) {
  auto fusion = parse_fusion("fusion chain(x: f32[N]) {\n  y = neg(x)\n  z = add(y, x)\n  return z\n}", "t.fusion");
  // 100 elements as doubles: 800 bytes a value, 2400 together
  EXPECT_NO_THROW(check_run_sizes(*fusion, {{"N", 100}}, 2400, "cpu", true));
  std::string e = user_error_of([&] { check_run_sizes(*fusion, {{"N", 100}}, 2000, "cpu", true); });
  EXPECT_EQ(e, "fusion 'chain': its values need 2400 bytes together for the bound sizes (the CPU reference holds every value "
               "of a run, each element as a double); cpu has 2000");
  EXPECT_NO_THROW(check_run_sizes(*fusion, {{"N", 100}}, 2000, "cuda:0"));  // (a GPU's buffers are reused: each alone)
}

TEST(SizeLimits, HugeBindsAndInputsLargerThanMemory_AreUserErrorsBeforeDrawing) {
  auto fusion = parse_fusion("fusion f(x: f32[N]) {\n  e = exp(x)\n  return e\n}", "b.fusion");
  std::vector<Tensor> none(1);
  std::string e = user_error_of([&] { resolve_input_sizes(*fusion, none, {{"N", std::numeric_limits<int64_t>::max()}}); });
  EXPECT_TRUE(has(e, "--bind N=9223372036854775807: expected a size of at most 2^48 (281474976710656)")) << e;
  // 4 TiB: under the 16 TiB cap, over any test machine
  e = user_error_of([&] { complete_inputs(*fusion, none, {{"N", int64_t(1) << 40}}, 1); });
  EXPECT_TRUE(has(e, "input 'x': declared f32[N], needs 4398046511104 bytes to draw for the bound sizes; this machine has")) << e;
}

// A derived size that does not come out whole for the bound sizes (reshape's -1) is an error at
// the statement that makes it.
TEST(SizeLimits, AReshapeWhoseDerivedSizeIsNotWhole_IsALocatedError) {
  auto fusion = parse_fusion("fusion f(y: f32[N]) {\n  r = reshape(y, shape=[-1, 4])\n  return r\n}", "r.fusion");
  FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
  std::string e = user_error_of([&] { executor.run({Tensor::empty(DType::f32, {6})}); });
  EXPECT_TRUE(has(e, "r.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "'r' (f32[N/4, 4]) has axis 0 of size N/4 = 1.5 for the bound sizes (N = 6), not a whole number")) << e;
  EXPECT_EQ(executor.run({Tensor::empty(DType::f32, {8})}).at(0).sizes(), (std::vector<int64_t>{2, 4}));
}

TEST(Literals, AnIntegerLiteralThatDoesNotFitTheTensorsDtype_IsALocatedError) {
  std::string e = check_error("fusion f(a: i32[4]) {\n  c = add(a, 99999999999)\n  return c\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "the literal 99999999999 does not fit i32")) << e;
  e = check_error("fusion f(a: i32[4], m: bool[4]) {\n  c = where(m, a, -2147483649)\n  return c\n}");
  EXPECT_TRUE(has(e, "does not fit i32")) << e;
  e = check_error("fusion f(a: i32[4]) {\n  c = eq(a, 3000000000)\n  return c\n}");
  EXPECT_TRUE(has(e, "does not fit i32")) << e;
  // what fits is fine, and a float literal promotes instead (PyTorch's rule)
  EXPECT_EQ(check_error("fusion f(a: i32[4]) {\n  c = add(a, 2147483647)\n  d = mul(a, 1.0e12)\n  return c, d\n}"), "no error");
}

// A literal cast to an integer dtype (Python's define_scalar(3000000000, dtype=int64) writes
// `cast(3000000000, dtype=i64)`) is a typed scalar: it meets an i32 tensor as i32, so it is held
// to the bare literal's rule instead of wrapping (a - 1294967296).
TEST(Literals, ALiteralCastToAnIntegerDtype_IsCheckedLikeTheLiteral) {
  std::string e = check_error("fusion f(a: i32[4]) {\n  c = cast(3000000000, dtype=i64)\n  y = add(a, c)\n  return y\n}");
  EXPECT_TRUE(has(e, "t.fusion:3:")) << e;
  EXPECT_TRUE(has(e, "'c' (3000000000, computed from literals) does not fit i32")) << e;
  e = check_error("fusion f(a: i32[4]) {\n  c = cast(3.0e9, dtype=i64)\n  y = sub(a, c)\n  return y\n}");
  EXPECT_TRUE(has(e, "'c' (3000000000, computed from literals) does not fit i32")) << e;
  // what fits runs; an explicit cast to i32 wraps as it says; a cast to a float promotes
  EXPECT_EQ(check_error("fusion f(a: i32[4]) {\n  c = cast(3, dtype=i64)\n  w = cast(3000000000, dtype=i32)\n"
                        "  g = cast(3000000000, dtype=f32)\n  y = add(a, c)\n  z = add(a, w)\n  u = add(a, g)\n  return y, z, u\n}"),
            "no error");
  auto fusion = parse_fusion("fusion f(a: i32[2]) {\n  c = cast(7, dtype=i64)\n  y = add(a, c)\n  return y\n}", "t.fusion");
  EXPECT_EQ(fusion->outputs()[0]->dtype(), DType::i32);
  FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
  int32_t a[2] = {1, -2};
  Tensor y = executor.run({Tensor::borrow(a, Device{}, DType::i32, {2}, {1})}).at(0);
  EXPECT_EQ(load_as_double(y.data(), DType::i32, 1), 5.0);
}

// A scalar computed from literals alone is checked as the literal it amounts to.
TEST(Literals, ScalarsComputedFromLiterals_AreCheckedLikeLiterals) {
  std::string e = check_error("fusion f(a: i32[4]) {\n  n = sub(0, 3000000000)\n  c = add(a, n)\n  return c\n}");
  EXPECT_TRUE(has(e, "t.fusion:3:")) << e;
  EXPECT_TRUE(has(e, "'n' (-3000000000, computed from literals) does not fit i32")) << e;
  e = check_error("fusion f(a: i32[4]) {\n  n = neg(2)\n  c = pow(a, n)\n  return c\n}");
  EXPECT_TRUE(has(e, "t.fusion:3:")) << e;
  EXPECT_TRUE(has(e, "negative power -2")) << e;
  EXPECT_EQ(check_error("fusion f(a: i32[4]) {\n  n = sub(0, 3)\n  m = mul(n, n)\n  c = pow(a, m)\n  d = add(a, n)\n  return c, d\n}"),
            "no error");
}

// A float literal past a floating dtype's range is no error: it rounds to inf as NumPy's and
// PyTorch's binary ops round it (the masking idiom `where(m, x, -1e300)`).
TEST(Literals, AFloatLiteralPastTheTensorsRange_RoundsToInfinity) {
  auto fusion = parse_fusion("fusion f(h: f16[2], m: bool[2]) {\n  a = mul(h, 1.0e10)\n  b = where(m, h, -1.0e300)\n  return a, b\n}", "t.fusion");
  Tensor h = Tensor::empty(DType::f16, {2}), m = Tensor::empty(DType::boolean, {2});
  store_double(h.data(), DType::f16, 0, 1.0);
  store_double(h.data(), DType::f16, 1, -2.0);
  m.data_as<bool>()[0] = true;
  m.data_as<bool>()[1] = false;
  FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
  std::vector<Tensor> out = executor.run({h, m});
  EXPECT_EQ(load_as_double(out[0].data(), DType::f16, 0), INFINITY);
  EXPECT_EQ(load_as_double(out[0].data(), DType::f16, 1), -INFINITY);
  EXPECT_EQ(load_as_double(out[1].data(), DType::f16, 0), 1.0);
  EXPECT_EQ(load_as_double(out[1].data(), DType::f16, 1), -INFINITY);
}

TEST(Literals, AnIntegerToANegativeLiteralPower_IsALocatedError) {
  std::string e = check_error("fusion f(a: i64[4]) {\n  c = pow(a, -1)\n  return c\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "negative power -1")) << e;
  EXPECT_EQ(check_error("fusion f(a: i64[4], x: f32[4]) {\n  c = pow(a, 2)\n  d = pow(x, -1)\n  return c, d\n}"), "no error");
}

}  // namespace
}  // namespace alloy
