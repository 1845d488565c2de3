// Runtime tensors: a shared buffer (device, pointer, bytes) viewed with dtype, sizes, strides
// (in elements) and an element offset. Views share the buffer; nothing here copies implicitly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/tensor/dtype.h"

namespace alloy {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// Owns (or borrows) one allocation. The deleter runs when the last view goes away.
struct Buffer {
  Device device;
  void* data = nullptr;
  size_t bytes = 0;
  std::function<void(void*)> deleter;  // empty: borrowed memory
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, DType dtype, std::vector<int64_t> sizes,
         std::vector<int64_t> strides, int64_t offset = 0);

  // A new contiguous (row-major) CPU tensor; contents uninitialized.
  static Tensor empty(DType dtype, std::vector<int64_t> sizes, Device device = {});
  // Wraps memory the caller keeps alive (DLPack, NumPy); no copy.
  static Tensor borrow(void* data, Device device, DType dtype, std::vector<int64_t> sizes,
                       std::vector<int64_t> strides);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return buffer_ ? buffer_->device : Device{}; }
  int dim() const { return int(sizes_.size()); }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t size(int axis) const { return sizes_.at(axis); }
  int64_t stride(int axis) const { return strides_.at(axis); }
  int64_t offset() const { return offset_; }
  int64_t numel() const;
  bool is_contiguous() const;
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  // Address of element [0, ..., 0].
  void* data() const;
  template <class T>
  T* data_as() const { return static_cast<T*>(data()); }

  // Zero-copy views (the caller has checked the arguments).
  Tensor as_strided(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) const;
  Tensor permute(const std::vector<int>& dims) const;
  // nullopt-like empty Tensor when the strides do not allow a view.
  Tensor view(const std::vector<int64_t>& sizes) const;

  std::string str() const;  // "bf16[2, 3] on cpu"

 private:
  std::shared_ptr<Buffer> buffer_;
  DType dtype_ = DType::f32;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

// The strided walk: calls visit(k, element) for the first `count` elements of `t` (all where
// count < 0) in row-major order, k counting them and `element` the offset in elements from
// data() whatever the strides (a broadcast view of billions of elements is walked, never listed).
template <class Visit>
void for_each_element(const Tensor& t, Visit&& visit, int64_t count = -1) {
  const int64_t n = count < 0 ? t.numel() : std::min(count, t.numel());
  if (n <= 0) return;
  if (t.is_contiguous()) {
    for (int64_t k = 0; k < n; ++k) visit(k, k);
    return;
  }
  std::vector<int64_t> index(size_t(t.dim()), 0);
  int64_t element = 0;
  for (int64_t k = 0; k < n; ++k) {
    visit(k, element);
    for (int axis = t.dim() - 1; axis >= 0; --axis) {
      element += t.stride(axis);
      if (++index[size_t(axis)] < t.size(axis)) break;
      element -= t.stride(axis) * t.size(axis);
      index[size_t(axis)] = 0;
    }
  }
}

// A CPU tensor's elements packed row-major: `t` itself when already contiguous, else a copy.
Tensor packed_cpu(const Tensor& t);
// A CPU tensor's elements packed row-major in memory of their own (always a copy).
Tensor cpu_copy(const Tensor& t);

// This machine's memory in bytes (0 where the system does not say).
int64_t host_memory_bytes();

// Element access on CPU tensors, converting through double (int64 kept exact separately).
double load_as_double(const void* base, DType dtype, int64_t index);
int64_t load_as_int(const void* base, DType dtype, int64_t index);
void store_double(void* base, DType dtype, int64_t index, double value);
// A float as integer dtype `to` (i64 or i32) holds it: toward zero, saturating at the dtype's range,
// NaN 0 — what a GPU's conversion does (cvt.rzi), so the CPU reference and the generated kernels
// agree (C++ leaves it undefined, PyTorch platform-defined).
int64_t float_to_int(double value, DType to);
void store_int(void* base, DType dtype, int64_t index, int64_t value);

}  // namespace alloy
