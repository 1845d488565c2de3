// The .fusion parser: what it builds from each construct, the error it reports (with its exact
// location) for each kind of mistake, and that no input crashes or hangs it.
#include "alloy/ir/parser.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "alloy/ir/op_table.h"
#include "alloy/ir/printer.h"

namespace alloy {
namespace {

std::string error_of(std::string_view text) {
  try {
    parse_fusions(text, "t.fusion");
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

// The fusion `f` with these parameters and body lines.
std::string fusion_text(const std::string& params, const std::string& body) {
  return "fusion f(" + params + ") {\n" + body + "}\n";
}

TEST(Parser, Mlp_BuildsInputsOpsAttributesAndOutputs) {
  auto f = parse_fusion(R"(# nanoGPT MLP, inference
fusion mlp(x: bf16[B, S, 768], w1: bf16[3072, 768], b1: bf16[3072],
           w2: bf16[768, 3072], b2: bf16[768]) {
  h = linear(x, w1, b1)                 # x @ w1^T + b1
  g = gelu(h, approximate="tanh")
  y = linear(g, w2, b2)
  return y
}
)",
                        "mlp.fusion");
  EXPECT_EQ(f->name(), "mlp");
  ASSERT_EQ(f->inputs().size(), 5u);
  EXPECT_EQ(f->inputs()[0]->name, "x");
  EXPECT_EQ(f->inputs()[0]->type_str(), "bf16[B, S, 768]");
  EXPECT_EQ(f->inputs()[4]->type_str(), "bf16[768]");
  ASSERT_EQ(f->ops().size(), 3u);
  EXPECT_EQ(f->ops()[0]->kind, OpKind::linear);
  EXPECT_EQ(f->ops()[0]->outputs[0]->name, "h");
  EXPECT_EQ(f->ops()[0]->outputs[0]->type_str(), "bf16[B, S, 3072]");
  EXPECT_EQ(f->ops()[1]->kind, OpKind::gelu);
  EXPECT_EQ(f->ops()[1]->string_attr("approximate"), "tanh");
  EXPECT_EQ(f->ops()[1]->inputs[0], f->ops()[0]->outputs[0]);
  // The op's location is its name token: line 5, column 7.
  EXPECT_EQ(f->ops()[1]->loc.str(), "mlp.fusion:5:7");
  ASSERT_EQ(f->outputs().size(), 1u);
  EXPECT_EQ(f->outputs()[0]->name, "y");
  EXPECT_EQ(f->outputs()[0]->type_str(), "bf16[B, S, 768]");
}

// One statement per op, each with the type it must infer. Params shared by all of them.
const char* kParams = "x: f32[B, 4, 8], y: f32[B, 4, 8], m: bool[B, 4, 8], w: f32[16, 8], b: f32[16], "
                      "n: f32[8], i: i32[4], o: f32[1, 8], k: i32[1]";
const std::map<std::string, std::pair<std::string, std::string>> kEveryOp = {
    {"neg", {"neg(x)", "f32[B, 4, 8]"}},
    {"abs", {"abs(i)", "i32[4]"}},
    {"exp", {"exp(i)", "f32[4]"}},
    {"log", {"log(x)", "f32[B, 4, 8]"}},
    {"sqrt", {"sqrt(x)", "f32[B, 4, 8]"}},
    {"rsqrt", {"rsqrt(x)", "f32[B, 4, 8]"}},
    {"tanh", {"tanh(x)", "f32[B, 4, 8]"}},
    {"sigmoid", {"sigmoid(x)", "f32[B, 4, 8]"}},
    {"relu", {"relu(i)", "i32[4]"}},
    {"silu", {"silu(x)", "f32[B, 4, 8]"}},
    {"erf", {"erf(x)", "f32[B, 4, 8]"}},
    {"reciprocal", {"reciprocal(x)", "f32[B, 4, 8]"}},
    {"gelu", {"gelu(x, approximate=\"tanh\")", "f32[B, 4, 8]"}},
    {"add", {"add(x, n)", "f32[B, 4, 8]"}},
    {"sub", {"sub(x, 1)", "f32[B, 4, 8]"}},
    {"mul", {"mul(2.5, x)", "f32[B, 4, 8]"}},
    {"div", {"div(i, i)", "f32[4]"}},
    {"pow", {"pow(x, 2)", "f32[B, 4, 8]"}},
    {"maximum", {"maximum(x, y)", "f32[B, 4, 8]"}},
    {"minimum", {"minimum(x, o)", "f32[B, 4, 8]"}},
    {"eq", {"eq(x, y)", "bool[B, 4, 8]"}},
    {"ne", {"ne(x, 0)", "bool[B, 4, 8]"}},
    {"lt", {"lt(x, y)", "bool[B, 4, 8]"}},
    {"le", {"le(x, y)", "bool[B, 4, 8]"}},
    {"gt", {"gt(i, 3)", "bool[4]"}},
    {"ge", {"ge(x, y)", "bool[B, 4, 8]"}},
    {"where", {"where(m, x, 0.0)", "f32[B, 4, 8]"}},
    {"cast", {"cast(x, dtype=bf16)", "bf16[B, 4, 8]"}},
    {"gelu_backward", {"gelu_backward(y, x)", "f32[B, 4, 8]"}},
    {"relu_backward", {"relu_backward(y, x)", "f32[B, 4, 8]"}},
    {"relu_mask", {"relu_mask(x)", "i32[B, 4, 1]"}},
    {"relu_backward_mask", {"relu_backward_mask(n, k)", "f32[8]"}},
    {"sum", {"sum(x, dims=[1])", "f32[B, 8]"}},
    {"max", {"max(x, dims=[0, 2], keepdim=true)", "f32[1, 4, 1]"}},
    {"min", {"min(x)", "f32[]"}},
    {"mean", {"mean(x, dims=-1)", "f32[B, 4]"}},
    {"var_mean", {"var_mean(x, dims=[2], correction=1)", "f32[B, 4], f32[B, 4]"}},
    {"broadcast_in_dim", {"broadcast_in_dim(n, shape=[B, 4, 8], broadcast_dims=[2])", "f32[B, 4, 8]"}},
    {"expand", {"expand(b, shape=[3, -1])", "f32[3, 16]"}},
    {"reshape", {"reshape(x, shape=[B, -1])", "f32[B, 32]"}},
    {"permute", {"permute(x, dims=[2, 0, 1])", "f32[8, B, 4]"}},
    {"slice", {"slice(i, starts=[1], ends=[3])", "i32[2]"}},
    {"squeeze", {"squeeze(o)", "f32[8]"}},
    {"unsqueeze", {"unsqueeze(n, dim=0)", "f32[1, 8]"}},
    {"cat", {"cat(x, y, dim=1)", "f32[B, 8, 8]"}},
    {"gather", {"gather(n, i, dim=0)", "f32[4]"}},
    {"iota", {"iota(length=B)", "i64[B]"}},
    {"matmul", {"matmul(x, n)", "f32[B, 4]"}},
    {"linear", {"linear(x, w, b)", "f32[B, 4, 16]"}},
    {"softmax", {"softmax(x, dim=1)", "f32[B, 4, 8]"}},
    {"layer_norm", {"layer_norm(x, n, n, eps=0.001)", "f32[B, 4, 8]"}},
    {"rms_norm", {"rms_norm(x, n)", "f32[B, 4, 8]"}},
    {"segment_set", {"segment_set(x)", "f32[B, 4, 8]"}},
    // Collectives are inserted by the sharding passes, never needed in a user's fusion, but what
    // `--dump after=insert_resharding` prints parses again: they keep their input's global type.
    {"all_gather", {"all_gather(x, axis=0)", "f32[B, 4, 8]"}},
    {"reduce_scatter", {"reduce_scatter(x, axis=1, reduce=\"max\")", "f32[B, 4, 8]"}},
    {"all_reduce", {"all_reduce(i)", "i32[4]"}},
    {"all_to_all", {"all_to_all(x, from_axis=0, axis=2)", "f32[B, 4, 8]"}},
    {"shard_slice", {"shard_slice(w, axis=-1)", "f32[16, 8]"}},
};

TEST(Parser, EveryOp_ParsesAndInfersItsType) {
  for (std::string_view name : all_op_names()) {
    auto it = kEveryOp.find(std::string(name));
    ASSERT_NE(it, kEveryOp.end()) << "no parser test for op " << name;
    const auto& [call, expected] = it->second;
    std::string outs = name == "var_mean" ? "r, r2" : "r";
    auto f = parse_fusion(fusion_text(kParams, "  " + outs + " = " + call + "\n  return " + outs + "\n"), "t.fusion");
    ASSERT_EQ(f->ops().size(), 1u) << call;
    EXPECT_EQ(op_name(f->ops()[0]->kind), name);
    std::string types;
    for (Value* v : f->ops()[0]->outputs) types += (types.empty() ? "" : ", ") + v->type_str();
    EXPECT_EQ(types, expected) << call;
  }
}

TEST(Parser, Literals_BecomeScalarConstantsOfTheirKind) {
  auto f = parse_fusion(fusion_text("x: f32[4]",
                                    "  a = add(x, 2)\n  b = add(a, -2.5e-3)\n  c = mul(b, .5)\n  d = mul(c, 1.)\n"
                                    "  e = where(true, d, -inf)\n  g = sub(e, -9223372036854775808)\n  return g\n"),
                        "t.fusion");
  auto lit = [&](int op, int input) { return *f->ops()[op]->inputs[input]->literal; };
  EXPECT_EQ(lit(0, 1), (Literal{Literal::Kind::integer, 2, 0, false}));
  EXPECT_EQ(lit(1, 1), (Literal{Literal::Kind::real, 0, -2.5e-3, false}));
  EXPECT_EQ(lit(2, 1).f, 0.5);
  EXPECT_EQ(lit(3, 1).f, 1.0);
  EXPECT_EQ(lit(4, 0), (Literal{Literal::Kind::boolean, 0, 0, true}));
  EXPECT_EQ(lit(4, 2).f, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(lit(5, 1).i, std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(f->ops()[0]->inputs[1]->is_scalar());
  EXPECT_EQ(f->ops()[0]->inputs[1]->dtype(), DType::i64);
}

TEST(Parser, Params_ScalarZeroDimSymbolicAndDynamicSizes) {
  auto f = parse_fusion(fusion_text("eps: f32, z: bf16[], d: f32[?, seq, ?, 0]", "  y = add(z, eps)\n  return y, d\n"),
                        "t.fusion");
  EXPECT_TRUE(f->inputs()[0]->is_scalar());
  EXPECT_EQ(f->inputs()[0]->type_str(), "f32");
  EXPECT_FALSE(f->inputs()[1]->is_scalar());
  EXPECT_EQ(f->inputs()[1]->rank(), 0);
  const auto& d = f->inputs()[2]->shape();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_TRUE(d[0].is_dynamic_symbol());
  EXPECT_TRUE(d[2].is_dynamic_symbol());
  EXPECT_NE(d[0], d[2]);  // every `?` is its own size
  EXPECT_EQ(d[1], Extent::symbol("seq"));
  EXPECT_EQ(d[3], Extent::constant(0));
  EXPECT_EQ(f->inputs()[2]->type_str(), "f32[?, seq, ?, 0]");
  EXPECT_EQ(f->outputs()[1], f->inputs()[2]);
}

TEST(Parser, Shardings_OnParamsAndStatements) {
  auto f = parse_fusion(R"(fusion tp(x: bf16[S, 768] @mesh[0,1,2,3] replicated,
              w1: bf16[3072, 768] @mesh[0,1,2,3] shard(axis=0), plain: bf16[4]) {
  h = linear(x, w1) @mesh[0, 1, 2, 3] shard(axis=1)
  return h
})",
                        "tp.fusion");
  EXPECT_EQ(f->inputs()[0]->sharding, (Sharding{{0, 1, 2, 3}, std::nullopt}));
  EXPECT_EQ(f->inputs()[1]->sharding, (Sharding{{0, 1, 2, 3}, 0}));
  EXPECT_FALSE(f->inputs()[2]->sharding.has_value());
  EXPECT_EQ(f->outputs()[0]->sharding, (Sharding{{0, 1, 2, 3}, 1}));
}

TEST(Parser, ManyFusions_CommentsWhitespaceAndTrailingCommas) {
  std::string text = "# two fusions\n\n  fusion  a ( x : f32 [ 4 , ] , ) {   # header\n"
                     "r=neg(x,)# no spaces\n return r , } fusion b(x: f32[2]) { r = exp(x) return r }\n# end";
  auto fs = parse_fusions(text, "t.fusion");
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0]->name(), "a");
  EXPECT_EQ(fs[1]->name(), "b");
  EXPECT_EQ(fs[0]->inputs()[0]->type_str(), "f32[4]");
  EXPECT_EQ(fs[1]->ops()[0]->kind, OpKind::exp);
  EXPECT_EQ(parse_fusion(text, "t.fusion", "b")->ops()[0]->kind, OpKind::exp);
  EXPECT_EQ(parse_fusion(text, "t.fusion")->name(), "a");
  try {
    parse_fusion(text, "t.fusion", "c");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "t.fusion: no fusion named 'c'; the file defines: a, b");
  }
}

TEST(Parser, AttributeValues_OfEveryKind) {
  // reshape takes symbols; var_mean a real given as an integer; squeeze a list.
  auto f = parse_fusion(fusion_text("x: f32[B, 1, 6]",
                                    "  r = reshape(x, shape=[B, 2, -1])\n  v, m = var_mean(r, dims=[1, 2], correction=1)\n"
                                    "  s = squeeze(x, dims=[1])\n  c = cast(s, dtype=bool)\n  return c, v, m\n"),
                        "t.fusion");
  const Attr& shape = f->ops()[0]->required_attr("shape");
  EXPECT_EQ(shape, (Attr{Attr::Kind::list, 0, 0, false, "", DType::f32,
                         {Attr::symbol("B"), Attr::integer(2), Attr::integer(-1)}}));
  EXPECT_EQ(f->ops()[1]->required_attr("correction"), Attr::real(1.0));
  EXPECT_EQ(f->ops()[3]->required_attr("dtype"), Attr::dtype(DType::boolean));
  EXPECT_EQ(f->ops()[0]->outputs[0]->type_str(), "f32[B, 2, 3]");
}

TEST(Parser, LiteralNames_NeverClashWithLaterStatements) {
  // The literal 2 gets an internal name; a later statement may still be called lit0.
  auto f = parse_fusion(fusion_text("x: f32[4]", "  a = add(x, 2)\n  lit0 = neg(a)\n  lit1 = mul(lit0, 3)\n  return lit1\n"),
                        "t.fusion");
  EXPECT_EQ(f->ops()[1]->outputs[0]->name, "lit0");
  EXPECT_EQ(f->ops()[2]->inputs[0], f->ops()[1]->outputs[0]);
  EXPECT_TRUE(f->ops()[0]->inputs[1]->literal.has_value());
  EXPECT_NE(f->ops()[0]->inputs[1]->name, "lit0");
}

struct ErrorCase {
  std::string text;
  std::string expected;  // a substring of the message, starting with the location
};

TEST(Parser, Errors_SayWhereWhatWasExpectedAndWhatWasFound) {
  const std::string head = "fusion f(x: f32[4], w: f32[3, 8]) {\n";
  const std::vector<ErrorCase> cases = {
      {head + "  y = add(x 1)\n  return y\n}", "t.fusion:2:13: expected ',' or ')' after an argument, found 1"},
      {head + "  y = add(x, 1 = 2)\n  return y\n}", "t.fusion:2:16: expected ',' or ')' after an argument, found '='"},
      {head + "  y = neg(x) = 2\n  return y\n}", "t.fusion:2:14: expected a statement (NAME = op(...)) or 'return', found '='"},
      {head + "  y = gelux(x)\n  return y\n}", "t.fusion:2:7: unknown op 'gelux'; did you mean 'gelu'?"},
      {head + "  y = frobnicate(x)\n  return y\n}", "t.fusion:2:7: unknown op 'frobnicate'\n"},
      {head + "  h = neg(x)\n  y = add(h, h2)\n  return y\n}", "t.fusion:3:14: undefined value 'h2'; did you mean 'h'?"},
      {head + "  y = neg(z)\n  z = neg(x)\n  return y\n}", "t.fusion:2:11: undefined value 'z'"},
      {head + "  h = neg(x)\n  h = exp(x)\n  return h\n}", "t.fusion:3:3: 'h' is already defined"},
      {head + "  x = neg(x)\n  return x\n}", "t.fusion:2:3: 'x' is already defined"},
      {"fusion f(x: f32[4], x: f32[2]) {\n  return x\n}", "t.fusion:1:21: 'x' is already defined"},
      {head + "  a, a = var_mean(x)\n  return a\n}", "t.fusion:2:6: 'a' is assigned twice in one statement"},
      {"fusion f(x: fp32[4]) {\n  return x\n}",
       "t.fusion:1:13: unknown dtype 'fp32'; expected one of f64 f32 f16 bf16 i64 i32 bool; did you mean 'f32'?"},
      {"fusion f(x: [4]) {\n  return x\n}", "t.fusion:1:13: expected a dtype (f64 f32 f16 bf16 i64 i32 bool), found '['"},
      {head + "  y = gelu(x, approximate=\"tanh)\n  return y\n}", "t.fusion:2:27: unterminated string"},
      {head + "  y = gelu(x, approximate=\"ta\\nh\")\n  return y\n}", "t.fusion:2:30: unknown escape in string"},
      {head + "  y = neg(x)\n}", "t.fusion:3:1: missing return: fusion 'f' ends without 'return VALUE, ...'"},
      {head + "  y = neg(x)\n", "t.fusion:3:1: expected a statement (NAME = op(...)) or 'return', found end of input"},
      {head + "  return\n}", "t.fusion:3:1: expected a value name after 'return', found '}'"},
      {head + "  return 2\n}", "t.fusion:2:10: expected a value name to return, found 2"},
      {head + "  return q\n}", "t.fusion:2:10: undefined value 'q'"},
      {head + "  return x\n  y = neg(x)\n}", "t.fusion:3:3: expected ',' or '}' after a returned value, found 'y'"},
      {"fusion f(x: f32[4]) { return x }\nfusion f(x: f32[4]) { return x }",
       "t.fusion:2:8: fusion 'f' is already defined in this file"},
      {"", "t.fusion:1:1: no fusion in the file; expected 'fusion NAME(PARAMS) { ... }', found end of input"},
      {"# only a comment\n", "t.fusion:2:1: no fusion in the file"},
      {"fusoin f() {}", "t.fusion:1:1: expected 'fusion', found 'fusoin'"},
      {"fusion (x: f32) {}", "t.fusion:1:8: expected a fusion name after 'fusion', found '('"},
      {"fusion f(x: f32[4] {\n  return x\n}", "t.fusion:1:20: expected ',' or ')' after a parameter, found '{'"},
      {"fusion f(x f32[4]) {\n  return x\n}", "t.fusion:1:12: expected ':' after parameter 'x', found 'f32'"},
      {"fusion f(x: f32[99999999999999999999]) {\n  return x\n}", "t.fusion:1:17: integer out of range"},
      {"fusion f(x: f32[9223372036854775808]) {\n  return x\n}", "t.fusion:1:17: integer out of range"},
      {head + "  y = add(x, -9223372036854775809)\n  return y\n}", "t.fusion:2:14: integer out of range"},
      {head + "  y = add(x, 1e999)\n  return y\n}", "t.fusion:2:14: real number out of range: 1e999"},
      {head + "  y = add(x, 1e)\n  return y\n}", "t.fusion:2:14: malformed number '1e'"},
      {head + "  y = add(x, 12ab)\n  return y\n}", "t.fusion:2:14: malformed number '12ab'"},
      {head + "  y = add(x, - x)\n  return y\n}", "t.fusion:2:16: expected a number after '-', found 'x'"},
      {head + "  y = reshape(x, shape=" + std::string(100, '[') + "\n", "t.fusion:2:56: lists are nested too deeply"},
      {head + "  y = neg(x) $\n  return y\n}", "t.fusion:2:14: unexpected character '$'"},
      {head + "  y = neg(x) \x01\n  return y\n}", "t.fusion:2:14: unexpected character '\\x01'"},
      {head + "  y = linear(x)\n  return y\n}", "t.fusion:2:7: linear: takes 2 to 3 arguments, found 1"},
      {head + "  y = linear(x, w)\n  return y\n}", "t.fusion:2:7: linear: x is f32[4] and weight is f32[3, 8]"},
      {head + "  y = neg(x, alpha=2)\n  return y\n}", "t.fusion:2:14: neg: unknown attribute 'alpha'"},
      {head + "  y = sum(x, dims=[0], dims=[0])\n  return y\n}", "t.fusion:2:24: sum: attribute 'dims' given twice"},
      {head + "  y = cast(x, dtype=f23)\n  return y\n}", "t.fusion:2:7: cast: attribute 'dtype' must be a dtype"},
      {head + "  a, b = neg(x)\n  return a\n}", "t.fusion:2:10: neg: returns 1 value, but 2 names are assigned"},
      {head + "  y = gelu(approximate=\"tanh\", x)\n  return y\n}",
       "t.fusion:2:32: positional argument after the attribute 'approximate'"},
      {head + "  y = exp(neg(x))\n  return y\n}", "t.fusion:2:11: an argument cannot be a call; assign neg(...) to a name first"},
      {head + "  y = neg([1])\n  return y\n}", "t.fusion:2:11: a list can only be an attribute value"},
      {head + "  y = sum(x, dims=)\n  return y\n}", "t.fusion:2:19: expected an attribute value"},
      {head + "  true = neg(x)\n  return x\n}", "t.fusion:2:3: 'true' is a reserved word and cannot name a value"},
      {head + "  y = (x)\n  return y\n}", "t.fusion:2:7: expected an op name after '=', found '('"},
      {head + "  y neg(x)\n  return y\n}", "t.fusion:2:5: expected '=' after the assigned name, found 'neg'"},
      {head + "  y = neg x\n  return y\n}", "t.fusion:2:11: expected '(' after 'neg', found 'x'"},
      {"fusion f(x: f32[4] @mesh[0, 1] shard(axis=1)) {\n  return x\n}",
       "t.fusion:1:43: shard axis 1 is out of range for a value of rank 1; expected 0 to 0"},
      {"fusion f(x: f32 @mesh[0] shard(axis=0)) {\n  return x\n}", "t.fusion:1:37: a scalar has no axis to shard"},
      {"fusion f(x: f32[4] @mesh[0]) {\n  return x\n}",
       "t.fusion:1:28: expected 'replicated' or 'shard(axis=K)' after the mesh, found ')'"},
      {"fusion f(x: f32[4] @mesh[0, 0] replicated) {\n  return x\n}", "t.fusion:1:29: device 0 appears twice in the mesh"},
      {"fusion f(x: f32[4] @mesh[] replicated) {\n  return x\n}", "t.fusion:1:26: a mesh needs at least one device"},
      {"fusion f(x: f32[4] @grid[0] replicated) {\n  return x\n}", "t.fusion:1:21: expected 'mesh' after '@', found 'grid'"},
      {"fusion f(x: f32[4] @mesh[0] shard(dim=0)) {\n  return x\n}", "t.fusion:1:35: expected 'axis' in shard(axis=K)"},
      {"fusion f(x: f32[f16]) {\n  return x\n}", "t.fusion:1:17: 'f16' cannot be a size symbol"},
      {"fusion f(x: f32[-1]) {\n  return x\n}", "t.fusion:1:17: a size cannot be negative"},
      {"fusion f(x: f32[4.5]) {\n  return x\n}", "t.fusion:1:17: expected a size (an integer, a symbol such as B, or ?), found 4.5"},
      {head + "  y = neg(", "t.fusion:2:11: expected an argument (a value name or a number), found end of input"},
  };
  for (const ErrorCase& c : cases) {
    std::string message = error_of(c.text);
    EXPECT_NE((message + "\n").find(c.expected), std::string::npos) << "input:\n" << c.text << "\nmessage: " << message;
  }
}

TEST(Parser, FileThatCannotBeOpened_IsAUserError) {
  EXPECT_THROW(parse_fusion_file("/nonexistent/dir/x.fusion"), UserError);
}

TEST(Parser, NameRules) {
  EXPECT_TRUE(is_value_name("h_2"));
  EXPECT_TRUE(is_value_name("f32"));  // a value may be called like a dtype
  EXPECT_FALSE(is_value_name("2h"));
  EXPECT_FALSE(is_value_name("a-b"));
  EXPECT_FALSE(is_value_name(""));
  EXPECT_FALSE(is_value_name("nan"));
  EXPECT_FALSE(is_value_name("return"));
  EXPECT_TRUE(is_symbol_name("B"));
  EXPECT_FALSE(is_symbol_name("bf16"));
}

// ---- robustness --------------------------------------------------------------------------

// Parses `text`; a user error is fine, anything else fails the test. Text that parses must print
// to a fixed point.
void parse_safely(const std::string& text) {
  std::vector<std::unique_ptr<Fusion>> fusions;
  try {
    fusions = parse_fusions(text, "fuzz.fusion");
  } catch (const UserError&) {
    return;
  } catch (const std::exception& e) {
    FAIL() << "non-user error " << e.what() << " for input:\n" << text;
  }
  std::string printed = print_fusions(fusions);
  EXPECT_EQ(print_fusions(parse_fusions(printed, "printed.fusion")), printed) << "input:\n" << text;
}

const char* kSeed = R"(fusion mlp(x: bf16[B, S, 768] @mesh[0, 1] replicated, w1: bf16[3072, 768], b1: bf16[3072], eps: f32, z: f32[]) {
  h = linear(x, w1, b1)  # comment
  g = gelu(h, approximate="tanh")
  v, m = var_mean(g, dims=[2], correction=1, keepdim=true)
  r = reshape(g, shape=[B, -1, 2])
  s = add(z, -1.5e-3)
  c = cast(s, dtype=f16)
  return g, v, m, r, c
}
)";

TEST(Parser, RandomBytes_NeverCrash) {
  std::mt19937 rng(1234);
  const std::string alphabet = "fusion(){}[],:=@?-#\"\\ \n\t.0123456789eE_abxyzBSf32bf16returnmeshshard";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    int length = int(rng() % 120);
    for (int k = 0; k < length; ++k)
      text += rng() % 8 == 0 ? char(rng() % 256) : alphabet[rng() % alphabet.size()];
    parse_safely(text);
  }
}

TEST(Parser, MutatedPrograms_NeverCrashAndPrintToAFixedPoint) {
  std::mt19937 rng(99);
  const std::string pieces[] = {"(", ")", "[", "]", ",", "=", "-", "?", "@", "#", "\"", "0", "1", "-1",
                                "999999999999999999999", "1e-400", "x", "g", "B", "return", "f32", "neg(x)",
                                "true", "[[", "shard(axis=2)", "\n"};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = kSeed;
    int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text.erase(at, 1 + rng() % 4); break;
        case 1: text.insert(at, pieces[rng() % std::size(pieces)]); break;
        default: text[at] = char(rng() % 256); break;
      }
      if (text.empty()) text = " ";
    }
    parse_safely(text);
  }
}

TEST(Parser, Pathological_DeepNestingLongNamesAndHugeNumbers_AreErrorsNotCrashes) {
  std::string head = "fusion f(x: f32[4]) {\n  y = reshape(x, shape=";
  EXPECT_NE(error_of(head + std::string(200000, '[')).find("nested too deeply"), std::string::npos);
  std::string long_name(100000, 'q');
  std::string message = error_of("fusion f(x: f32[4]) {\n  y = neg(" + long_name + ")\n  return y\n}");
  EXPECT_NE(message.find("undefined value 'qqqq"), std::string::npos);
  EXPECT_LT(message.size(), 200u);  // long names are cut in messages
  EXPECT_NE(error_of("fusion f(x: f32[" + std::string(5000, '9') + "]) {}").find("integer out of range"),
            std::string::npos);
  EXPECT_NE(error_of("fusion f(x: f32[4]) {\n  y = add(x, 1e" + std::string(5000, '9') + ")").find("out of range"),
            std::string::npos);
  // Many statements in a row parse in reasonable time.
  std::string body;
  for (int i = 0; i < 2000; ++i) body += "  v" + std::to_string(i + 1) + " = neg(v" + std::to_string(i) + ")\n";
  auto f = parse_fusion(fusion_text("v0: f32[4]", body + "  return v2000\n"), "t.fusion");
  EXPECT_EQ(f->ops().size(), 2000u);
}

}  // namespace
}  // namespace alloy

namespace alloy {
namespace {

TEST(CheckFusions, ReportsEveryFailedStatementOnceAndGoesOn) {
  std::string text =
      "fusion f(x: f32[4, 8], w: f32[8]) {\n"
      "  a = exp(x)\n"
      "  b = addd(a, w)\n"
      "  c = mul(b, 2.0)\n"
      "  d = sum(a, dims=[5])\n"
      "  e = add(a, w)\n"
      "  return c, e\n"
      "}\n";
  std::vector<std::string> errors = check_fusions(text, "bad.fusion");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("bad.fusion:3:7: unknown op 'addd'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("bad.fusion:5:7: sum:"), std::string::npos) << errors[1];
  EXPECT_TRUE(check_fusions("fusion f(x: f32[2]) {\n  y = exp(x)\n  return y\n}\n", "ok.fusion").empty());
}

// A statement that uses a failed name is not told again, but its other names are still read: an
// undefined one after the failed one is told, once (it was dropped with the statement).
TEST(CheckFusions, AnUndefinedNameAfterAFailedOne_IsStillTold) {
  std::vector<std::string> errors = check_fusions(
      "fusion f(x: f32[4]) {\n  c = mull(x)\n  d = add(c, zz)\n  e = add(d, yy)\n  g = sum(zz, dims=[0])\n  return e, c, qq\n}\n",
      "bad.fusion");
  ASSERT_EQ(errors.size(), 4u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find("bad.fusion:2:7: unknown op 'mull'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("bad.fusion:3:14: undefined value 'zz'"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("bad.fusion:4:14: undefined value 'yy'"), std::string::npos) << errors[2];
  EXPECT_NE(errors[3].find("bad.fusion:6:16: undefined value 'qq'"), std::string::npos) << errors[3];
  // attribute names and values, op names and a statement's mesh are not names to define
  EXPECT_EQ(check_fusions("fusion f(x: f32[4] @mesh[0] replicated) {\n  c = mull(x)\n  d = cast(c, dtype=f32) @mesh[0] replicated\n"
                          "  return d\n}\n",
                          "ok.fusion")
                .size(),
            1u);
}

// Held-out checks' finds: one error each, where it is, whatever the file's line breaks.
TEST(CheckFusions, OneLineFusionsStrayCharactersAndCrLineBreaks_GiveOneErrorEach) {
  std::vector<std::string> errors = check_fusions("fusion f(x: f32[2]) { y = neg(z) return y }\n", "one.fusion");
  ASSERT_EQ(errors.size(), 1u);  // (no "end of input" after the statement's error: the return is on its line)
  EXPECT_NE(errors[0].find("one.fusion:1:31: undefined value 'z'"), std::string::npos) << errors[0];
  errors = check_fusions("fusion f(x: f32[2]) {\n  y = neg(x);\n  return y\n}\n", "semi.fusion");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("semi.fusion:2:13: unexpected character ';'"), std::string::npos) << errors[0];
  errors = check_fusions("fusion f(x: f32[2]) {\r  y = neg(q)\r  return y\r}\r", "cr.fusion");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("cr.fusion:2:11: undefined value 'q'"), std::string::npos) << errors[0];
  EXPECT_TRUE(check_fusions("fusion f(x: f32[2]) { # c\r  y = neg(x)\r  return y\r}\r", "cr_comment.fusion").empty());
  EXPECT_TRUE(check_fusions("fusion f(x: f32[2]) { # c\r\n  y = neg(x)\r\n  return y\r\n}\r\n", "crlf.fusion").empty());
  // a character of two UTF-8 bytes (e acute) is one unexpected character, not one a byte
  errors = check_fusions("fusion f(x: f32[2]) {\n  y = neg(x) \xc3\xa9\n  return y\n}\n", "utf8.fusion");
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find("utf8.fusion:2:14: unexpected character '\xc3\xa9' (U+00E9)"), std::string::npos) << errors[0];
  // one inside a name is that one error, at the character (not first an unknown op 'm' before it)
  errors = check_fusions("fusion f(x: f32[2]) {\n  y = m\xc3\xbcl(x, x)\n  return y\n}\n", "name.fusion");
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find("name.fusion:2:8: unexpected character '\xc3\xbc' (U+00FC) in the name 'm...'"), std::string::npos) << errors[0];
  // a byte that starts no UTF-8 character stays escaped
  errors = check_fusions("fusion f(x: f32[2]) {\n  y = neg(x) \xff\n  return y\n}\n", "byte.fusion");
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find("byte.fusion:2:14: unexpected character '\\xff'"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace alloy
