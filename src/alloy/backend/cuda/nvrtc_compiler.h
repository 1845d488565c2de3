// CUDA C++ source -> CUBIN through NVRTC, cached in memory and on disk. Needs no GPU (this is what
// `alloy compile --arch sm_90` runs), and no CUDA headers at the call site. No include path is
// passed to NVRTC: generated code includes nothing (codegen/prelude.h has the bf16/f16 conversions).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace alloy::cuda {

struct CompileOptions {
  bool fast_math = false;   // --use_fast_math: off by default, results must match the CPU reference
  bool fmad = true;         // contract a*b+c into FMA (NVRTC's default)
  bool line_info = false;   // -lineinfo, for profilers
  int max_registers = 0;    // --maxrregcount; 0 = compiler's choice
  std::string arch_suffix;  // "" or "a" (sm_90a: wgmma, setmaxnreg)
  bool use_disk_cache = true;
  std::vector<std::string> extra;  // further NVRTC options, verbatim
};

struct CompiledModule {
  std::string kernel_name;   // as asked for
  std::string lowered_name;  // the symbol in the cubin (the same for extern "C" kernels)
  int arch_major = 0, arch_minor = 0;
  std::string arch_suffix;   // "" or "a"/"f", as compiled
  std::vector<char> cubin;
  std::string log;           // NVRTC's log (warnings)
  std::string key;           // 32 hex digits: hash of source, kernel name, arch, options, NVRTC version
};

// Compiles `source` for sm_<major><minor> and returns the module holding `kernel_name` (a name
// expression such as "my_kernel" or "my_kernel<4>"). Cached: the same arguments return the same
// object. A compile error is an InternalError carrying the NVRTC log and the numbered source.
std::shared_ptr<const CompiledModule> compile_cuda(const std::string& source, const std::string& kernel_name,
                                                   int arch_major, int arch_minor,
                                                   const CompileOptions& options = {});

// The disk cache directory: $ALLOY_CACHE_DIR, else $XDG_CACHE_HOME/alloy, else ~/.cache/alloy;
// "" when none can be named (then only the memory cache is used).
std::string cuda_cache_dir();

struct CompileCacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiles = 0;
};
CompileCacheStats compile_cache_stats();
// Forgets the in-memory cache (the disk cache stays); for tests of the disk cache.
void clear_compile_memory_cache();

// "8.0" -> 8.0; "sm_90", "90" -> 9.0; "sm_90a" -> 9.0 with suffix "a". Not an architecture:
// valid() is false. For the CLI's --arch.
struct CudaArch {
  int major = 0, minor = 0;
  std::string suffix;
  bool valid() const { return major > 0; }
};
CudaArch parse_cuda_arch(std::string_view text);

}  // namespace alloy::cuda
