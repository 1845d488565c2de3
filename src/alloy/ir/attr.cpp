#include "alloy/ir/attr.h"

#include <cmath>
#include <cstdio>

#include "alloy/common/error.h"

namespace alloy {

Attr Attr::ints(const std::vector<int64_t>& v) {
  Attr a;
  a.kind = Kind::list;
  for (int64_t x : v) a.list.push_back(integer(x));
  return a;
}

Attr Attr::extents(const std::vector<Extent>& v) {
  Attr a;
  a.kind = Kind::list;
  for (const Extent& e : v) {
    if (auto c = e.constant_value()) a.list.push_back(integer(*c));
    else if (auto s = e.as_symbol(); s && !e.is_dynamic_symbol()) a.list.push_back(symbol(*s));
    else internal_error("extent ", e.str(), " has no attribute spelling");
  }
  return a;
}

// Shortest spelling that parses back to the same double, always with a '.' or exponent so it
// reads back as a float.
static std::string format_real(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string Attr::str() const {
  switch (kind) {
    case Kind::integer: return std::to_string(i);
    case Kind::real: return format_real(f);
    case Kind::boolean: return b ? "true" : "false";
    case Kind::string: {
      std::string out = "\"";
      for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      return out + "\"";
    }
    case Kind::dtype: return std::string(dtype_name(dt));
    case Kind::symbol: return s;
    case Kind::list: {
      std::string out = "[";
      for (size_t k = 0; k < list.size(); ++k) out += (k ? ", " : "") + list[k].str();
      return out + "]";
    }
  }
  internal_error("bad attr kind");
}

}  // namespace alloy
