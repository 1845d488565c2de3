// The optimizer-step examples run in place on the CPU: each result equals a loop over the elements
// written here from the formulas (not from Alloy's ops), lands in its input's memory, and the next
// step starts from it. A step that must go through a copy (the old parameters also returned,
// read by a reduction) still gives every output its value. The GPU runs the same files in
// gpu_end_to_end_test; the plans are in segment/in_place_test.
#include <gtest/gtest.h>

#include <cmath>

#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::tensors_close;

Tensor scalar(double value) {
  Tensor t = Tensor::empty(DType::f64, {});
  store_double(t.data(), DType::f64, 0, value);
  return t;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = load_as_double(t.data(), t.dtype(), i);
  return out;
}

Tensor f32_of(const std::vector<double>& values) {
  Tensor t = Tensor::empty(DType::f32, {int64_t(values.size())});
  for (size_t i = 0; i < values.size(); ++i) store_double(t.data(), DType::f32, int64_t(i), values[i]);
  return t;
}

// Random f32[n] tensors, one per name, from the run inputs' generator (standard normals).
std::vector<Tensor> random_vectors(const std::string& text, int64_t n, uint64_t seed) {
  auto fusion = parse_fusion(text, "step.fusion", std::nullopt);
  return complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), {{"N", n}}, seed);
}

std::string example(const std::string& name) { return testing::read_file(testing::source_path("examples/" + name)); }

// torch.optim.AdamW's update, element by element, in doubles.
struct AdamState {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, double lr, double wd, double bc1, double bc2) {
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      double update = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + 1e-8);
      p[i] = p[i] * (1.0 - lr * wd) - lr * update;
    }
  }
};

TEST(OptimizerSteps, AdamStepOnTheCpu_MatchesALoopAndUpdatesItsInputsInPlace) {
  const std::string text = example("adam_step.fusion");
  FusionExecutor executor(parse_fusion(text, "adam_step.fusion", std::nullopt), {DeviceChoice::cpu});
  const int64_t n = 1000;
  std::vector<Tensor> drawn = random_vectors(text, n, 3);
  Tensor p = drawn[0], g = drawn[1], m = drawn[2], v = drawn[3];
  for (int64_t i = 0; i < n; ++i) store_double(v.data(), DType::f32, i, std::fabs(load_as_double(v.data(), DType::f32, i)));
  AdamState expected{values_of(p), values_of(m), values_of(v)};
  const double lr = 1e-3, wd = 0.01;
  for (int t = 1; t <= 3; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
    std::vector<Tensor> out = executor.run({p, g, m, v, scalar(lr), scalar(wd), scalar(bc1), scalar(bc2)});
    expected.step(values_of(g), lr, wd, bc1, bc2);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].data(), p.data());  // each output is its input's memory
    EXPECT_EQ(out[1].data(), m.data());
    EXPECT_EQ(out[2].data(), v.data());
    EXPECT_TRUE(tensors_close(p, f32_of(expected.p)));
    EXPECT_TRUE(tensors_close(m, f32_of(expected.m)));
    EXPECT_TRUE(tensors_close(v, f32_of(expected.v)));
  }
}

TEST(OptimizerSteps, SgdWithMomentumOnTheCpu_MatchesALoopAndUpdatesItsInputsInPlace) {
  const std::string text = example("sgd_momentum.fusion");
  FusionExecutor executor(parse_fusion(text, "sgd_momentum.fusion", std::nullopt), {DeviceChoice::cpu});
  std::vector<Tensor> drawn = random_vectors(text, 777, 5);
  Tensor p = drawn[0], g = drawn[1], buf = drawn[2];
  std::vector<double> ep = values_of(p), ebuf = values_of(buf);
  const double lr = 0.05, wd = 1e-4;
  for (int t = 0; t < 3; ++t) {
    std::vector<Tensor> out = executor.run({p, g, buf, scalar(lr), scalar(wd)});
    std::vector<double> eg = values_of(g);
    for (size_t i = 0; i < ep.size(); ++i) {
      ebuf[i] = 0.9 * ebuf[i] + (eg[i] + wd * ep[i]);
      ep[i] -= lr * ebuf[i];
    }
    EXPECT_EQ(out[0].data(), p.data());
    EXPECT_EQ(out[1].data(), buf.data());
    EXPECT_TRUE(tensors_close(p, f32_of(ep)));
    EXPECT_TRUE(tensors_close(buf, f32_of(ebuf)));
  }
}

// Steps that cannot be written in place (on a GPU they go through a copy): the old parameters
// returned beside the new ones, and the momentum also read by a reduction. Every output is its
// value: the old parameters and the norm from before the write.
TEST(OptimizerSteps, AStepThatGoesThroughACopy_GivesEveryOutputItsValue) {
  const std::string text = R"(fusion step(p: f32[N], g: f32[N], buf: f32[N]) {
  kept = mul(buf, 0.9)
  buf2 = add(kept, g)
  s = mul(buf2, 0.1)
  p2 = sub(p, s)
  sq = mul(buf, buf)
  norm = sum(sq, dims=[0])
  return p2 -> p, p, buf2 -> buf, norm
}
)";
  FusionExecutor executor(parse_fusion(text, "step.fusion", std::nullopt), {DeviceChoice::cpu});
  std::vector<Tensor> drawn = random_vectors(text, 300, 9);
  Tensor p = drawn[0], g = drawn[1], buf = drawn[2];
  std::vector<double> old_p = values_of(p), old_buf = values_of(buf), eg = values_of(g), new_p = old_p, new_buf = old_buf;
  double norm = 0;
  for (size_t i = 0; i < old_p.size(); ++i) {
    new_buf[i] = 0.9 * old_buf[i] + eg[i];
    new_p[i] = old_p[i] - 0.1 * new_buf[i];
    norm += old_buf[i] * old_buf[i];
  }
  std::vector<Tensor> out = executor.run({p, g, buf});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(tensors_close(p, f32_of(new_p)));
  EXPECT_TRUE(tensors_close(buf, f32_of(new_buf)));
  EXPECT_NE(out[1].data(), p.data());
  EXPECT_TRUE(tensors_close(out[1], f32_of(old_p)));  // the parameters from before the write
  EXPECT_NEAR(load_as_double(out[3].data(), DType::f32, 0), norm, 1e-4 * norm);
  std::string segments = executor.dump("segments");
  EXPECT_NE(segments.find("p2 -> p: through a copy after the run"), std::string::npos) << segments;
}

}  // namespace
}  // namespace alloy
