#include "alloy/backend/cuda/accumulate.h"

#include <algorithm>
#include <cstdint>

#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/common/error.h"

namespace alloy::cuda {
namespace {

// One kernel for every dtype (a switch on a code, outside the loops) and up to kMaxAddends
// addends: into = into + a0 + a1 + ..., summed in the dtype's accumulation type (f32 for the
// 16-bit floats; integers wrap, as unsigned arithmetic; bools or) and rounded once (once a launch:
// more addends take a launch per 8, each rounding its sum into `into`). Where every
// pointer is 16-byte aligned, a thread adds one 16-byte vector of each at a time, all its loads
// issued before the first add; the elements past the last whole vector (and everything where a
// pointer is not aligned) one by one. 16-bit floats are converted by hand (no headers under NVRTC
// here): f16 through PTX cvt, bf16 by its bits, rounding to nearest even.
constexpr const char* kSource = R"CUDA(
#define ALLOY_MAX_ADDENDS 8
struct AlloyAddends { const char* p[ALLOY_MAX_ADDENDS]; };
struct __align__(16) AlloyBytes16 { unsigned int w[4]; };

__device__ float f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ unsigned short f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ float bf16_to_f32(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ unsigned short f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  // NaN stays NaN
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Each dtype (by its code): its element type T, its accumulation type A, in and out.
template <int CODE> struct AlloyElem;
template <> struct AlloyElem<0> { typedef float T; typedef float A;
  static __device__ A in(T v) { return v; } static __device__ T out(A a) { return a; } };
template <> struct AlloyElem<1> { typedef double T; typedef double A;
  static __device__ A in(T v) { return v; } static __device__ T out(A a) { return a; } };
template <> struct AlloyElem<2> { typedef unsigned short T; typedef float A;
  static __device__ A in(T v) { return f16_to_f32(v); } static __device__ T out(A a) { return f32_to_f16(a); } };
template <> struct AlloyElem<3> { typedef unsigned short T; typedef float A;
  static __device__ A in(T v) { return bf16_to_f32(v); } static __device__ T out(A a) { return f32_to_bf16(a); } };
template <> struct AlloyElem<4> { typedef int T; typedef unsigned int A;
  static __device__ A in(T v) { return (A)v; } static __device__ T out(A a) { return (T)a; } };
template <> struct AlloyElem<5> { typedef long long T; typedef unsigned long long A;
  static __device__ A in(T v) { return (A)v; } static __device__ T out(A a) { return (T)a; } };
template <> struct AlloyElem<6> { typedef unsigned char T; typedef unsigned int A;
  static __device__ A in(T v) { return v != 0; } static __device__ T out(A a) { return a != 0; } };

template <int CODE>
__device__ void alloy_add(char* into, const AlloyAddends& s, int count, long long numel, bool vectors) {
  typedef AlloyElem<CODE> E;
  typedef typename E::T T;
  typedef typename E::A A;
  const int N = 16 / sizeof(T);
  union Vec { AlloyBytes16 raw; T e[16 / sizeof(T)]; };
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
  const long long whole = vectors ? numel / N : 0;
  for (long long v = first; v < whole; v += stride) {
    Vec in[ALLOY_MAX_ADDENDS], out;
    #pragma unroll
    for (int a = 0; a < ALLOY_MAX_ADDENDS; ++a)
      if (a < count) in[a].raw = reinterpret_cast<const AlloyBytes16*>(s.p[a])[v];
    out.raw = reinterpret_cast<const AlloyBytes16*>(into)[v];
    #pragma unroll
    for (int k = 0; k < N; ++k) {
      A acc = E::in(out.e[k]);
      #pragma unroll
      for (int a = 0; a < ALLOY_MAX_ADDENDS; ++a)
        if (a < count) acc += E::in(in[a].e[k]);
      out.e[k] = E::out(acc);
    }
    reinterpret_cast<AlloyBytes16*>(into)[v] = out.raw;
  }
  for (long long i = whole * N + first; i < numel; i += stride) {
    A acc = E::in(reinterpret_cast<const T*>(into)[i]);
    #pragma unroll
    for (int a = 0; a < ALLOY_MAX_ADDENDS; ++a)
      if (a < count) acc += E::in(reinterpret_cast<const T*>(s.p[a])[i]);
    reinterpret_cast<T*>(into)[i] = E::out(acc);
  }
}

extern "C" __global__ void alloy_accumulate(char* into, AlloyAddends addends, int count, long long numel, int code, int vectors) {
  switch (code) {
    case 0: alloy_add<0>(into, addends, count, numel, vectors); break;
    case 1: alloy_add<1>(into, addends, count, numel, vectors); break;
    case 2: alloy_add<2>(into, addends, count, numel, vectors); break;
    case 3: alloy_add<3>(into, addends, count, numel, vectors); break;
    case 4: alloy_add<4>(into, addends, count, numel, vectors); break;
    case 5: alloy_add<5>(into, addends, count, numel, vectors); break;
    default: alloy_add<6>(into, addends, count, numel, vectors); break;
  }
}
)CUDA";

// The kernel's addends argument (AlloyAddends above): pointers by value.
constexpr int kMaxAddends = 8;
struct Addends {
  const char* p[kMaxAddends];
};

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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* accumulate_source() { return kSource; }

void accumulate(const Tensor& into, const std::vector<Tensor>& addends, const Stream& stream) {
  if (addends.empty()) return;
  ALLOY_CHECK(into.is_contiguous(), "accumulate into ", into.str());
  for (const Tensor& a : addends)
    ALLOY_CHECK(a.sizes() == into.sizes() && a.dtype() == into.dtype() && a.is_contiguous(), "accumulate of ", a.str(), " into ",
                into.str());
  long long numel = into.numel();
  if (numel == 0) return;
  char* to = static_cast<char*>(into.data());
  int code = dtype_code(into.dtype());
  const long long elements_a_vector = 16 / dtype_size(into.dtype());
  const LoadedKernel& kernel = compile_and_load(kSource, kAccumulateKernel, stream.device());
  for (size_t start = 0; start < addends.size(); start += kMaxAddends) {
    Addends batch{};
    int count = int(std::min<size_t>(kMaxAddends, addends.size() - start));
    int vectors = aligned16(to);
    for (int a = 0; a < count; ++a) {
      batch.p[a] = static_cast<const char*>(addends[start + size_t(a)].data());
      vectors = vectors && aligned16(batch.p[a]);
    }
    const long long items = vectors ? numel / elements_a_vector + numel % elements_a_vector : numel;
    long long blocks = std::min<long long>((items + 255) / 256, 65535LL * 16);
    void* args[] = {&to, &batch, &count, &numel, &code, &vectors};
    kernel.launch(Dim3{unsigned(blocks)}, Dim3{256}, 0, stream, args);
  }
}

}  // namespace alloy::cuda
