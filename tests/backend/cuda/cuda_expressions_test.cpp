// Every pointwise op of the op table has its CUDA expression and its CPU reference: a new op
// missing either fails here, in CI, rather than at the first launch on a GPU.
#include <gtest/gtest.h>

#include "alloy/backend/cpu/reference_ops.h"
#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "test_util.h"

namespace alloy {
namespace {

// `y = NAME(a, b, ...)` over f32 vectors (a bool condition first where the op needs one).
std::unique_ptr<Fusion> one_op(const OpRow& row) {
  for (const char* first : {"f32", "bool"}) {
    std::string params, args;
    for (int i = 0; i < row.min_inputs; ++i) {
      std::string name = "a" + std::to_string(i);
      params += (i ? ", " : "") + name + ": " + (i == 0 ? first : "f32") + "[5]";
      args += (i ? ", " : "") + name;
    }
    std::string text = "fusion t(" + params + ") {\n  y = " + std::string(row.name) + "(" + args + ")\n  return y\n}\n";
    try {
      return parse_fusion(text, "t.fusion");
    } catch (const UserError&) {
    }
  }
  return nullptr;
}

TEST(CudaExpressions, EveryPointwiseOpHasAnExpressionAndAReference) {
  int checked = 0;
  for (std::string_view name : all_op_names()) {
    const OpRow& row = *find_op(name);
    if (!is_pointwise(row.kind) || row.kind == OpKind::cast) continue;  // a cast is the emitter's own conversion
    auto fusion = one_op(row);
    ASSERT_NE(fusion, nullptr) << name << ": no one-op fusion of it parses";
    const Op& op = *fusion->ops().back();
    std::vector<std::string> args;
    for (size_t i = 0; i < op.inputs.size(); ++i) args.push_back("a" + std::to_string(i));
    std::string expr;
    EXPECT_NO_THROW(expr = cuda::pointwise_expr(op, args, cuda::compute_type(cuda::op_compute_dtype(op)))) << name;
    EXPECT_NE(expr.find("a0"), std::string::npos) << name << ": " << expr;
    std::vector<Tensor> inputs;
    for (const Value* in : op.inputs) {
      Tensor t = Tensor::empty(in->dtype(), {5});
      for (int64_t i = 0; i < 5; ++i) store_double(t.data(), in->dtype(), i, 0.5 + double(i));
      inputs.push_back(t);
    }
    EXPECT_NO_THROW(run_reference_op(op, inputs, {{5}})) << name << ": no CPU reference";
    ++checked;
  }
  EXPECT_GE(checked, 29);  // the table's unary, binary and pointwise rows (29 today)
}

}  // namespace
}  // namespace alloy
