// The CPU reference's shape ops: views share the input's buffer and read the right elements;
// reshape copies only when it must; cat promotes dtypes; slice follows Python's rules.
#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

std::vector<double> iota(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i);
  return v;
}

TEST(ReferenceShape, BroadcastInDimMapsInputAxesOntoNamedOutputAxesWithoutCopying) {
  OpHarness h;
  h.add(OpKind::broadcast_in_dim, {h.input(DType::f32, {3, 1})},
        {attr("shape", Attr::ints({3, 2, 4})), ints_attr("broadcast_dims", {0, 2})});
  Tensor x = make(DType::f32, {3, 1}, {10, 20, 30});
  Tensor out = h.run({x});
  ASSERT_EQ(out.sizes(), (Shape{3, 2, 4}));
  EXPECT_EQ(out.buffer(), x.buffer());
  std::vector<double> got = values(out);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 8; ++k) EXPECT_EQ(got[i * 8 + k], 10.0 * (i + 1));
}

TEST(ReferenceShape, ExpandKeepsMinusOneAxesAndAddsLeadingOnes) {
  OpHarness h;
  h.add(OpKind::expand, {h.input(DType::i32, {3, 1})}, {attr("shape", Attr::ints({2, -1, 4}))});
  Tensor out = h.run({make_ints(DType::i32, {3, 1}, {1, 2, 3})});
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 4}));
  std::vector<int64_t> got = ints(out);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(got[(b * 3 + i) * 4 + k], i + 1);
}

TEST(ReferenceShape, ExpandOfANonOneAxisToAnotherSizeIsAUserError) {
  OpHarness h;
  h.add(OpKind::expand, {h.input(DType::f32, {3})}, {attr("shape", Attr::ints({2, 3}))});
  const Op& op = *h.fusion.ops().back();
  EXPECT_THROW(run_reference_op(op, {make(DType::f32, {2}, {1, 2})}, {{2, 3}}), UserError);
}

TEST(ReferenceShape, ReshapeOfContiguousInputIsAView) {
  OpHarness h;
  h.add(OpKind::reshape, {h.input(DType::f32, {2, 6})}, {attr("shape", Attr::ints({3, -1}))});
  Tensor x = make(DType::f32, {2, 6}, iota(12));
  Tensor out = h.run({x});
  EXPECT_EQ(out.sizes(), (Shape{3, 4}));
  EXPECT_EQ(out.buffer(), x.buffer());
  EXPECT_EQ(values(out), iota(12));
}

TEST(ReferenceShape, ReshapeOfTransposedInputCopiesInLogicalOrder) {
  OpHarness h;
  h.add(OpKind::reshape, {h.input(DType::f32, {3, 2})}, {attr("shape", Attr::ints({6}))});
  Tensor x = make(DType::f32, {2, 3}, iota(6)).permute({1, 0});  // logical [[0,3],[1,4],[2,5]]
  Tensor out = h.run({x});
  EXPECT_NE(out.buffer(), x.buffer());
  EXPECT_EQ(values(out), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(ReferenceShape, ReshapeOfAnExpandedInputCopies) {
  OpHarness h;
  h.add(OpKind::reshape, {h.input(DType::i32, {2, 3})}, {attr("shape", Attr::ints({6}))});
  Tensor row = make_ints(DType::i32, {3}, {1, 2, 3});
  Tensor out = h.run({row.as_strided({2, 3}, {0, 1}, 0)});
  EXPECT_EQ(ints(out), (std::vector<int64_t>{1, 2, 3, 1, 2, 3}));
}

TEST(ReferenceShape, PermuteReordersAxes) {
  OpHarness h;
  h.add(OpKind::permute, {h.input(DType::f64, {2, 3, 4})}, {ints_attr("dims", {2, 0, -2})});
  Tensor x = make(DType::f64, {2, 3, 4}, iota(24));
  Tensor out = h.run({x});
  ASSERT_EQ(out.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(out.buffer(), x.buffer());
  std::vector<double> got = values(out);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(got[(k * 2 + i) * 3 + j], (i * 3 + j) * 4 + k);
}

TEST(ReferenceShape, SliceFollowsPythonNegativeIndicesStepsAndClamping) {
  OpHarness h;  // x[-8:-1:3, 1:100] of a [10, 3]
  h.add(OpKind::slice, {h.input(DType::f32, {10, 3})},
        {ints_attr("starts", {-8, 1}), ints_attr("ends", {-1, 100}), ints_attr("steps", {3, 1})});
  Tensor out = h.run({make(DType::f32, {10, 3}, iota(30))});
  ASSERT_EQ(out.sizes(), (Shape{3, 2}));
  EXPECT_EQ(values(out), (std::vector<double>{7, 8, 16, 17, 25, 26}));  // rows 2, 5, 8
}

TEST(ReferenceShape, SliceWithFewerEntriesThanRankSlicesLeadingAxes) {
  OpHarness h;
  h.add(OpKind::slice, {h.input(DType::i64, {4, 2})}, {ints_attr("starts", {-2}), ints_attr("ends", {4})});
  Tensor out = h.run({make_ints(DType::i64, {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7})});
  ASSERT_EQ(out.sizes(), (Shape{2, 2}));
  EXPECT_EQ(ints(out), (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(ReferenceShape, SliceOfAStridedInput) {
  OpHarness h;
  h.add(OpKind::slice, {h.input(DType::f32, {3, 4})}, {ints_attr("starts", {1, 0}), ints_attr("ends", {3, 4}), ints_attr("steps", {1, 2})});
  Tensor out = h.run({strided_copy(DType::f32, {3, 4}, iota(12))});
  EXPECT_EQ(values(out), (std::vector<double>{4, 6, 8, 10}));
}

TEST(ReferenceShape, SqueezeLeavesNamedAxesWhoseSizeIsNotOne) {
  OpHarness h;
  h.add(OpKind::squeeze, {h.input(DType::f32, {1, 3, 1})}, {ints_attr("dims", {0, 1})});
  Tensor out = h.run({make(DType::f32, {1, 3, 1}, {1, 2, 3})});
  EXPECT_EQ(out.sizes(), (Shape{3, 1}));
  EXPECT_EQ(values(out), (std::vector<double>{1, 2, 3}));
  OpHarness all;
  all.add(OpKind::squeeze, {all.input(DType::f32, {1, 3, 1})});
  EXPECT_EQ(all.run({make(DType::f32, {1, 3, 1}, {1, 2, 3})}).sizes(), (Shape{3}));
}

TEST(ReferenceShape, UnsqueezeWithNegativeDim) {
  OpHarness h;
  h.add(OpKind::unsqueeze, {h.input(DType::f32, {2, 3})}, {attr("dim", Attr::integer(-1))});
  Tensor x = strided_copy(DType::f32, {2, 3}, iota(6));
  Tensor out = h.run({x});
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(values(out), iota(6));
}

TEST(ReferenceShape, CatPromotesDtypesAndAcceptsStridedInputs) {
  OpHarness h;
  h.add(OpKind::cat, {h.input(DType::i32, {2, 1}), h.input(DType::f32, {2, 2})}, {attr("dim", Attr::integer(-1))});
  Tensor out = h.run({make_ints(DType::i32, {2, 1}, {7, 8}), strided_copy(DType::f32, {2, 2}, {0.5, 1.5, 2.5, 3.5})});
  ASSERT_EQ(out.dtype(), DType::f32);
  ASSERT_EQ(out.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(out), (std::vector<double>{7, 0.5, 1.5, 8, 2.5, 3.5}));
}

TEST(ReferenceShape, CatAlongTheFirstAxisOfThreeInputs) {
  OpHarness h;
  h.add(OpKind::cat, {h.input(DType::i64, {1, 2}), h.input(DType::i64, {0, 2}), h.input(DType::i64, {2, 2})});
  Tensor out = h.run({make_ints(DType::i64, {1, 2}, {1, 2}), make_ints(DType::i64, {0, 2}, {}), make_ints(DType::i64, {2, 2}, {3, 4, 5, 6})});
  EXPECT_EQ(out.sizes(), (Shape{3, 2}));
  EXPECT_EQ(ints(out), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(ReferenceShape, SegmentSetIsTheIdentity) {
  OpHarness h;
  h.add(OpKind::segment_set, {h.input(DType::f32, {2})});
  Tensor x = make(DType::f32, {2}, {1, 2});
  Tensor out = h.run({x});
  EXPECT_EQ(out.buffer(), x.buffer());
  EXPECT_EQ(values(out), (std::vector<double>{1, 2}));
}

}  // namespace
}  // namespace alloy
