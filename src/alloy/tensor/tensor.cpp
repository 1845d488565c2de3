#include "alloy/tensor/tensor.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "alloy/common/error.h"

namespace alloy {

std::string Device::str() const {
  return kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

Buffer::~Buffer() {
  if (deleter && data) deleter(data);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t running = 1;
  for (int i = int(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = running;
    running *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, DType dtype, std::vector<int64_t> sizes,
               std::vector<int64_t> strides, int64_t offset)
    : buffer_(std::move(buffer)), dtype_(dtype), sizes_(std::move(sizes)), strides_(std::move(strides)),
      offset_(offset) {
  ALLOY_CHECK(sizes_.size() == strides_.size(), "sizes and strides differ in rank");
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> sizes, Device device) {
  ALLOY_CHECK(device.kind == DeviceKind::cpu, "Tensor::empty on ", device.str(), ": use the device allocator");
  int64_t n = 1;
  for (int64_t s : sizes) {
    ALLOY_CHECK(s >= 0, "negative size");
    n *= s;
  }
  auto buffer = std::make_shared<Buffer>();
  buffer->device = device;
  buffer->bytes = size_t(n) * dtype_size(dtype);
  // 64-byte alignment so vectorized host code and DLPack consumers are happy
  size_t alloc = std::max<size_t>(64, (buffer->bytes + 63) / 64 * 64);
  buffer->data = std::aligned_alloc(64, alloc);
  if (!buffer->data) throw std::bad_alloc();
  buffer->deleter = [](void* p) { std::free(p); };
  auto strides = contiguous_strides(sizes);
  return Tensor(std::move(buffer), dtype, std::move(sizes), std::move(strides));
}

Tensor Tensor::borrow(void* data, Device device, DType dtype, std::vector<int64_t> sizes,
                      std::vector<int64_t> strides) {
  auto buffer = std::make_shared<Buffer>();
  buffer->device = device;
  buffer->data = data;
  return Tensor(std::move(buffer), dtype, std::move(sizes), std::move(strides));
}

int64_t Tensor::numel() const {
  return std::accumulate(sizes_.begin(), sizes_.end(), int64_t(1), std::multiplies<>());
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

void* Tensor::data() const {
  return static_cast<char*>(buffer_->data) + offset_ * dtype_size(dtype_);
}

Tensor Tensor::as_strided(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) const {
  return Tensor(buffer_, dtype_, std::move(sizes), std::move(strides), offset);
}

Tensor Tensor::permute(const std::vector<int>& dims) const {
  std::vector<int64_t> sizes, strides;
  for (int d : dims) {
    sizes.push_back(sizes_.at(d));
    strides.push_back(strides_.at(d));
  }
  return as_strided(std::move(sizes), std::move(strides), offset_);
}

Tensor Tensor::view(const std::vector<int64_t>& new_sizes) const {
  // Walk old and new dims in groups whose products match; each old group must be contiguous
  // within itself (PyTorch's computeStride rule).
  int64_t numel_new = std::accumulate(new_sizes.begin(), new_sizes.end(), int64_t(1), std::multiplies<>());
  if (numel_new != numel()) return Tensor();
  if (numel_new == 0) return as_strided(new_sizes, contiguous_strides(new_sizes), offset_);
  std::vector<int64_t> new_strides(new_sizes.size());
  int old_dim = 0, new_dim = 0;
  int old_rank = dim(), new_rank = int(new_sizes.size());
  while (new_dim < new_rank || old_dim < old_rank) {
    // skip size-1 dims on either side
    if (new_dim < new_rank && new_sizes[new_dim] == 1) { new_strides[new_dim] = 1; ++new_dim; continue; }
    if (old_dim < old_rank && sizes_[old_dim] == 1) { ++old_dim; continue; }
    if (new_dim >= new_rank || old_dim >= old_rank) return Tensor();
    int group_old_start = old_dim, group_new_start = new_dim;
    int64_t old_prod = sizes_[old_dim++], new_prod = new_sizes[new_dim++];
    while (old_prod != new_prod) {
      if (old_prod < new_prod) {
        while (old_dim < old_rank && sizes_[old_dim] == 1) ++old_dim;
        if (old_dim >= old_rank) return Tensor();
        old_prod *= sizes_[old_dim++];
      } else {
        while (new_dim < new_rank && new_sizes[new_dim] == 1) { new_strides[new_dim] = 1; ++new_dim; }
        if (new_dim >= new_rank) return Tensor();
        new_prod *= new_sizes[new_dim++];
      }
    }
    // the old group must be one strided run
    int last = -1;
    int64_t base = 1;  // the stride of the group's innermost (non-1) axis
    for (int d = old_dim - 1; d >= group_old_start; --d) {
      if (sizes_[d] == 1) continue;
      if (last >= 0 && strides_[d] != strides_[last] * sizes_[last]) return Tensor();
      if (last < 0) base = strides_[d];
      last = d;
    }
    for (int d = new_dim - 1; d >= group_new_start; --d) {
      new_strides[d] = base;
      base *= new_sizes[d];
    }
  }
  return as_strided(new_sizes, new_strides, offset_);
}

std::string Tensor::str() const {
  std::string out(dtype_name(dtype_));
  out += "[";
  for (int i = 0; i < dim(); ++i) out += (i ? ", " : "") + std::to_string(sizes_[i]);
  return out + "] on " + device().str();
}

double load_as_double(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f64: return static_cast<const double*>(base)[index];
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f16: return f16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::i64: return double(static_cast<const int64_t*>(base)[index]);
    case DType::i32: return static_cast<const int32_t*>(base)[index];
    case DType::boolean: return static_cast<const uint8_t*>(base)[index] ? 1.0 : 0.0;
  }
  internal_error("bad dtype");
}

int64_t load_as_int(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::i64: return static_cast<const int64_t*>(base)[index];
    case DType::i32: return static_cast<const int32_t*>(base)[index];
    case DType::boolean: return static_cast<const uint8_t*>(base)[index] ? 1 : 0;
    default: {
      double v = load_as_double(base, dtype, index);
      return std::isfinite(v) ? int64_t(v) : 0;
    }
  }
}

void store_double(void* base, DType dtype, int64_t index, double value) {
  switch (dtype) {
    case DType::f64: static_cast<double*>(base)[index] = value; return;
    case DType::f32: static_cast<float*>(base)[index] = float(value); return;
    case DType::f16: static_cast<uint16_t*>(base)[index] = double_to_f16_bits(value); return;
    case DType::bf16: static_cast<uint16_t*>(base)[index] = double_to_bf16_bits(value); return;
    case DType::i64: static_cast<int64_t*>(base)[index] = float_to_int(value, DType::i64); return;
    case DType::i32: static_cast<int32_t*>(base)[index] = int32_t(float_to_int(value, DType::i32)); return;
    case DType::boolean: static_cast<uint8_t*>(base)[index] = value != 0.0; return;
  }
  internal_error("bad dtype");
}

int64_t float_to_int(double v, DType to) {
  const bool i32 = to == DType::i32;
  const double low = i32 ? -2147483648.0 : -9223372036854775808.0, high = i32 ? 2147483648.0 : 9223372036854775808.0;
  if (v != v) return 0;
  if (v >= high) return i32 ? INT32_MAX : INT64_MAX;
  if (v <= low) return i32 ? INT32_MIN : INT64_MIN;
  return int64_t(v);
}

void store_int(void* base, DType dtype, int64_t index, int64_t value) {
  switch (dtype) {
    case DType::i64: static_cast<int64_t*>(base)[index] = value; return;
    case DType::i32: static_cast<int32_t*>(base)[index] = int32_t(value); return;
    case DType::boolean: static_cast<uint8_t*>(base)[index] = value != 0; return;
    default: store_double(base, dtype, index, double(value));
  }
}


Tensor packed_cpu(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.dtype(), t.sizes());
  const int64_t width = dtype_size(t.dtype());
  auto* dst = static_cast<char*>(out.data());
  const auto* src = static_cast<const char*>(t.data());
  for_each_element(t, [&](int64_t k, int64_t at) { std::memcpy(dst + k * width, src + at * width, size_t(width)); });
  return out;
}

Tensor cpu_copy(const Tensor& t) {
  Tensor packed = packed_cpu(t);
  if (packed.buffer() != t.buffer()) return packed;
  Tensor copy = Tensor::empty(t.dtype(), t.sizes());
  if (copy.numel() > 0) std::memcpy(copy.data(), packed.data(), size_t(copy.numel()) * size_t(dtype_size(t.dtype())));
  return copy;
}

int64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : 0;
}

}  // namespace alloy
