// The canonical .fusion printer: its exact layout, and that printing a parsed fusion and parsing
// the print again reaches a fixed point for every construct and every example file.
#include "alloy/ir/printer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "alloy/ir/parser.h"
#include "test_util.h"

namespace alloy {
namespace {

std::string reprint(std::string_view text, PrintOptions options = {}) {
  return print_fusions(parse_fusions(text, "t.fusion"), options);
}

// The body lines of `f(x: f32[B, 4, 8], ...)` printed without type comments.
std::string body_of(const std::string& params, const std::string& body) {
  std::string printed = reprint("fusion f(" + params + ") {\n" + body + "  return x\n}\n", PrintOptions{false});
  size_t start = printed.find('\n') + 1;
  return printed.substr(start, printed.rfind("  return") - start);
}

TEST(Printer, Mlp_CanonicalTextWithAlignedTypeComments) {
  std::string text = R"(# nanoGPT MLP, inference
fusion mlp(x: bf16[B, S, 768], w1: bf16[3072, 768], b1: bf16[3072],
           w2: bf16[768, 3072], b2: bf16[768]) {
  h = linear(x, w1, b1)                 # x @ w1^T + b1
  g = gelu(h, approximate="tanh")
  y = linear(g, w2, b2)
  return y
}
)";
  // The one-line header would be 105 characters, so each parameter gets its own line.
  EXPECT_EQ(reprint(text), R"(fusion mlp(
    x: bf16[B, S, 768],
    w1: bf16[3072, 768],
    b1: bf16[3072],
    w2: bf16[768, 3072],
    b2: bf16[768]
) {
  h = linear(x, w1, b1)            # bf16[B, S, 3072]
  g = gelu(h, approximate="tanh")  # bf16[B, S, 3072]
  y = linear(g, w2, b2)            # bf16[B, S, 768]
  return y
}
)");
}

TEST(Printer, ShortHeader_OneLine_ScalarsZeroDimDynamicAndShardings) {
  std::string text = "fusion f(x: f32[?, 4] @mesh[0,1] shard(axis=1), eps: f32, z: f32[]) {\n"
                     "  y = add(x, eps) @mesh[0,1] replicated\n  s = sum(y)\n  r = add(s, z)\n  return y, r\n}";
  EXPECT_EQ(reprint(text), "fusion f(x: f32[?, 4] @mesh[0, 1] shard(axis=1), eps: f32, z: f32[]) {\n"
                           "  y = add(x, eps) @mesh[0, 1] replicated  # f32[?, 4]\n"
                           "  s = sum(y, keepdim=false)               # f32[]\n"
                           "  r = add(s, z)                           # f32[]\n"
                           "  return y, r\n"
                           "}\n");
}

TEST(Printer, EveryAttribute_IsSpelledOutWithItsDefault) {
  EXPECT_EQ(body_of("x: f32[B, 4, 8]",
                    "  g = gelu(x)\n  s = sum(x)\n  l = layer_norm(x)\n  r = rms_norm(x)\n  p = softmax(x)\n"
                    "  c = cat(x, x)\n  m = mean(x, dims=1)\n  v, u = var_mean(x)\n"),
            "  g = gelu(x, approximate=\"none\")\n"
            "  s = sum(x, keepdim=false)\n"
            "  l = layer_norm(x, normalized_ndim=1, eps=1e-05)\n"
            "  r = rms_norm(x, normalized_ndim=1, eps=1e-06)\n"
            "  p = softmax(x, dim=-1)\n"
            "  c = cat(x, x, dim=0)\n"
            "  m = mean(x, dims=[1], keepdim=false)\n"
            "  v, u = var_mean(x, correction=0.0, keepdim=false)\n");
}

TEST(Printer, Literals_IntegersRealsWithADotAndBooleans) {
  EXPECT_EQ(body_of("x: f32[4]",
                    "  a = add(x, 2)\n  b = add(a, 2.0)\n  c = mul(b, 1e-5)\n  d = mul(c, .1)\n  e = sub(d, -0.0)\n"
                    "  g = where(true, e, -inf)\n  h = pow(g, 123456789.125)\n"),
            "  a = add(x, 2)\n"
            "  b = add(a, 2.0)\n"
            "  c = mul(b, 1e-05)\n"
            "  d = mul(c, 0.1)\n"
            "  e = sub(d, -0.0)\n"
            "  g = where(true, e, -inf)\n"
            "  h = pow(g, 123456789.125)\n");
}

TEST(Printer, LongStatements_DoNotPushTheCommentColumnOut) {
  std::string printed = reprint(
      "fusion f(x: f32[2, 3, 4, 5]) {\n  a = neg(x)\n"
      "  b = broadcast_in_dim(a, shape=[7, 2, 3, 4, 5], broadcast_dims=[1, 2, 3, 4])\n  return b\n}");
  EXPECT_NE(printed.find("  a = neg(x)  # f32[2, 3, 4, 5]\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("broadcast_dims=[1, 2, 3, 4])  # f32[7, 2, 3, 4, 5]\n"), std::string::npos) << printed;
}

TEST(Printer, ManyFusions_AreSeparatedByABlankLine) {
  EXPECT_EQ(reprint("fusion a(x: f32) { return x } fusion b(y: i32[2]) { return y }"),
            "fusion a(x: f32) {\n  return x\n}\n\nfusion b(y: i32[2]) {\n  return y\n}\n");
}

// Printing, parsing the print and printing again gives the same text.
void expect_round_trip(const std::string& text, const std::string& what) {
  std::string once = reprint(text);
  std::string twice = reprint(once);
  EXPECT_EQ(once, twice) << what;
  EXPECT_EQ(reprint(text, PrintOptions{false}), reprint(once, PrintOptions{false})) << what;
}

TEST(Printer, RoundTrip_IsAFixedPointForEveryConstruct) {
  const std::vector<std::string> corpus = {
      // every op
      R"(fusion every_op(x: f32[B, 4, 8], y: f32[B, 4, 8], m: bool[B, 4, 8], w: f32[16, 8], b: f32[16],
                 n: f32[8], i: i32[4], o: f32[1, 8]) {
  a1 = neg(x)  a2 = abs(i)  a3 = exp(i)  a4 = log(x)  a5 = sqrt(x)  a6 = rsqrt(x)  a7 = tanh(x)
  a8 = sigmoid(x)  a9 = relu(i)  a10 = silu(x)  a11 = erf(x)  a12 = reciprocal(x)
  a13 = gelu(x, approximate="tanh")
  b1 = add(x, n)  b2 = sub(x, 1)  b3 = mul(2.5, x)  b4 = div(i, i)  b5 = pow(x, 2)  b6 = maximum(x, y)
  b7 = minimum(x, o)  b8 = eq(x, y)  b9 = ne(x, 0)  b10 = lt(x, y)  b11 = le(x, y)  b12 = gt(i, 3)  b13 = ge(x, y)
  c1 = where(m, x, 0.0)  c2 = cast(x, dtype=bf16)  c3 = gelu_backward(y, x)  c4 = relu_backward(y, x)
  r1 = sum(x, dims=[1])  r2 = max(x, dims=[0, 2], keepdim=true)  r3 = min(x)  r4 = mean(x, dims=-1)
  v, mu = var_mean(x, dims=[2], correction=1)
  s1 = broadcast_in_dim(n, shape=[B, 4, 8], broadcast_dims=[2])  s2 = expand(b, shape=[3, -1])
  s3 = reshape(x, shape=[B, -1])  s4 = permute(x, dims=[2, 0, 1])  s5 = slice(i, starts=[1], ends=[3], steps=[2])
  s6 = squeeze(o)  s7 = unsqueeze(n, dim=0)  s8 = cat(x, y, dim=1)
  m1 = matmul(x, n)  m2 = linear(x, w, b)  m3 = linear(x, w)
  k1 = softmax(x, dim=1)  k2 = layer_norm(x, n, n, eps=0.001)  k3 = rms_norm(x, n)  k4 = segment_set(k3)
  return a13, b13, c4, v, mu, s8, m2, k4
})",
      // symbolic and dynamic sizes, scalars and 0-dim tensors, literals of every kind
      R"(fusion sizes(x: f32[B, ?, seq], s: f64, z: bf16[], k: i64, d: f32[?, 3]) {
  a = mul(x, s)
  b = add(z, k)
  c = where(true, a, -1e300)
  e = div(d, 3)
  return c, b, e
})",
      // shardings on parameters and statements
      R"(fusion tp_mlp(x: bf16[S, 768] @mesh[0,1,2,3] replicated,
              w1: bf16[3072, 768] @mesh[0,1,2,3] shard(axis=0), b1: bf16[3072] @mesh[0,1,2,3] shard(axis=0),
              w2: bf16[768, 3072] @mesh[0,1,2,3] shard(axis=1), b2: bf16[768]) {
  h = linear(x, w1, b1) @mesh[0,1,2,3] shard(axis=1)
  g = gelu(h, approximate="tanh")
  y = linear(g, w2)   # partial sums
  z = add(y, b2)
  return z
})",
      // several fusions and comments everywhere
      "# first\nfusion a(x: f32[4]) { # c\n y = neg(x) # c\n return y # c\n} # c\n"
      "fusion b(x: f32[4], eps: f32) {\n  v, m = var_mean(x, keepdim=true)\n  s = add(v, eps)\n  r = rsqrt(s)\n  return r\n}",
  };
  for (size_t i = 0; i < corpus.size(); ++i) expect_round_trip(corpus[i], "corpus entry " + std::to_string(i));
}

TEST(Printer, RoundTrip_EveryExampleFile) {
  namespace fs = std::filesystem;
  fs::path dir = testing::source_path("examples");
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".fusion") continue;
    ++count;
    std::string file = entry.path().string();
    std::string once = print_fusions(parse_fusions(testing::read_file(file), file));
    EXPECT_EQ(print_fusions(parse_fusions(once, file)), once) << file;
  }
  EXPECT_GT(count, 0) << "no examples/*.fusion in " << dir;
}

}  // namespace
}  // namespace alloy
