// The fixed part of every generated kernel: integer types and bf16/f16 conversions on raw bits
// (round to nearest even, like ir/dtype.cpp; so NVRTC needs no toolkit headers; one instruction
// on sm_80+), vector access types, math overloads, NaN-propagating max/min (one instruction on
// sm_80+) and block reductions of one barrier. (The plain forms, software rounding everywhere and
// two barriers a reduction, lost their A/B and were removed in issue 24: on an H200 the row kernels
// at [8192, 8192] bf16 took 87.4/94.2/81.2 us plain against 74.7/77.2/77.3 us, the pointwise chain
// 750 against 497 us; bench/results/2026-11-24-NVIDIA_H200-notes.md.)
#pragma once

namespace alloy::cuda {

inline constexpr const char* kKernelPrelude = R"CUDA(
typedef unsigned char alloy_u8;
typedef unsigned short alloy_u16;
typedef long long alloy_i64;
__device__ __forceinline__ float alloy_bf16_to_float(alloy_u16 b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ alloy_u16 alloy_float_to_bf16(float f) {
#if __CUDA_ARCH__ >= 800
  alloy_u16 h;  // one instruction on Ampere and later (round to nearest even, NaN stays NaN)
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#endif
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (alloy_u16)((u >> 16) | 0x40u);  // quiet NaN, sign kept
  u += 0x7fffu + ((u >> 16) & 1u);
  return (alloy_u16)(u >> 16);
}
#ifdef __CUDA_ARCH__
__device__ __forceinline__ float alloy_f16_to_float(alloy_u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ alloy_u16 alloy_float_to_f16(float f) { alloy_u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#else  // compiled for the host (the CPU emulation tests): IEEE half in software
__device__ __forceinline__ float alloy_f16_to_float(alloy_u16 h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 31) bits = sign | 0x7f800000u | (mantissa << 13);
  else if (exponent != 0) bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  else if (mantissa == 0) bits = sign;
  else {
    int shifts = 0;
    while (!(mantissa & 0x400u)) { mantissa <<= 1; ++shifts; }
    bits = sign | ((unsigned)(113 - shifts) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return __uint_as_float(bits);
}
__device__ __forceinline__ alloy_u16 alloy_float_to_f16(float f) {
  unsigned x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (alloy_u16)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (alloy_u16)(sign | 0x7c00u);  // 65520 and up round to infinity
  if (ax >= 0x38800000u) {  // normal: rebias, round to nearest even
    unsigned m = ax - 0x38000000u;
    return (alloy_u16)(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  return (alloy_u16)(sign | (unsigned)nearbyintf(__uint_as_float(ax) * 16777216.0f));  // subnormal: units of 2^-24
}
#endif
__device__ __forceinline__ long long alloy_to_int(double x) { return x != x ? 0LL : (long long)x; }

template <class T, int V> struct __align__(sizeof(T) * V) AlloyVec { T v[V]; };
// Element e of a vector of bf16 as a float, from the 32-bit word that holds it and its neighbour:
// one shift or mask, where extracting the 16 bits first would take two instructions.
template <int V>
__device__ __forceinline__ float alloy_bf16_at(const AlloyVec<alloy_u16, V>& x, int e) {
  if (V == 1) return alloy_bf16_to_float(x.v[0]);
  unsigned word;
  memcpy(&word, &x.v[e & ~1], 4);
  return __uint_as_float((e & 1) ? (word & 0xffff0000u) : (word << 16));
}

__device__ __forceinline__ float ax_exp(float x) { return expf(x); }
__device__ __forceinline__ double ax_exp(double x) { return exp(x); }
__device__ __forceinline__ float ax_log(float x) { return logf(x); }
__device__ __forceinline__ double ax_log(double x) { return log(x); }
__device__ __forceinline__ float ax_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double ax_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float ax_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double ax_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float ax_erf(float x) { return erff(x); }
__device__ __forceinline__ double ax_erf(double x) { return erf(x); }
__device__ __forceinline__ float ax_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double ax_abs(double x) { return fabs(x); }
__device__ __forceinline__ long long ax_abs(long long x) { return x < 0 ? -x : x; }
__device__ __forceinline__ bool ax_abs(bool x) { return x; }
__device__ __forceinline__ float ax_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double ax_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ long long ax_pow(long long a, long long b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  long long r = 1;
  while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
  return r;
}
template <class T> __device__ __forceinline__ T ax_max(T a, T b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
template <class T> __device__ __forceinline__ T ax_min(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
#if __CUDA_ARCH__ >= 800
// NaN-propagating float max/min in one instruction
__device__ __forceinline__ float ax_max(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float ax_min(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
#endif
template <class T> __device__ __forceinline__ T ax_relu(T a) { return (a != a || a > T(0)) ? a : T(0); }

// Asynchronous copies of B (4, 8 or 16) bytes from global to shared memory (an inner-outer
// kernel's rows ahead, KernelVariant::staged_rows), committed as a group a row; waiting for all but
// the N latest groups. Before sm_80 (and in the CPU emulation) a plain copy, and nothing to wait for.
template <int B> __device__ __forceinline__ void alloy_cp_async(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  if (B == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(to), "l"(src) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(to), "l"(src), "n"(B) : "memory");
#else
  #pragma unroll
  for (int i = 0; i < B / 4; ++i) reinterpret_cast<unsigned*>(dst)[i] = reinterpret_cast<const unsigned*>(src)[i];
#endif
}
__device__ __forceinline__ void alloy_cp_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void alloy_cp_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}

// Dynamic shared memory (an inner-outer kernel's column partials, KernelVariant::shared_partials),
// and a thread's view of its partials there as O[it][e]: word (it * V + e) * stride of its own
// (the partials of consecutive threads in consecutive words).
#ifndef ALLOY_DYNAMIC_SHARED
#define ALLOY_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif
template <class T>
struct AlloySharedPartialVector {
  T* p;
  int stride;
  __device__ __forceinline__ T& operator[](int e) const { return p[e * stride]; }
};
template <class T, int V>
struct AlloySharedPartials {
  T* p;
  int stride;
  __device__ __forceinline__ AlloySharedPartialVector<T> operator[](int it) const { return {p + it * V * stride, stride}; }
};

// A row kernel's held leaf in shared memory (KernelVariant::shared_row): L[it] is the thread's
// vector `it`, `stride` (the block's threads) vectors after its vector it - 1.
template <class Vec>
struct AlloySharedRow {
  Vec* p;
  int stride;
  __device__ __forceinline__ Vec& operator[](int it) const { return p[it * stride]; }
};

struct AlloySum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct AlloyMax { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return ax_max(a, b); } };
struct AlloyMin { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return ax_min(a, b); } };

// The threads a block reduction spans: the block, or in an inner-outer kernel of row groups
// (KernelVariant::row_groups: the kernel defines ALLOY_ROW_GROUP_THREADS before this prelude) the
// thread's group of that many, whose barrier is a named one (1 + the group; 0 is __syncthreads').
#ifdef ALLOY_ROW_GROUP_THREADS
#ifndef ALLOY_NAMED_SYNC
#define ALLOY_NAMED_SYNC(id, count) asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory")
#endif
#define ALLOY_RED_TID (int(threadIdx.x) % ALLOY_ROW_GROUP_THREADS)
#define ALLOY_RED_THREADS ALLOY_ROW_GROUP_THREADS
#define ALLOY_RED_SYNC() ALLOY_NAMED_SYNC(1 + int(threadIdx.x) / ALLOY_ROW_GROUP_THREADS, ALLOY_ROW_GROUP_THREADS)
#else
#define ALLOY_RED_TID int(threadIdx.x)
#define ALLOY_RED_THREADS int(blockDim.x)
#define ALLOY_RED_SYNC() __syncthreads()
#endif

// Reduces one value per thread over the block; every thread gets the result. One barrier: each
// warp writes its partial, then every warp combines all of them. Consecutive reductions must use
// different `smem` regions (the generator alternates two), so no barrier guards the reuse.
template <class T, class F>
__device__ __forceinline__ T alloy_block_reduce(T v, F f, T* smem) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = ALLOY_RED_TID & 31, warp = ALLOY_RED_TID >> 5, warps = (ALLOY_RED_THREADS + 31) >> 5;
  if (lane == 0) smem[warp] = v;
  ALLOY_RED_SYNC();
  T w = smem[lane < warps ? lane : 0];
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    T other = __shfl_xor_sync(0xffffffffu, w, o);
    if ((lane ^ o) < warps) w = f(w, other);
  }
  return __shfl_sync(0xffffffffu, w, 0);
}

// K values a thread holds, each reduced over the block, at once (a row's sums): alloy_block_reduce's
// steps on each, one barrier for them all; `smem` takes K x 32 values. Each result has the bits
// alloy_block_reduce gives it alone.
template <class T, int K, class F>
__device__ __forceinline__ void alloy_block_reduce_n(T (&v)[K], F f, T* smem) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    #pragma unroll
    for (int k = 0; k < K; ++k) v[k] = f(v[k], __shfl_xor_sync(0xffffffffu, v[k], o));
  const int lane = ALLOY_RED_TID & 31, warp = ALLOY_RED_TID >> 5, warps = (ALLOY_RED_THREADS + 31) >> 5;
  if (lane == 0)
    #pragma unroll
    for (int k = 0; k < K; ++k) smem[k * 32 + warp] = v[k];
  ALLOY_RED_SYNC();
  #pragma unroll
  for (int k = 0; k < K; ++k) {
    T w = smem[k * 32 + (lane < warps ? lane : 0)];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      T other = __shfl_xor_sync(0xffffffffu, w, o);
      if ((lane ^ o) < warps) w = f(w, other);
    }
    v[k] = __shfl_sync(0xffffffffu, w, 0);
  }
}

// The same within one warp (a row per warp): shuffles only.
template <class T, class F>
__device__ __forceinline__ T alloy_warp_reduce(T v, F f, T*) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Welford's running (count, mean, m2), merged across the block.
template <class T>
__device__ __forceinline__ void alloy_welford_merge(T& n, T& mean, T& m2, T n2, T mean2, T m22) {
  // a side of no elements merges as nothing (mean + (0 - mean) * 0 is NaN at an infinite mean);
  // the same bits as the formula for finite values
  if (n2 == T(0)) return;
  if (n == T(0)) {
    n = n2;
    mean = mean2;
    m2 = m22;
    return;
  }
  T total = n + n2;
  if (mean - mean != T(0) || mean2 - mean2 != T(0)) {
    // an infinity (or NaN) on a side: the mean of the values is the means' sum (inf, -inf, or NaN
    // where both infinities meet), their variance NaN, whichever side came first (the formula
    // gave -inf + inf = NaN merging a finite side into -inf)
    mean = mean + mean2;
    m2 = mean - mean;
    n = total;
    return;
  }
  T delta = mean2 - mean;
  T w = n2 / total;
  mean += delta * w;
  m2 += m22 + delta * delta * n * w;
  n = total;
}
// The shift a thread's sums of deviations start from (var_mean's shifted sums): its first value,
// or 0 where that is not finite (an infinite shift made every deviation NaN, the mean too, where
// the mean of values holding an infinity is that infinity).
template <class T>
__device__ __forceinline__ T alloy_shift_of(T x) { return x - x == T(0) ? x : T(0); }
// Rows not held in registers: each thread's running (count, mean, m2) merged over the block.
template <class T>
__device__ __forceinline__ void alloy_block_welford(T& n, T& mean, T& m2, T* smem) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    alloy_welford_merge(n, mean, m2, __shfl_xor_sync(0xffffffffu, n, o), __shfl_xor_sync(0xffffffffu, mean, o),
                        __shfl_xor_sync(0xffffffffu, m2, o));
  const int lane = ALLOY_RED_TID & 31, warp = ALLOY_RED_TID >> 5, warps = (ALLOY_RED_THREADS + 31) >> 5;
  if (lane == 0) { smem[warp] = n; smem[33 + warp] = mean; smem[66 + warp] = m2; }
  ALLOY_RED_SYNC();  // one barrier, as in alloy_block_reduce
  T wn = lane < warps ? smem[lane] : T(0), wmean = lane < warps ? smem[33 + lane] : T(0), wm2 = lane < warps ? smem[66 + lane] : T(0);
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    alloy_welford_merge(wn, wmean, wm2, __shfl_xor_sync(0xffffffffu, wn, o), __shfl_xor_sync(0xffffffffu, wmean, o),
                        __shfl_xor_sync(0xffffffffu, wm2, o));
  n = __shfl_sync(0xffffffffu, wn, 0);
  mean = __shfl_sync(0xffffffffu, wmean, 0);
  m2 = __shfl_sync(0xffffffffu, wm2, 0);
}
// V consecutive partials that other blocks of this launch wrote (inner-outer kernels), read from L2
// (not a stale L1 line), in 16-byte loads where the address allows (the launch plan aligns them).
template <class T, int V>
__device__ __forceinline__ void alloy_load_partials(T (&dst)[V], const T* src) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4 && V % 4 == 0) {
    #pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 q = __ldcg(reinterpret_cast<const float4*>(src) + i);
      dst[4 * i] = q.x; dst[4 * i + 1] = q.y; dst[4 * i + 2] = q.z; dst[4 * i + 3] = q.w;
    }
    return;
  } else if constexpr (sizeof(T) == 8 && V % 2 == 0) {
    #pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      const double2 q = __ldcg(reinterpret_cast<const double2*>(src) + i);
      dst[2 * i] = q.x; dst[2 * i + 1] = q.y;
    }
    return;
  }
#endif
  #pragma unroll
  for (int e = 0; e < V; ++e) dst[e] = __ldcg(src + e);
}
// Every block of the launch past this point (an inner-outer kernel's grid combine; the launch is
// cooperative, so every block is resident and a block waiting here waits only for running ones).
// counters[0] counts the blocks arrived, counters[1] those gone on; the last to go on zeroes both
// for the next launch on the stream. Each block's writes before it are visible to every block after:
// the block's barrier orders its threads' writes before thread 0's fence, which releases them all
// (a fence is cumulative), and thread 0's fence after the wait acquires the others' before the
// barrier that lets its block on. One thread a block fences, not every warp (an H100 profile of the
// layer norm backward at 8192x4096 found 7% of its stall samples at those fences; its time, 89.7 us
// against 89.8-89.9, did not move: bench/results/2026-11-27-session32-notes.md).
__device__ __forceinline__ void alloy_grid_barrier(unsigned* counters) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counters, 1u);
    while (__ldcg(counters) < gridDim.x) __nanosleep(32);
    __threadfence();
    if (atomicAdd(counters + 1, 1u) == gridDim.x - 1) {
      counters[0] = 0;
      counters[1] = 0;
    }
  }
  __syncthreads();
}
// (The CPU emulation runs a grid's blocks one after another: it defines these to run them twice,
// the barrier ending the first run, the code before it skipped in the second.)
#ifndef ALLOY_GRID_BARRIER
#define ALLOY_GRID_BARRIER(counters) alloy_grid_barrier(counters)
#define ALLOY_GRID_FIRST_PHASE true
#endif
template <class T>
__device__ __forceinline__ void alloy_warp_welford(T& n, T& mean, T& m2, T*) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    alloy_welford_merge(n, mean, m2, __shfl_xor_sync(0xffffffffu, n, o), __shfl_xor_sync(0xffffffffu, mean, o),
                        __shfl_xor_sync(0xffffffffu, m2, o));
}
)CUDA";

}  // namespace alloy::cuda
