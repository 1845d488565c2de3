#include "alloy/backend/cuda/strided_copy.h"

#include <cstring>

#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/common/error.h"

namespace alloy::cuda {
namespace {

constexpr int kMaxRank = 8;

constexpr const char* kSource = R"CUDA(
struct Params {
  long long numel, rank, elem_bytes;
  long long size[8], stride[8];
  const char* src;
  char* dst;
};
extern "C" __global__ void alloy_strided_copy(const Params p) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.numel; i += (long long)gridDim.x * blockDim.x) {
    long long rem = i, offset = 0;
    for (int d = (int)p.rank - 1; d >= 0; --d) {
      long long c = rem % p.size[d];
      rem /= p.size[d];
      offset += c * p.stride[d];
    }
    const char* from = p.src + offset * p.elem_bytes;
    char* to = p.dst + i * p.elem_bytes;
    switch (p.elem_bytes) {
      case 1: *to = *from; break;
      case 2: *(unsigned short*)to = *(const unsigned short*)from; break;
      case 4: *(unsigned*)to = *(const unsigned*)from; break;
      default: *(unsigned long long*)to = *(const unsigned long long*)from; break;
    }
  }
}
)CUDA";

struct Params {
  int64_t numel, rank, elem_bytes;
  int64_t size[kMaxRank], stride[kMaxRank];
  const void* src;
  void* dst;
};

}  // namespace

Tensor contiguous(const Tensor& t, const Stream& stream) {
  if (t.is_contiguous()) return t;
  Tensor out = cuda_empty(t.dtype(), t.sizes(), stream);
  Params p{};
  p.numel = t.numel();
  if (p.numel == 0) return out;
  // drop size-1 axes and merge axes that are already contiguous with each other
  std::vector<int64_t> sizes, strides;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    if (!sizes.empty() && strides.back() == t.stride(d) * t.size(d)) {
      sizes.back() *= t.size(d);
      strides.back() = t.stride(d);
      continue;
    }
    sizes.push_back(t.size(d));
    strides.push_back(t.stride(d));
  }
  // more strided axes than the kernel takes (a rank-64 tensor may have them): through the host
  if (int(sizes.size()) > kMaxRank) return to_device(to_host(t, stream), stream);
  p.rank = int64_t(sizes.size());
  p.elem_bytes = dtype_size(t.dtype());
  for (size_t d = 0; d < sizes.size(); ++d) {
    p.size[d] = sizes[d];
    p.stride[d] = strides[d];
  }
  p.src = t.data();
  p.dst = out.data();
  const LoadedKernel& kernel = compile_and_load(kSource, "alloy_strided_copy", stream.device());
  void* args[] = {&p};
  int64_t blocks = std::min<int64_t>((p.numel + 255) / 256, 65535 * 16);
  kernel.launch(Dim3{unsigned(blocks)}, Dim3{256}, 0, stream, args);
  return out;
}

}  // namespace alloy::cuda
