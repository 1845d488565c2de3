#include "alloy/backend/cuda/accumulate.h"

#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/common/error.h"

namespace alloy::cuda {
namespace {

// One kernel for every dtype (a switch on a code): the add is memory-bound, the switch is free.
// 16-bit floats are converted by hand (no headers under NVRTC here): f16 through PTX cvt, bf16 by
// its bits, rounding to nearest even.
constexpr const char* kSource = R"CUDA(
__device__ float f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ unsigned short f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ float bf16_to_f32(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ unsigned short f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  // NaN stays NaN
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
extern "C" __global__ void alloy_accumulate(char* into, const char* sum, long long numel, int code) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (long long)gridDim.x * blockDim.x) {
    switch (code) {
      case 0: ((float*)into)[i] += ((const float*)sum)[i]; break;
      case 1: ((double*)into)[i] += ((const double*)sum)[i]; break;
      case 2: ((unsigned short*)into)[i] = f32_to_f16(f16_to_f32(((unsigned short*)into)[i]) + f16_to_f32(((const unsigned short*)sum)[i])); break;
      case 3: ((unsigned short*)into)[i] = f32_to_bf16(bf16_to_f32(((unsigned short*)into)[i]) + bf16_to_f32(((const unsigned short*)sum)[i])); break;
      case 4: ((int*)into)[i] += ((const int*)sum)[i]; break;
      case 5: ((long long*)into)[i] += ((const long long*)sum)[i]; break;
      default: ((unsigned char*)into)[i] |= ((const unsigned char*)sum)[i]; break;
    }
  }
}
)CUDA";

int dtype_code(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f64: return 1;
    case DType::f16: return 2;
    case DType::bf16: return 3;
    case DType::i32: return 4;
    case DType::i64: return 5;
    case DType::boolean: return 6;
  }
  internal_error("accumulate: bad dtype");
}

}  // namespace

const char* accumulate_source() { return kSource; }

void accumulate(const Tensor& into, const Tensor& sum, const Stream& stream) {
  ALLOY_CHECK(into.sizes() == sum.sizes() && into.dtype() == sum.dtype() && into.is_contiguous() && sum.is_contiguous(),
              "accumulate of ", sum.str(), " into ", into.str());
  long long numel = into.numel();
  if (numel == 0) return;
  char* to = static_cast<char*>(into.data());
  const char* from = static_cast<const char*>(sum.data());
  int code = dtype_code(into.dtype());
  void* args[] = {&to, &from, &numel, &code};
  const LoadedKernel& kernel = compile_and_load(kSource, kAccumulateKernel, stream.device());
  long long blocks = std::min<long long>((numel + 255) / 256, 65535LL * 16);
  kernel.launch(Dim3{unsigned(blocks)}, Dim3{256}, 0, stream, args);
}

}  // namespace alloy::cuda
