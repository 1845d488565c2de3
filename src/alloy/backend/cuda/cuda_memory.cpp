// Device tensors from the stream-ordered memory pool, host<->device copies and poisoning.
// Each device's default pool keeps freed memory (release threshold = max), so after the first
// iteration an allocation is a pool lookup, not a cudaMalloc.
#include <cstring>
#include <mutex>
#include <numeric>

#include "alloy/backend/cuda/cuda_runtime.h"
#include "alloy/common/error.h"

namespace alloy::cuda {

namespace {

// Per device: whether stream-ordered allocation is supported (every GPU since Pascal on Linux).
struct PoolState {
  std::once_flag once;
  bool stream_ordered = false;
};

PoolState& pool_state(int device) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<PoolState>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (pools.size() <= size_t(device)) pools.resize(device + 1);
  if (!pools[device]) pools[device] = std::make_unique<PoolState>();
  return *pools[device];
}

bool prepare_pool(int device) {
  PoolState& state = pool_state(device);
  std::call_once(state.once, [&] {
    int supported = 0;
    ALLOY_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
    if (!supported) return;
    cudaMemPool_t pool = nullptr;
    ALLOY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    ALLOY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    state.stream_ordered = true;
  });
  return state.stream_ordered;
}

void free_device_memory(void* ptr, const std::shared_ptr<detail::StreamState>& state, bool stream_ordered) noexcept {
  // A deleter: runs from destructors, maybe at exit after the runtime unloaded; never throws.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != state->device) cudaSetDevice(state->device);
  cudaError_t err = stream_ordered ? cudaFreeAsync(ptr, detail::free_stream_for(*state)) : cudaFree(ptr);
  if (err != cudaSuccess) cudaGetLastError();
  if (previous >= 0 && previous != state->device) cudaSetDevice(previous);
}

void* allocate(size_t bytes, const Stream& stream, bool stream_ordered, const std::string& what) {
  void* ptr = nullptr;
  cudaError_t err = stream_ordered ? cudaMallocAsync(&ptr, bytes, raw(stream)) : cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation && stream_ordered) {
    // Memory freed on other streams may still be pending; settle everything, return the pool's
    // cached blocks to the device and try once more.
    cudaGetLastError();
    cudaMemPool_t pool = nullptr;
    ALLOY_CUDA_CHECK(cudaDeviceSynchronize());
    ALLOY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, stream.device()));
    ALLOY_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    err = cudaMallocAsync(&ptr, bytes, raw(stream));
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
    user_error_at("cuda:" + std::to_string(stream.device()), "CUDA out of memory allocating ", bytes,
                  " bytes for ", what, " (", free_bytes, " of ", total_bytes, " bytes free)");
  }
  ALLOY_CUDA_CHECK(err);
  return ptr;
}

// The element range [lo, hi] (relative to the tensor's first element) that a view touches.
struct Span {
  int64_t lo = 0, hi = -1;
  int64_t count() const { return hi - lo + 1; }
};

Span element_span(const Tensor& t) {
  if (t.numel() == 0) return {};
  Span span{0, 0};  // element 0 itself
  for (int d = 0; d < t.dim(); ++d) {
    int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach >= 0 ? span.hi : span.lo) += reach;
  }
  return span;
}

// Copies the elements of a strided view into contiguous `dst` in row-major order.
void gather_strided(const char* base, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                    size_t esize, char* dst) {
  int64_t n = std::accumulate(sizes.begin(), sizes.end(), int64_t(1), std::multiplies<>());
  if (n == 0) return;
  int rank = int(sizes.size());
  if (rank == 0) {
    std::memcpy(dst, base, esize);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  int64_t inner = sizes[rank - 1], inner_stride = strides[rank - 1];
  int64_t offset = 0;  // element offset of index[0 .. rank-2]
  for (int64_t done = 0; done < n; done += inner) {
    const char* row = base + offset * int64_t(esize);
    if (inner_stride == 1) {
      std::memcpy(dst, row, inner * esize);
    } else {
      for (int64_t j = 0; j < inner; ++j) std::memcpy(dst + j * esize, row + j * inner_stride * int64_t(esize), esize);
    }
    dst += inner * esize;
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[d] < sizes[d]) {
        offset += strides[d];
        break;
      }
      offset -= (sizes[d] - 1) * strides[d];
      index[d] = 0;
    }
  }
}

void check_on_cuda(const Tensor& t, const char* what) {
  ALLOY_CHECK(t.defined(), what, ": undefined tensor");
  ALLOY_CHECK(t.device().kind == DeviceKind::cuda, what, ": expected a CUDA tensor, got ", t.str());
}

}  // namespace

Tensor cuda_empty(DType dtype, std::vector<int64_t> sizes, const Stream& stream) {
  require_cuda("cuda_empty");
  int device = stream.device();
  ALLOY_CHECK(device >= 0, "cuda_empty on an empty Stream");
  int64_t numel = 1;
  for (int64_t s : sizes) {
    ALLOY_CHECK(s >= 0, "cuda_empty: negative size");
    numel *= s;
  }
  DeviceGuard guard(device);
  bool stream_ordered = prepare_pool(device);
  auto buffer = std::make_shared<Buffer>();
  buffer->device = Device{DeviceKind::cuda, device};
  buffer->bytes = size_t(numel) * dtype_size(dtype);
  if (buffer->bytes > 0) {
    std::string what = std::string(dtype_name(dtype)) + " tensor";
    buffer->data = allocate(buffer->bytes, stream, stream_ordered, what);
    std::shared_ptr<detail::StreamState> state = stream.state();
    buffer->deleter = [state, stream_ordered](void* ptr) { free_device_memory(ptr, state, stream_ordered); };
  }
  auto strides = contiguous_strides(sizes);
  return Tensor(std::move(buffer), dtype, std::move(sizes), std::move(strides));
}

Tensor to_device(const Tensor& cpu, const Stream& stream) {
  ALLOY_CHECK(cpu.defined(), "to_device: undefined tensor");
  ALLOY_CHECK(cpu.device().kind == DeviceKind::cpu, "to_device: expected a CPU tensor, got ", cpu.str());
  Tensor out = cuda_empty(cpu.dtype(), cpu.sizes(), stream);
  if (out.numel() == 0) return out;
  const void* src = cpu.data();
  Tensor packed;
  if (!cpu.is_contiguous()) {
    packed = Tensor::empty(cpu.dtype(), cpu.sizes());
    gather_strided(static_cast<const char*>(cpu.data()), cpu.sizes(), cpu.strides(), dtype_size(cpu.dtype()),
                   static_cast<char*>(packed.data()));
    src = packed.data();
  }
  size_t bytes = size_t(out.numel()) * dtype_size(out.dtype());
  DeviceGuard guard(stream.device());
  // From pageable memory the call returns once the source is staged, so `packed` may die at once.
  ALLOY_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyHostToDevice, raw(stream)));
  return out;
}

Tensor to_host(const Tensor& device_tensor, const Stream& stream) {
  check_on_cuda(device_tensor, "to_host");
  require_cuda("to_host");
  Tensor out = Tensor::empty(device_tensor.dtype(), device_tensor.sizes());
  if (out.numel() == 0) return out;
  size_t esize = dtype_size(device_tensor.dtype());
  DeviceGuard guard(device_tensor.device().index);
  if (device_tensor.is_contiguous()) {
    ALLOY_CUDA_CHECK(cudaMemcpyAsync(out.data(), device_tensor.data(), out.numel() * esize, cudaMemcpyDeviceToHost,
                                     raw(stream)));
    stream.synchronize();
    return out;
  }
  // Copy the whole span the view touches, then gather the elements on the host.
  Span span = element_span(device_tensor);
  Tensor staged = Tensor::empty(device_tensor.dtype(), {span.count()});
  const char* first = static_cast<const char*>(device_tensor.data()) + span.lo * int64_t(esize);
  ALLOY_CUDA_CHECK(cudaMemcpyAsync(staged.data(), first, span.count() * esize, cudaMemcpyDeviceToHost, raw(stream)));
  stream.synchronize();
  gather_strided(static_cast<const char*>(staged.data()) - span.lo * int64_t(esize), device_tensor.sizes(),
                 device_tensor.strides(), esize, static_cast<char*>(out.data()));
  return out;
}

void copy_d2d(const Tensor& dst, const Tensor& src, const Stream& stream) {
  check_on_cuda(dst, "copy_d2d");
  check_on_cuda(src, "copy_d2d");
  require_cuda("copy_d2d");
  ALLOY_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy_d2d: ", src.str(), " into ", dst.str());
  ALLOY_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy_d2d needs contiguous tensors: ", src.str(), " into ",
              dst.str());
  size_t bytes = size_t(src.numel()) * dtype_size(src.dtype());
  if (bytes == 0) return;
  DeviceGuard guard(stream.device());
  int dst_device = dst.device().index, src_device = src.device().index;
  if (dst_device == src_device) {
    ALLOY_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, raw(stream)));
  } else {
    ALLOY_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data(), dst_device, src.data(), src_device, bytes, raw(stream)));
  }
}

namespace {

// Every byte the elements span set to `byte`.
void fill_bytes(const Tensor& device_tensor, int byte, const Stream& stream, const char* what) {
  check_on_cuda(device_tensor, what);
  require_cuda(what);
  Span span = element_span(device_tensor);
  if (span.count() <= 0) return;
  size_t esize = dtype_size(device_tensor.dtype());
  char* first = static_cast<char*>(device_tensor.data()) + span.lo * int64_t(esize);
  DeviceGuard guard(device_tensor.device().index);
  ALLOY_CUDA_CHECK(cudaMemsetAsync(first, byte, span.count() * esize, raw(stream)));
}

}  // namespace

void fill_poison(const Tensor& device_tensor, const Stream& stream) { fill_bytes(device_tensor, 0xFF, stream, "fill_poison"); }
void fill_zero(const Tensor& device_tensor, const Stream& stream) { fill_bytes(device_tensor, 0, stream, "fill_zero"); }

}  // namespace alloy::cuda
