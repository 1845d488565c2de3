#include "alloy/tensor/npy.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "alloy/common/error.h"
#include "alloy/common/files.h"

namespace alloy {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

// ---- the header: a Python dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A small reader for the subset of Python literal syntax that .npy headers use.
class HeaderReader {
 public:
  HeaderReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  Header read() {
    Header header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{', "'{' opening the header dict");
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      std::string key = read_string("a quoted key");
      expect(':', "':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        if (peek() == '[') fail("structured dtypes are not supported; expected a simple dtype such as '<f4'");
        header.descr = read_string("a dtype string such as '<f4'");
        seen_descr = true;
      } else if (key == "fortran_order") {
        header.fortran_order = read_bool();
        seen_order = true;
      } else if (key == "shape") {
        header.shape = read_shape();
        seen_shape = true;
      } else {
        fail("unexpected key '" + key + "'; expected only 'descr', 'fortran_order' and 'shape'");
      }
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == '}') break;
      fail_found("',' or '}' after the value of '" + key + "'");
    }
    ++pos_;  // the '}'
    skip_space();
    if (pos_ != text_.size()) fail_found("the end of the header after '}'");
    if (!seen_descr || !seen_order || !seen_shape)
      fail(std::string("the header lacks the key '") + (!seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape") + "'");
    return header;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  const std::string& file_;

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) ++pos_;
  }
  [[noreturn]] void fail(const std::string& what) const { user_error_at(file_, "malformed .npy header: ", what); }
  [[noreturn]] void fail_found(const std::string& expected) const {
    std::string found = pos_ < text_.size() ? "'" + std::string(text_.substr(pos_, 12)) + "'" : "the end of the header";
    fail("expected " + expected + ", found " + found);
  }
  void expect(char c, const std::string& what) {
    skip_space();
    if (peek() != c) fail_found(what);
    ++pos_;
  }
  std::string read_string(const std::string& what) {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"') fail_found(what);
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool read_bool() {
    if (text_.substr(pos_, 4) == "True") { pos_ += 4; return true; }
    if (text_.substr(pos_, 5) == "False") { pos_ += 5; return false; }
    fail_found("True or False for 'fortran_order'");
  }
  std::vector<int64_t> read_shape() {
    if (peek() != '(') fail_found("a tuple such as (2, 3) for 'shape'");
    ++pos_;
    std::vector<int64_t> shape;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail_found("a non-negative integer in 'shape'");
      int64_t value = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a size in 'shape' is too large");
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // written by Python 2
      shape.push_back(value);
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      if (peek() != ')') fail_found("',' or ')' in 'shape'");
    }
    ++pos_;
    return shape;
  }
};

// '<f4' -> f32 and so on; anything else is a UserError that lists what is supported.
DType dtype_of_descr(const std::string& descr, const std::string& file) {
  std::string body = descr;
  char order = '=';
  if (!body.empty() && (body[0] == '<' || body[0] == '>' || body[0] == '|' || body[0] == '=')) {
    order = body[0];
    body = body.substr(1);
  }
  struct Known { std::string_view code; DType dtype; };
  static const Known known[] = {{"f8", DType::f64}, {"f4", DType::f32}, {"f2", DType::f16},
                                {"i8", DType::i64}, {"i4", DType::i32}, {"b1", DType::boolean}};
  for (const Known& k : known) {
    if (body != k.code) continue;
    if (order == '>' && dtype_size(k.dtype) > 1)
      user_error_at(file, "the array is big-endian ('", descr, "'); expected little-endian (save it with ",
                    "arr.astype(arr.dtype.newbyteorder('<')))");
    return k.dtype;
  }
  user_error_at(file, "unsupported dtype '", descr, "'; expected one of <f8 <f4 <f2 <i8 <i4 |b1 ",
                "(f64 f32 f16 i64 i32 bool)");
}

uint32_t read_le(std::string_view bytes, size_t at, int width) {
  uint32_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | uint8_t(bytes[at + i]);
  return value;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string_view descr_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return "<f8";
    case DType::f32: case DType::bf16: return "<f4";
    case DType::f16: return "<f2";
    case DType::i64: return "<i8";
    case DType::i32: return "<i4";
    case DType::boolean: return "|b1";
  }
  internal_error("bad dtype");
}

}  // namespace

namespace {

constexpr size_t kMaxNpyBytes = size_t(1) << 40;    // 1 TiB: larger than any input, smaller than a runaway size
constexpr size_t kMaxHeaderBytes = size_t(1) << 20;  // 1 MiB: a rank-64 header takes under 2 KiB

// Where a .npy file's data is and what it holds, read from its header alone.
struct NpyLayout {
  DType dtype;
  std::vector<int64_t> shape;
  size_t data_start = 0;  // bytes before the data
  size_t elements = 0;
  size_t data_bytes = 0;
};

// The magic and the header length: how many bytes of the file the header takes (magic included).
size_t header_end(std::string_view prefix, size_t file_size, const std::string& name) {
  if (prefix.size() < 10 || prefix.substr(0, kMagic.size()) != kMagic)
    user_error_at(name, "not a .npy file (it does not start with \\x93NUMPY)");
  int major = uint8_t(prefix[6]), minor = uint8_t(prefix[7]);
  if (major < 1 || major > 3)
    user_error_at(name, "unsupported .npy format version ", major, ".", minor, "; expected 1.0, 2.0 or 3.0");
  int length_width = major == 1 ? 2 : 4;
  size_t header_start = 8 + length_width;
  if (prefix.size() < header_start) user_error_at(name, "truncated .npy header");
  size_t header_length = read_le(prefix, 8, length_width);
  if (file_size < header_start + header_length)
    user_error_at(name, "truncated .npy header: it declares ", header_length, " bytes, the file has ", file_size - header_start);
  if (header_length > kMaxHeaderBytes)
    user_error_at(name, "the .npy header declares ", header_length, " bytes; at most ", kMaxHeaderBytes, " are read");
  return header_start + header_length;
}

// The layout from the file's first header_end() bytes, checked against the file's size: the data
// must be exactly what the header's dtype and shape need.
NpyLayout read_layout(std::string_view head, size_t file_size, const std::string& name) {
  size_t end = header_end(head, file_size, name);
  size_t header_start = uint8_t(head[6]) == 1 ? 10 : 12;
  Header header = HeaderReader(head.substr(header_start, end - header_start), name).read();
  NpyLayout layout{dtype_of_descr(header.descr, name), header.shape, end};
  if (header.fortran_order && header.shape.size() > 1)
    user_error_at(name, "the array is in Fortran order; expected C order (save np.ascontiguousarray(arr))");
  size_t available = file_size - end;
  size_t elements = 1;
  bool empty = std::find(header.shape.begin(), header.shape.end(), int64_t(0)) != header.shape.end();
  for (int64_t s : header.shape) {
    if (empty) {  // a shape with a 0 (like (2, 0)) holds no elements, whatever its other sizes
      elements = 0;
      break;
    }
    if (elements > available / size_t(s))  // more elements than bytes: cannot fit, and no overflow below
      user_error_at(name, "truncated data: shape ", shape_text(header.shape), " needs more than the ", available,
                    " bytes the file holds");
    elements *= size_t(s);
  }
  layout.elements = elements;
  layout.data_bytes = elements * size_t(dtype_size(layout.dtype));
  if (available != layout.data_bytes)
    user_error_at(name, "the data is ", available, " bytes; expected ", layout.data_bytes, " for ", header.descr, " of shape ",
                  shape_text(header.shape));
  return layout;
}

// NumPy bools are 0 or 1; keep any other byte from meaning "true" twice over.
void normalize_bools(Tensor& t, size_t elements) {
  if (t.dtype() != DType::boolean) return;
  auto* b = t.data_as<uint8_t>();
  for (size_t i = 0; i < elements; ++i) b[i] = b[i] != 0;
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& name) {
  NpyLayout layout = read_layout(bytes, bytes.size(), name);
  Tensor t = Tensor::empty(layout.dtype, layout.shape);
  if (layout.data_bytes > 0) std::memcpy(t.data(), bytes.data() + layout.data_start, layout.data_bytes);
  normalize_bools(t, layout.elements);
  return t;
}

Tensor read_npy(const std::string& path) {
  // A regular file (a device or FIFO is refused), its header read and checked against the file's
  // size before any data is: a wrong or huge file fails without being read.
  RegularFile file(path, kMaxNpyBytes, ".npy file");
  std::string head = file.read_at(0, std::min<size_t>(file.size(), 12));
  size_t end = header_end(head, file.size(), path);
  if (end > head.size()) head += file.read_at(head.size(), end - head.size());
  NpyLayout layout = read_layout(head, file.size(), path);
  if (int64_t memory = host_memory_bytes(); memory > 0 && layout.data_bytes > size_t(memory))
    user_error_at(path, "the array is ", layout.data_bytes, " bytes; this machine has ", memory);
  Tensor t = Tensor::empty(layout.dtype, layout.shape);
  if (layout.data_bytes > 0) file.read_into(layout.data_start, static_cast<char*>(t.data()), layout.data_bytes);
  normalize_bools(t, layout.elements);
  return t;
}

std::string encode_npy(const Tensor& tensor) {
  if (tensor.device().kind != DeviceKind::cpu) internal_error("encode_npy of a ", tensor.device().str(), " tensor");
  std::string dict = "{'descr': '" + std::string(descr_of(tensor.dtype())) +
                     "', 'fortran_order': False, 'shape': " + shape_text(tensor.sizes()) + ", }";
  // Pad with spaces so the data starts at a multiple of 64 bytes, ending the header with '\n'.
  // Version 1.0 has a 2-byte header length; a longer header (a tensor of very high rank) needs 2.0.
  auto padded_length = [&](size_t prefix) { return (prefix + dict.size() + 1 + 63) / 64 * 64 - prefix; };
  bool v2 = padded_length(10) > 65535;
  size_t header_length = padded_length(v2 ? 12 : 10);
  dict += std::string(header_length - dict.size() - 1, ' ') + "\n";

  std::string out(kMagic);
  out += char(v2 ? 2 : 1);
  out += char(0);
  for (int i = 0; i < (v2 ? 4 : 2); ++i) out += char((dict.size() >> (8 * i)) & 0xFF);
  out += dict;

  DType dtype = tensor.dtype();
  int out_size = dtype == DType::bf16 ? 4 : dtype_size(dtype);
  size_t data_start = out.size();
  out.resize(data_start + size_t(tensor.numel()) * out_size);
  char* dst = out.data() + data_start;
  const char* src = static_cast<const char*>(tensor.numel() ? tensor.data() : nullptr);
  for_each_element(tensor, [&](int64_t k, int64_t element) {
    if (dtype == DType::bf16) {
      uint16_t bits;
      std::memcpy(&bits, src + element * 2, 2);
      float value = bf16_bits_to_float(bits);
      std::memcpy(dst + k * 4, &value, 4);
    } else {
      std::memcpy(dst + k * out_size, src + element * out_size, out_size);
    }
  });
  return out;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  write_file_replacing(path, encode_npy(tensor));
}

Tensor convert_for_input(const Tensor& tensor, DType declared, const std::string& input_name, const std::string& source) {
  DType found = tensor.dtype();
  if (found == declared) return tensor;
  std::string where = "input '" + input_name + "'";
  bool float_to_float = is_floating(found) && is_floating(declared);
  bool int_to_int = is_integral(found) && is_integral(declared);
  if (!float_to_float && !int_to_int) {
    std::string allowed = is_floating(declared) ? " (or another floating dtype, rounded)"
                          : is_integral(declared) ? " (or another integer dtype whose values fit)"
                                                  : "";
    user_error_at(where, "expected ", dtype_name(declared), allowed, ", found ", dtype_name(found));
  }
  Tensor out = Tensor::empty(declared, tensor.sizes());
  const void* src = tensor.numel() ? tensor.data() : nullptr;
  void* dst = out.numel() ? out.data() : nullptr;
  for_each_element(tensor, [&](int64_t k, int64_t element) {
    if (float_to_float) {
      const double value = load_as_double(src, found, element);
      store_double(dst, declared, k, value);
      if (std::isfinite(value) && !std::isfinite(load_as_double(dst, declared, k)))  // rounded, but not to infinity
        user_error_at(where, "expected ", dtype_name(declared), " values, found ", value, " (element ", k, " of the ",
                      dtype_name(found), " ", source, "), past the largest finite ", dtype_name(declared));
      return;
    }
    int64_t value = load_as_int(src, found, element);
    if (declared == DType::i32 && (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()))
      user_error_at(where, "expected i32 values, found ", value, " (element ", k, " of the ", dtype_name(found), " ", source,
                    ") which does not fit");
    store_int(dst, declared, k, value);
  });
  return out;
}

}  // namespace alloy
