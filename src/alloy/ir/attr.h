// Typed op attributes, as written after the arguments in the text format: `dims=[0, 1]`,
// `approximate="tanh"`, `dtype=f32`, `eps=1e-5`. A list may hold symbols (`shape=[B, -1]`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloy/tensor/dtype.h"
#include "alloy/ir/extent.h"

namespace alloy {

struct Attr {
  enum class Kind { integer, real, boolean, string, dtype, symbol, list };
  Kind kind = Kind::integer;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;  // string or symbol name
  DType dt = DType::f32;
  std::vector<Attr> list;

  static Attr integer(int64_t v) { Attr a; a.kind = Kind::integer; a.i = v; return a; }
  static Attr real(double v) { Attr a; a.kind = Kind::real; a.f = v; return a; }
  static Attr boolean(bool v) { Attr a; a.kind = Kind::boolean; a.b = v; return a; }
  static Attr string(std::string v) { Attr a; a.kind = Kind::string; a.s = std::move(v); return a; }
  static Attr dtype(DType v) { Attr a; a.kind = Kind::dtype; a.dt = v; return a; }
  static Attr symbol(std::string v) { Attr a; a.kind = Kind::symbol; a.s = std::move(v); return a; }
  static Attr ints(const std::vector<int64_t>& v);
  static Attr extents(const std::vector<Extent>& v);  // constants as integers, symbols as names

  bool operator==(const Attr&) const = default;
  std::string str() const;  // text-format spelling; round-trips through the parser
};

struct NamedAttr {
  std::string name;
  Attr value;
  bool operator==(const NamedAttr&) const = default;
};

}  // namespace alloy
