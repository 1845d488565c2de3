// Enough of CUDA to run Alloy's generated kernels on the CPU, for tests on machines without a GPU:
// each CUDA thread of a block is a fiber (ucontext) of the one OS thread that runs the grid,
// __syncthreads a barrier of the block's fibers, warp shuffles an exchange through a per-warp
// buffer between two barriers of the warp, __shared__ variables function-local statics (blocks
// run one after another). (Fibers, not a std::thread each: 1024 OS threads meeting at every
// barrier on two cores spent as much time in the kernel as in the kernels.) Included first by the
// translation unit emulated_kernels_test.cpp writes around a generated kernel; the prelude sees
// no __CUDA_ARCH__ and takes its portable paths (no inline PTX).
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

using std::fmax;

struct AlloyEmuDim3 {
  unsigned x = 0, y = 0, z = 0;
};
// The running CUDA thread's: every thread of a block is a fiber of the one OS thread that runs the
// grid, and the scheduler sets threadIdx (and the warp) before it resumes a fiber.
inline AlloyEmuDim3 threadIdx, blockIdx;
inline AlloyEmuDim3 gridDim, blockDim;

// The scheduler's context and the running fiber's: a fiber waiting at a barrier yields to the
// scheduler, which resumes the fibers in turn (thread order), each until its next wait.
inline ucontext_t alloy_emu_scheduler;
inline ucontext_t* alloy_emu_running;
inline void alloy_emu_yield() { swapcontext(alloy_emu_running, &alloy_emu_scheduler); }

// A barrier of `expected` fibers: the last to arrive opens it (a new generation) and goes on; the
// others yield until it has opened.
struct AlloyEmuBarrier {
  unsigned expected = 0, arrived = 0;
  unsigned long long generation = 0;
  void arrive_and_wait() {
    const unsigned long long g = generation;
    if (++arrived == expected) {
      arrived = 0;
      ++generation;
      return;
    }
    while (generation == g) alloy_emu_yield();
  }
};

struct AlloyEmuWarp {
  AlloyEmuBarrier sync;
  unsigned long long slot[32] = {};
};
inline AlloyEmuBarrier* alloy_emu_block;
inline AlloyEmuWarp* alloy_emu_warp;

inline void __syncthreads() { alloy_emu_block->arrive_and_wait(); }
// Named barriers (bar.sync id, count: an inner-outer kernel's row groups): a barrier of `count`
// threads per id, made at its first use in a grid (one grid runs at a time).
struct AlloyEmuNamed {
  std::unique_ptr<AlloyEmuBarrier> id[16];
};
inline AlloyEmuNamed* alloy_emu_named;
inline void alloy_emu_named_sync(int id, int count) {
  auto& slot = alloy_emu_named->id[id];
  if (!slot) {
    slot = std::make_unique<AlloyEmuBarrier>();
    slot->expected = unsigned(count);
  }
  slot->arrive_and_wait();
}
#define ALLOY_NAMED_SYNC(id, count) alloy_emu_named_sync(id, count)
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned) { alloy_emu_yield(); }  // (a spin-wait lets the other fibers run)
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long expected, unsigned long long desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;  // the old value, as CUDA's
}
template <class T>
T __ldcg(const T* p) { return *static_cast<const volatile T*>(p); }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }

template <class T>
T alloy_emu_exchange(T v, unsigned source_lane) {
  static_assert(sizeof(T) <= 8);
  unsigned lane = threadIdx.x & 31;
  std::memcpy(&alloy_emu_warp->slot[lane], &v, sizeof(T));
  alloy_emu_warp->sync.arrive_and_wait();
  T r;
  std::memcpy(&r, &alloy_emu_warp->slot[source_lane & 31], sizeof(T));
  alloy_emu_warp->sync.arrive_and_wait();
  return r;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) { return alloy_emu_exchange(v, (threadIdx.x & 31) ^ unsigned(mask)); }
template <class T>
T __shfl_sync(unsigned, T v, int lane) { return alloy_emu_exchange(v, unsigned(lane)); }

// Every lane of the warp must take part (the kernels call it where the whole warp does).
inline unsigned __ballot_sync(unsigned, int predicate) {
  unsigned lane = threadIdx.x & 31;
  alloy_emu_warp->slot[lane] = predicate != 0;
  alloy_emu_warp->sync.arrive_and_wait();
  unsigned word = 0;
  for (unsigned i = 0; i < 32; ++i)
    if (alloy_emu_warp->slot[i]) word |= 1u << i;
  alloy_emu_warp->sync.arrive_and_wait();
  return word;
}

#define __device__
#define __forceinline__ inline
#define __global__
#define __shared__ static
// A barrier of the grid (an inner-outer kernel's combine over the grid): the blocks run one after
// another here, so alloy_emulate_grid runs them twice; in the first run (phase 0) a block ends at
// the barrier, in the second it skips what comes before (ALLOY_GRID_FIRST_PHASE) and goes on.
inline int alloy_emu_phase = 0;
inline std::atomic<bool> alloy_emu_barrier_met{false};
#define ALLOY_GRID_BARRIER(counters)                  \
  do {                                                \
    if (alloy_emu_phase == 0) {                       \
      alloy_emu_barrier_met = true;                   \
      return;                                         \
    }                                                 \
  } while (0)
#define ALLOY_GRID_FIRST_PHASE (alloy_emu_phase == 0)
// Dynamic shared memory: one buffer, as large as an H100 block may opt into (blocks run one at a time)
#define ALLOY_DYNAMIC_SHARED(name) alignas(16) static unsigned char name[227 * 1024]
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) alignas(n)

// The fibers' stacks: one mapping, a guard page under each (an overflow faults, it does not
// corrupt the next), pages touched only as used.
struct AlloyEmuStacks {
  static constexpr size_t kBytes = 512 * 1024, kGuard = 4096;
  void* base = MAP_FAILED;
  size_t total = 0;
  explicit AlloyEmuStacks(unsigned n) : total(size_t(n) * kBytes) {
    base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) std::abort();
    for (unsigned i = 0; i < n; ++i) mprotect(at(i), kGuard, PROT_NONE);
  }
  ~AlloyEmuStacks() { munmap(base, total); }
  char* at(unsigned i) const { return static_cast<char*>(base) + size_t(i) * kBytes; }
};

// What every fiber runs (its blocks, in turn), and whether each has ended.
inline void (*alloy_emu_body)(void*);
inline void* alloy_emu_body_arg;
inline bool* alloy_emu_fiber_done;
inline void alloy_emu_fiber_main() {
  const unsigned t = threadIdx.x;
  alloy_emu_body(alloy_emu_body_arg);
  alloy_emu_fiber_done[t] = true;  // then back to the scheduler (uc_link)
}

// Runs kernel(params) over the grid, one block at a time: `threads` fibers of this OS thread take
// every block in turn and meet at a barrier between blocks. The blocks run in order (x fastest),
// or, where `order_seed` is not 0, in an order shuffled by it: a kernel whose blocks combine their
// partials (the last block to arrive, as column kernels and grid reductions do) must give the same
// bits whichever block arrives last.
template <class Params>
void alloy_emulate_grid(void (*kernel)(const Params), unsigned gx, unsigned gy, unsigned threads, const void* params,
                        unsigned order_seed = 0) {
  gridDim = {gx, gy, 1};
  blockDim = {threads, 1, 1};
  struct Run {
    void (*kernel)(const Params);
    const Params* p;
    std::vector<AlloyEmuDim3> blocks;
    AlloyEmuBarrier between;
  } run{kernel, static_cast<const Params*>(params), {}, {}};
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) run.blocks.push_back({bx, by, 0});
  if (order_seed != 0) {  // Fisher-Yates with a xorshift generator
    unsigned long long state = 0x9E3779B97F4A7C15ull ^ order_seed;
    for (size_t i = run.blocks.size(); i > 1; --i) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      std::swap(run.blocks[i - 1], run.blocks[size_t(state % i)]);
    }
  }
  run.between.expected = threads;
  AlloyEmuBarrier block;
  block.expected = threads;
  AlloyEmuNamed named;
  alloy_emu_named = &named;
  std::vector<std::unique_ptr<AlloyEmuWarp>> warps;
  for (unsigned w = 0; w < (threads + 31) / 32; ++w) {
    warps.push_back(std::make_unique<AlloyEmuWarp>());
    warps.back()->sync.expected = std::min(32u, threads - 32 * w);
  }
  alloy_emu_body = [](void* arg) {
    Run& r = *static_cast<Run*>(arg);
    for (const AlloyEmuDim3& b : r.blocks) {
      blockIdx = b;
      r.kernel(*r.p);
      r.between.arrive_and_wait();
    }
  };
  alloy_emu_body_arg = &run;
  AlloyEmuStacks stacks(threads);
  std::vector<ucontext_t> fibers(threads);
  std::unique_ptr<bool[]> done(new bool[threads]);
  alloy_emu_fiber_done = done.get();
  auto run_blocks = [&] {
    for (unsigned t = 0; t < threads; ++t) {
      done[t] = false;
      getcontext(&fibers[t]);
      fibers[t].uc_stack.ss_sp = stacks.at(t) + AlloyEmuStacks::kGuard;
      fibers[t].uc_stack.ss_size = AlloyEmuStacks::kBytes - AlloyEmuStacks::kGuard;
      fibers[t].uc_link = &alloy_emu_scheduler;
      makecontext(&fibers[t], alloy_emu_fiber_main, 0);
    }
    for (unsigned live = threads; live > 0;)
      for (unsigned t = 0; t < threads; ++t) {
        if (done[t]) continue;
        threadIdx = {t, 0, 0};
        alloy_emu_block = &block;
        alloy_emu_warp = warps[t / 32].get();
        alloy_emu_running = &fibers[t];
        swapcontext(&alloy_emu_scheduler, &fibers[t]);
        live -= done[t];
      }
  };
  run_blocks();
  if (!alloy_emu_barrier_met) return;
  alloy_emu_phase = 1;  // every block past the grid's barrier (ALLOY_GRID_BARRIER)
  run_blocks();
  alloy_emu_phase = 0;
  alloy_emu_barrier_met = false;
}
