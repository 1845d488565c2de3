// .npy reading and writing: byte-exact headers, round trips of every dtype, strided writes,
// bf16 as f32, malformed files, and the input conversions of convert_for_input.
#include "alloy/tensor/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>

#include "alloy/common/error.h"

namespace alloy {
namespace {

// A .npy file laid out as the format specifies: magic, version, header length, a dict padded
// with spaces and a newline so the data starts at a multiple of 64 bytes, then the data.
std::string numpy_file(const std::string& dict, const std::string& data, int major = 1) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header += std::string(total - prefix - header.size() - 1, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < prefix - 8; ++i) out += char((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <class T>
std::string raw_bytes(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

Tensor filled(DType dtype, std::vector<int64_t> sizes, std::initializer_list<double> values) {
  Tensor t = Tensor::empty(dtype, std::move(sizes));
  int64_t i = 0;
  for (double v : values) store_double(t.data(), dtype, i++, v);
  return t;
}

void expect_user_error(const std::string& bytes, const std::string& fragment) {
  try {
    parse_npy(bytes, "bad.npy");
    FAIL() << "expected a UserError containing '" << fragment << "'";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.npy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Npy, Encode_F32Matrix_IsVersion1WithA64ByteAlignedHeader) {
  Tensor t = filled(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  std::string expected = numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                    raw_bytes<float>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(encode_npy(t), expected);
  EXPECT_EQ(encode_npy(t).size() % 64, 24u);  // 64-byte header + 24 data bytes
}

TEST(Npy, Encode_OneDimAndScalarShapes_UsePythonTupleSyntax) {
  EXPECT_NE(encode_npy(filled(DType::i32, {3}, {1, 2, 3})).find("'shape': (3,), }"), std::string::npos);
  EXPECT_NE(encode_npy(filled(DType::f64, {}, {7})).find("'shape': (), }"), std::string::npos);
}

TEST(Npy, Parse_NumpyWrittenFloat64_ReadsValues) {
  Tensor t = parse_npy(numpy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }",
                                  raw_bytes<double>({0.5, -1.25, 3, 1e300})),
                       "x.npy");
  ASSERT_EQ(t.dtype(), DType::f64);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.data_as<double>()[1], -1.25);
  EXPECT_EQ(t.data_as<double>()[3], 1e300);
}

TEST(Npy, Parse_Version2HeaderAndDoubleQuotesAndNoTrailingComma_AreAccepted) {
  Tensor t = parse_npy(numpy_file("{\"descr\": \"<i8\", \"shape\": (2,), \"fortran_order\": False}",
                                  raw_bytes<int64_t>({-5, 1LL << 40}), 2),
                       "x.npy");
  ASSERT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.data_as<int64_t>()[0], -5);
  EXPECT_EQ(t.data_as<int64_t>()[1], 1LL << 40);
}

TEST(Npy, RoundTrip_EveryNumpyDtype_KeepsDtypeShapeAndValues) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::i64, DType::i32, DType::boolean}) {
    Tensor t = filled(dtype, {2, 1, 3}, {0, 1, -2, 3.5, 1, -7});
    if (dtype == DType::boolean) t = filled(dtype, {2, 1, 3}, {0, 1, 1, 0, 1, 0});
    Tensor back = parse_npy(encode_npy(t), "rt.npy");
    ASSERT_EQ(back.dtype(), dtype) << dtype_name(dtype);
    ASSERT_EQ(back.sizes(), t.sizes());
    EXPECT_EQ(std::memcmp(back.data(), t.data(), size_t(t.numel()) * dtype_size(dtype)), 0) << dtype_name(dtype);
  }
}

TEST(Npy, RoundTrip_ThroughAFile_KeepsValues) {
  auto path = (std::filesystem::temp_directory_path() / "alloy_npy_test_roundtrip.npy").string();
  Tensor t = filled(DType::f16, {4}, {0.5, -0.25, 65504, 1e-7});
  write_npy(path, t);
  Tensor back = read_npy(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.dtype(), DType::f16);
  EXPECT_EQ(std::memcmp(back.data(), t.data(), 8), 0);
}

TEST(Npy, Encode_Bf16_IsWrittenAsExactF32) {
  Tensor t = filled(DType::bf16, {3}, {1.0078125, -3.5, 1e30});
  Tensor back = parse_npy(encode_npy(t), "bf.npy");
  ASSERT_EQ(back.dtype(), DType::f32);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back.data_as<float>()[i], float(load_as_double(t.data(), DType::bf16, i)));
  EXPECT_EQ(back.data_as<float>()[0], 1.0078125f);  // 1 + 2^-7 is a bf16 value
}

TEST(Npy, Encode_TransposedView_IsWrittenInCOrderOfTheView) {
  Tensor t = filled(DType::i32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor transposed = t.permute({1, 0});  // [[1, 4], [2, 5], [3, 6]]
  Tensor back = parse_npy(encode_npy(transposed), "t.npy");
  EXPECT_EQ(back.sizes(), (std::vector<int64_t>{3, 2}));
  const int32_t expected[] = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.data_as<int32_t>()[i], expected[i]) << i;
}

TEST(Npy, Encode_BroadcastViewWithZeroStride_RepeatsTheElement) {
  Tensor t = filled(DType::f64, {2}, {1.5, 2.5});
  Tensor wide = t.as_strided({3, 2}, {0, 1}, 0);
  Tensor back = parse_npy(encode_npy(wide), "w.npy");
  const double expected[] = {1.5, 2.5, 1.5, 2.5, 1.5, 2.5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.data_as<double>()[i], expected[i]);
}

TEST(Npy, Parse_EmptyArray_HasZeroElements) {
  Tensor t = parse_npy(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", ""), "e.npy");
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{0, 5}));
}

TEST(Npy, Parse_BoolBytesOtherThanOne_ReadAsTrue) {
  Tensor t = parse_npy(numpy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x01\x07", 3)), "b.npy");
  EXPECT_EQ(t.data_as<uint8_t>()[0], 0);
  EXPECT_EQ(t.data_as<uint8_t>()[2], 1);
}

TEST(Npy, Parse_FortranOrder_IsRejected) {
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", raw_bytes<float>({1, 2, 3, 4})),
                    "Fortran order");
}

TEST(Npy, Parse_BigEndian_IsRejected) {
  expect_user_error(numpy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", raw_bytes<float>({1})),
                    "big-endian");
}

TEST(Npy, Parse_UnsupportedDtypes_AreRejectedWithTheSupportedList) {
  expect_user_error(numpy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", "a"), "unsupported dtype '|u1'");
  expect_user_error(numpy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", raw_bytes<float>({1, 2})),
                    "<f8 <f4 <f2 <i8 <i4 |b1");
  expect_user_error(numpy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "abcd"),
                    "structured dtypes");
}

TEST(Npy, Parse_MalformedFiles_AreUserErrorsSayingWhatIsWrong) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  std::string good = numpy_file(dict, raw_bytes<float>({1, 2}));
  expect_user_error("PK\x03\x04 a zip file", "not a .npy file");
  expect_user_error(good.substr(0, 9), "not a .npy file");
  std::string bad_version = good;
  bad_version[6] = 9;
  expect_user_error(bad_version, "format version 9.0");
  expect_user_error(good.substr(0, 40), "truncated .npy header");
  expect_user_error(good.substr(0, good.size() - 1), "the data is 7 bytes; expected 8");
  expect_user_error(good + "xx", "the data is 10 bytes; expected 8");
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", ""), "non-negative integer");
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': False}", ""), "lacks the key 'shape'");
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", "abcd"), "True or False");
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", "abcd"), "unexpected key 'x'");
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,) ", "abcd"), "',' or '}'");
  expect_user_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904), }", "abcd"),
                    "truncated data");
}

TEST(Npy, Read_MissingFile_IsAUserErrorNamingIt) {
  try {
    read_npy("/nonexistent/dir/x.npy");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.npy: cannot open"), std::string::npos) << e.what();
  }
}

// The header is read and checked against the file's size before the data: a file far larger
// than its header says is refused naming both sizes, and a header that claims to be huge is
// refused before it is read.
TEST(Npy, Read_HeaderIsCheckedBeforeTheData) {
  auto dir = std::filesystem::temp_directory_path() / ("alloy_npy_header_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string good = encode_npy(filled(DType::f32, {6}, {1, 2, 3, 4, 5, 6}));
  auto write_file = [&](const std::string& name, const std::string& bytes, size_t extra_zeros) {
    std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    if (extra_zeros) std::filesystem::resize_file(path, bytes.size() + extra_zeros);  // sparse: no disk used
    return path;
  };
  auto error_of = [](const std::string& path) {
    try {
      read_npy(path);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error_of(write_file("long.npy", good, size_t(1) << 34));  // 16 GiB of data for 6 floats
  EXPECT_NE(e.find("the data is 17179869208 bytes; expected 24 for <f4 of shape (6,)"), std::string::npos) << e;
  std::string huge_header = good.substr(0, 8) + std::string("\xff\xff\xff\x7f", 4);
  huge_header[6] = 2;
  e = error_of(write_file("header.npy", huge_header, size_t(1) << 31));
  EXPECT_NE(e.find("the .npy header declares 2147483647 bytes; at most 1048576 are read"), std::string::npos) << e;
  Tensor back = read_npy(write_file("good.npy", good, 0));
  EXPECT_EQ(back.sizes(), (std::vector<int64_t>{6}));
  EXPECT_EQ(back.data_as<float>()[5], 6.0f);
  std::filesystem::remove_all(dir);
}

TEST(Npy, ConvertForInput_F32ForBf16_RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between the bf16 values 1 and 1 + 2^-7: ties go to the even one, 1.
  Tensor t = filled(DType::f32, {2}, {1.00390625, 1.01171875});
  Tensor out = convert_for_input(t, DType::bf16, "x");
  ASSERT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(load_as_double(out.data(), DType::bf16, 0), 1.0);
  EXPECT_EQ(load_as_double(out.data(), DType::bf16, 1), 1.015625);  // 1 + 3*2^-8 ties up to 1 + 2^-6
}

TEST(Npy, ConvertForInput_F64ForF32AndF16_Round) {
  Tensor t = filled(DType::f64, {1}, {0.1});
  EXPECT_EQ(convert_for_input(t, DType::f32, "x").data_as<float>()[0], 0.1f);
  EXPECT_EQ(load_as_double(convert_for_input(t, DType::f16, "x").data(), DType::f16, 0), 0.0999755859375);
}

TEST(Npy, ConvertForInput_AFiniteValuePastTheDeclaredRange_IsAnErrorNotInfinity) {
  try {
    convert_for_input(filled(DType::f32, {3}, {1.0, 65504.0, 70000.0}), DType::f16, "x");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "input 'x': expected f16 values, found 70000 (element 2 of the f32 file), past the largest finite f16");
  }
  // infinities and NaNs stay what they are; values that round to the largest finite one are fine
  const double inf = std::numeric_limits<double>::infinity();
  Tensor out = convert_for_input(filled(DType::f64, {3}, {inf, -inf, 3.0e38}), DType::f32, "x");
  EXPECT_TRUE(std::isinf(out.data_as<float>()[0]) && std::isinf(out.data_as<float>()[1]));
  EXPECT_EQ(out.data_as<float>()[2], 3.0e38f);
  EXPECT_THROW(convert_for_input(filled(DType::f64, {1}, {1.0e39}), DType::f32, "x"), UserError);
}

TEST(Npy, ConvertForInput_SameDtype_ReturnsTheSameBuffer) {
  Tensor t = filled(DType::i32, {2}, {1, 2});
  EXPECT_EQ(convert_for_input(t, DType::i32, "x").data(), t.data());
}

TEST(Npy, ConvertForInput_I64ForI32_AllowedWhenValuesFit) {
  Tensor fits = filled(DType::i64, {2}, {-3, 2147483647});
  Tensor out = convert_for_input(fits, DType::i32, "ids");
  ASSERT_EQ(out.dtype(), DType::i32);
  EXPECT_EQ(out.data_as<int32_t>()[1], 2147483647);
  Tensor too_big = filled(DType::i64, {2}, {0, 2147483648.0});
  EXPECT_THROW(
      {
        try {
          convert_for_input(too_big, DType::i32, "ids");
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("input 'ids': expected i32 values, found 2147483648"), std::string::npos) << e.what();
          throw;
        }
      },
      UserError);
}

TEST(Npy, ConvertForInput_IntegerForFloat_IsRejectedNamingBothDtypes) {
  try {
    convert_for_input(filled(DType::i64, {1}, {1}), DType::bf16, "x");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "input 'x': expected bf16 (or another floating dtype, rounded), found i64");
  }
  EXPECT_THROW(convert_for_input(filled(DType::f32, {1}, {1}), DType::i32, "x"), UserError);
  EXPECT_THROW(convert_for_input(filled(DType::boolean, {1}, {1}), DType::f32, "x"), UserError);
  EXPECT_THROW(convert_for_input(filled(DType::i32, {1}, {1}), DType::boolean, "x"), UserError);
}

TEST(Npy, ConvertForInput_StridedSource_IsConvertedInCOrder) {
  Tensor t = filled(DType::f64, {2, 2}, {1, 2, 3, 4});
  Tensor out = convert_for_input(t.permute({1, 0}), DType::f32, "x");
  const float expected[] = {1, 3, 2, 4};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.data_as<float>()[i], expected[i]);
}

}  // namespace
}  // namespace alloy
