// The CPU reference's indexing ops: gather against torch.gather results worked out by hand (1-D,
// 2-D along either axis, 3-D, a negative dim, i32 and i64 indices, a strided input, an index
// longer along the axis and shorter off it), its run-time errors, and iota.
#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

const SourceLoc kLoc{"t.fusion", 4, 3};

// gather(x, index, dim) in a fresh fusion at kLoc, run on the given tensors.
Tensor gather_of(const Tensor& x, const Tensor& index, int64_t dim) {
  OpHarness h;
  Value* xv = h.input(x.dtype(), x.sizes());
  Value* iv = h.input(index.dtype(), index.sizes());
  h.fusion.add_op(OpKind::gather, {xv, iv}, {attr("dim", Attr::integer(dim))}, kLoc);
  return h.run({x, index});
}

std::string gather_error(const Shape& declared_x, const Tensor& x, const Tensor& index, int64_t dim) {
  OpHarness h;
  Value* xv = h.input(x.dtype(), declared_x);
  Value* iv = h.input(index.dtype(), index.sizes());
  h.fusion.add_op(OpKind::gather, {xv, iv}, {attr("dim", Attr::integer(dim))}, kLoc);
  try {
    run_reference_op(*h.fusion.ops().back(), {x, index}, {index.sizes()});
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ReferenceIndexing, Gather1D_PicksTheIndexedElements) {
  Tensor x = make(DType::f32, {4}, {10, 20, 30, 40});
  Tensor out = gather_of(x, make_ints(DType::i64, {4}, {3, 0, 0, 2}), 0);
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_EQ(values(out), (std::vector<double>{40, 10, 10, 30}));
  // an i32 index gives the same
  EXPECT_EQ(values(gather_of(x, make_ints(DType::i32, {4}, {3, 0, 0, 2}), 0)), (std::vector<double>{40, 10, 10, 30}));
}

TEST(ReferenceIndexing, Gather2D_AlongDim0_ReadsTheIndexedRowOfEachColumn) {
  // torch.gather([[1,2,3],[4,5,6]], 0, [[1,0,1],[0,0,0]]) = [[4,2,6],[1,2,3]]
  Tensor x = make(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor out = gather_of(x, make_ints(DType::i64, {2, 3}, {1, 0, 1, 0, 0, 0}), 0);
  ASSERT_EQ(out.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(out), (std::vector<double>{4, 2, 6, 1, 2, 3}));
}

TEST(ReferenceIndexing, Gather2D_AlongDim1AndDimMinus1_ReadsTheIndexedColumnOfEachRow) {
  // torch.gather([[1,2,3],[4,5,6]], 1, [[2,0],[1,1]]) = [[3,1],[5,5]]
  Tensor x = strided_copy(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor index = make_ints(DType::i32, {2, 2}, {2, 0, 1, 1});
  EXPECT_EQ(values(gather_of(x, index, 1)), (std::vector<double>{3, 1, 5, 5}));
  EXPECT_EQ(values(gather_of(x, index, -1)), (std::vector<double>{3, 1, 5, 5}));
}

TEST(ReferenceIndexing, Gather2D_IndexLongerAlongDimAndShorterOffIt) {
  Tensor x = make(DType::bf16, {2, 3}, {1, 2, 3, 4, 5, 6});
  // along dim 1 the index may be longer than x: [[1,1,3,2],[6,6,6,4]]
  Tensor out = gather_of(x, make_ints(DType::i64, {2, 4}, {0, 0, 2, 1, 2, 2, 2, 0}), 1);
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(values(out), (std::vector<double>{1, 1, 3, 2, 6, 6, 6, 4}));
  // off dim it may be shorter: torch reads x's leading rows, [[3],[4]]
  Tensor y = make(DType::i64, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor picked = gather_of(y, make_ints(DType::i64, {2, 1}, {2, 0}), 1);
  EXPECT_EQ(picked.dtype(), DType::i64);
  EXPECT_EQ(ints(picked), (std::vector<int64_t>{3, 4}));
}

TEST(ReferenceIndexing, Gather3D_AlongTheMiddleAxis) {
  // x[a][b][c] = 6a + 2b + c; out[a][b][c] = x[a][index[a][b][c]][c]
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i) v[size_t(i)] = i;
  Tensor x = make(DType::f64, {2, 3, 2}, v);
  Tensor out = gather_of(x, make_ints(DType::i64, {2, 2, 2}, {2, 0, 1, 1, 0, 2, 2, 1}), 1);
  ASSERT_EQ(out.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(out), (std::vector<double>{4, 1, 2, 3, 6, 11, 10, 9}));
}

TEST(ReferenceIndexing, GatherOfAnEmptyIndex_IsEmpty) {
  Tensor out = gather_of(make(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}), make_ints(DType::i64, {2, 0}, {}), 1);
  EXPECT_EQ(out.sizes(), (Shape{2, 0}));
}

TEST(ReferenceIndexing, GatherIndexPastTheAxis_IsALocatedErrorNamingTheValueAndTheRange) {
  Tensor x = make(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  std::string err = gather_error({2, 3}, x, make_ints(DType::i64, {2, 1}, {0, 3}), 1);
  EXPECT_NE(err.find("t.fusion:4:3: gather: index value 3 at index position [1, 0] is out of range for axis 1 of the input "
                     "'in0' [2, 3]; expected 0 to 2"), std::string::npos) << err;
  err = gather_error({2, 3}, x, make_ints(DType::i32, {1, 3}, {0, 1, 7}), 0);
  EXPECT_NE(err.find("t.fusion:4:3: gather: index value 7 at index position [0, 2] is out of range for axis 0"), std::string::npos)
      << err;
  EXPECT_NE(err.find("expected 0 to 1"), std::string::npos) << err;
}

// An index into an empty axis: no value is in range, said so (it read "expected 0 to -1")
TEST(ReferenceIndexing, GatherIndexIntoAnEmptyAxis_SaysTheAxisIsEmpty) {
  Tensor x = make(DType::f32, {3, 0}, {});
  std::string err = gather_error({3, 0}, x, make_ints(DType::i64, {3, 1}, {3, 0, 0}), 1);
  EXPECT_NE(err.find("out of range for axis 1 of the input 'in0' [3, 0]; the axis is empty (size 0): no index is in range"),
            std::string::npos) << err;
  EXPECT_EQ(err.find("to -1"), std::string::npos) << err;
}

TEST(ReferenceIndexing, GatherNegativeIndex_IsALocatedErrorAsInTorch) {
  Tensor x = make(DType::f32, {4}, {10, 20, 30, 40});
  std::string err = gather_error({4}, x, make_ints(DType::i64, {2}, {1, -1}), 0);
  EXPECT_NE(err.find("t.fusion:4:3: gather: index value -1 at index position [1] is out of range for axis 0 of the input 'in0' [4]; "
                     "expected 0 to 3 (negative indices are not taken"), std::string::npos) << err;
}

TEST(ReferenceIndexing, GatherIndexLongerThanTheInputOffTheAxisAtRunTime_IsALocatedError) {
  // declared [4, 3] (so the IR accepts an index of 4 rows), bound as [2, 3]
  std::string err = gather_error({4, 3}, make(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}), make_ints(DType::i64, {4, 1}, {0, 0, 0, 0}), 1);
  EXPECT_NE(err.find("t.fusion:4:3: gather: index [4, 1] is longer than the input [2, 3] on axis 0 (4 > 2)"), std::string::npos)
      << err;
}

TEST(ReferenceIndexing, Iota_CountsFromZeroInItsDtype) {
  for (DType dtype : {DType::i64, DType::i32, DType::f32, DType::bf16}) {
    OpHarness h;
    h.add(OpKind::iota, {}, {attr("length", Attr::integer(5)), attr("dtype", Attr::dtype(dtype))});
    Tensor out = h.run({});
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_EQ(values(out), (std::vector<double>{0, 1, 2, 3, 4})) << dtype_name(dtype);
  }
  OpHarness h;
  h.add(OpKind::iota, {}, {attr("length", Attr::integer(0))});
  EXPECT_EQ(h.run({}).sizes(), (Shape{0}));
}

}  // namespace
}  // namespace alloy
