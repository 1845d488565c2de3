// NVRTC compilation to CUBIN with a memory cache and an atomic-write disk cache.
// The cache key hashes everything that changes the binary (source, kernel name, arch, options and
// the NVRTC version), so a stale disk entry can only be a hash collision, which the stored key rules out.
#include "alloy/backend/cuda/nvrtc_compiler.h"

#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "alloy/common/error.h"
#include "alloy/common/files.h"
#include "alloy/common/settings.h"

namespace alloy::cuda {

namespace {

constexpr char kDiskMagic[] = "ALLOYCUBIN1\n";

std::atomic<int64_t> memory_hits{0}, disk_hits{0}, compiles{0};

struct MemoryCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const CompiledModule>> modules;
};

MemoryCache& memory_cache() {
  static MemoryCache cache;
  return cache;
}

#define ALLOY_NVRTC_CHECK(expr)                                                                       \
  do {                                                                                                \
    nvrtcResult alloy_nvrtc_res_ = (expr);                                                            \
    if (alloy_nvrtc_res_ != NVRTC_SUCCESS)                                                            \
      ::alloy::internal_error(__FILE__, ":", __LINE__, ": ", #expr, " failed: ", nvrtcGetErrorString(alloy_nvrtc_res_)); \
  } while (0)

// 64-bit FNV-1a followed by a splitmix64 finalizer (FNV alone mixes its high bits poorly).
uint64_t hash64(std::string_view data, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::string hex128(std::string_view data) {
  char out[33];
  uint64_t parts[2] = {hash64(data, 0), hash64(data, 0x9e3779b97f4a7c15ull)};
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 16; ++i) out[p * 16 + i] = "0123456789abcdef"[(parts[p] >> (60 - 4 * i)) & 0xF];
  out[32] = '\0';
  return out;
}

std::vector<std::string> nvrtc_flags(int major, int minor, const CompileOptions& options) {
  std::vector<std::string> flags = {
      "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor) + options.arch_suffix,
      "-std=c++17",
      "-default-device",
      std::string("--fmad=") + (options.fmad ? "true" : "false"),
  };
  if (options.fast_math) flags.push_back("--use_fast_math");
  if (options.line_info) flags.push_back("-lineinfo");
  if (options.max_registers > 0) flags.push_back("--maxrregcount=" + std::to_string(options.max_registers));
  flags.insert(flags.end(), options.extra.begin(), options.extra.end());
  return flags;
}

std::string nvrtc_version_text() {
  int major = 0, minor = 0;
  ALLOY_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

void check_arch_supported(int major, int minor) {
  static const std::vector<int> archs = [] {
    int count = 0;
    ALLOY_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&count));
    std::vector<int> list(count);
    if (count > 0) ALLOY_NVRTC_CHECK(nvrtcGetSupportedArchs(list.data()));
    return list;
  }();
  int arch = major * 10 + minor;
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) return;
  std::string known;
  for (int a : archs) {
    if (!known.empty()) known += ' ';
    known.append("sm_").append(std::to_string(a));
  }
  user_error_at("--arch", "NVRTC ", nvrtc_version_text(), " cannot compile for sm_", arch, "; it supports ", known);
}

std::string numbered(const std::string& source) {
  std::ostringstream os;
  std::istringstream lines(source);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) os << (n < 10 ? "   " : n < 100 ? "  " : n < 1000 ? " " : "") << n << "  " << line << "\n";
  return os.str();
}

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

// Owns an nvrtcProgram so every exit path destroys it.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

std::shared_ptr<CompiledModule> run_nvrtc(const std::string& source, const std::string& kernel_name, int major,
                                          int minor, const CompileOptions& options) {
  Program program;
  ALLOY_NVRTC_CHECK(nvrtcCreateProgram(&program.handle, source.c_str(), "alloy_kernel.cu", 0, nullptr, nullptr));
  ALLOY_NVRTC_CHECK(nvrtcAddNameExpression(program.handle, kernel_name.c_str()));
  std::vector<std::string> flags = nvrtc_flags(major, minor, options);
  std::vector<const char*> argv;
  for (const auto& f : flags) argv.push_back(f.c_str());
  nvrtcResult result = nvrtcCompileProgram(program.handle, int(argv.size()), argv.data());
  std::string log = program_log(program.handle);
  if (result != NVRTC_SUCCESS) {
    std::string joined;
    for (const auto& f : flags) joined += " " + f;
    internal_error("NVRTC failed to compile kernel '", kernel_name, "' for sm_", major, minor, options.arch_suffix,
                   " (", nvrtcGetErrorString(result), ")\noptions:", joined, "\nlog:\n", log, "\nsource:\n",
                   numbered(source));
  }
  auto module = std::make_shared<CompiledModule>();
  module->kernel_name = kernel_name;
  module->arch_major = major;
  module->arch_minor = minor;
  module->log = log;
  const char* lowered = nullptr;
  ALLOY_NVRTC_CHECK(nvrtcGetLoweredName(program.handle, kernel_name.c_str(), &lowered));
  module->lowered_name = lowered;  // owned by the program: copy before it is destroyed
  size_t cubin_size = 0;
  ALLOY_NVRTC_CHECK(nvrtcGetCUBINSize(program.handle, &cubin_size));
  ALLOY_CHECK(cubin_size > 0, "NVRTC produced an empty CUBIN for ", kernel_name);
  module->cubin.resize(cubin_size);
  ALLOY_NVRTC_CHECK(nvrtcGetCUBIN(program.handle, module->cubin.data()));
  return module;
}

// ---- disk cache: magic, key, lowered name, cubin; every read validated, every error ignored ----

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
bool get(const std::string& in, size_t& pos, T& value) {
  if (pos + sizeof value > in.size()) return false;
  std::memcpy(&value, in.data() + pos, sizeof value);
  pos += sizeof value;
  return true;
}

bool get_bytes(const std::string& in, size_t& pos, size_t count, std::string& out) {
  if (count > in.size() - pos) return false;
  out.assign(in, pos, count);
  pos += count;
  return true;
}

std::filesystem::path disk_path(const std::string& dir, const std::string& key) {
  return std::filesystem::path(dir) / "kernels" / (key + ".cubin");
}

std::shared_ptr<CompiledModule> read_disk(const std::string& dir, const std::string& key,
                                          const std::string& kernel_name, int major, int minor) {
  std::ifstream file(disk_path(dir, key), std::ios::binary);
  if (!file) return nullptr;
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  size_t pos = sizeof kDiskMagic - 1;
  if (data.compare(0, pos, kDiskMagic) != 0) return nullptr;
  uint32_t key_len = 0, name_len = 0;
  uint64_t cubin_len = 0;
  std::string stored_key, lowered, cubin;
  if (!get(data, pos, key_len) || !get_bytes(data, pos, key_len, stored_key) || stored_key != key) return nullptr;
  if (!get(data, pos, name_len) || !get_bytes(data, pos, name_len, lowered)) return nullptr;
  if (!get(data, pos, cubin_len) || cubin_len == 0 || !get_bytes(data, pos, cubin_len, cubin)) return nullptr;
  if (pos != data.size()) return nullptr;
  auto module = std::make_shared<CompiledModule>();
  module->kernel_name = kernel_name;
  module->lowered_name = lowered;
  module->arch_major = major;
  module->arch_minor = minor;
  module->cubin.assign(cubin.begin(), cubin.end());
  return module;
}

void write_disk(const std::string& dir, const CompiledModule& module) {
  std::string data(kDiskMagic, sizeof kDiskMagic - 1);
  put(data, uint32_t(module.key.size()));
  data += module.key;
  put(data, uint32_t(module.lowered_name.size()));
  data += module.lowered_name;
  put(data, uint64_t(module.cubin.size()));
  data.append(module.cubin.begin(), module.cubin.end());

  std::error_code ec;
  std::filesystem::path final_path = disk_path(dir, module.key);
  std::filesystem::create_directories(final_path.parent_path(), ec);
  if (ec) return;
  // A unique temporary name, then rename: readers see the whole file or none of it.
  std::ostringstream tmp_name;
  tmp_name << final_path.filename().string() << ".tmp." << ::getpid() << "."
           << std::hash<std::thread::id>()(std::this_thread::get_id());
  std::filesystem::path tmp_path = final_path.parent_path() / tmp_name.str();
  {
    std::ofstream file(tmp_path, std::ios::binary | std::ios::trunc);
    if (!file) return;
    file.write(data.data(), std::streamsize(data.size()));
    if (!file) {
      file.close();
      std::filesystem::remove(tmp_path, ec);
      return;
    }
  }
  std::filesystem::rename(tmp_path, final_path, ec);
  if (ec) std::filesystem::remove(tmp_path, ec);
}

}  // namespace

std::string cuda_cache_dir() { return cache_dir(); }

std::shared_ptr<const CompiledModule> compile_cuda(const std::string& source, const std::string& kernel_name,
                                                   int arch_major, int arch_minor, const CompileOptions& options) {
  ALLOY_CHECK(!kernel_name.empty(), "compile_cuda: empty kernel name");
  std::string material = "alloy-nvrtc-v1\n" + nvrtc_version_text() + "\n" + kernel_name + "\n";
  for (const auto& flag : nvrtc_flags(arch_major, arch_minor, options)) material += flag + "\n";
  material += source;
  std::string key = hex128(material);

  MemoryCache& cache = memory_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.modules.find(key);
    if (it != cache.modules.end()) {
      ++memory_hits;
      return it->second;
    }
  }
  check_arch_supported(arch_major, arch_minor);
  std::string dir = options.use_disk_cache ? cuda_cache_dir() : "";
  std::shared_ptr<CompiledModule> module;
  if (!dir.empty()) {
    try {
      module = read_disk(dir, key, kernel_name, arch_major, arch_minor);
    } catch (...) {
      module = nullptr;  // an unreadable cache entry is just a miss
    }
    if (module) ++disk_hits;
  }
  bool fresh = !module;
  if (fresh) {
    module = run_nvrtc(source, kernel_name, arch_major, arch_minor, options);
    ++compiles;
  }
  module->key = key;
  module->arch_suffix = options.arch_suffix;
  if (fresh && !dir.empty()) {
    try {
      write_disk(dir, *module);
    } catch (...) {
      // the disk cache is an optimization; a full disk or a read-only home must not fail a run
    }
  }
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto [it, inserted] = cache.modules.emplace(key, std::move(module));
  return it->second;
}

CompileCacheStats compile_cache_stats() { return {memory_hits.load(), disk_hits.load(), compiles.load()}; }

void clear_compile_memory_cache() {
  MemoryCache& cache = memory_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.modules.clear();
}

CudaArch parse_cuda_arch(std::string_view text) {
  CudaArch arch;
  std::string_view rest = text;
  if (rest.substr(0, 3) == "sm_") rest.remove_prefix(3);
  int major = 0, minor = 0;
  if (auto dot = rest.find('.'); dot != std::string_view::npos) {  // "9.0"
    auto [p1, e1] = std::from_chars(rest.data(), rest.data() + dot, major);
    auto [p2, e2] = std::from_chars(rest.data() + dot + 1, rest.data() + rest.size(), minor);
    if (e1 != std::errc() || e2 != std::errc() || p1 != rest.data() + dot || p2 != rest.data() + rest.size() ||
        minor > 9)
      return {};
  } else {  // "90", "90a", "100f"
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits < 2) return {};
    int value = 0;
    std::from_chars(rest.data(), rest.data() + digits, value);
    major = value / 10;
    minor = value % 10;
    arch.suffix = std::string(rest.substr(digits));
    if (arch.suffix != "" && arch.suffix != "a" && arch.suffix != "f") return {};
  }
  if (major <= 0) return {};
  arch.major = major;
  arch.minor = minor;
  return arch;
}

}  // namespace alloy::cuda
