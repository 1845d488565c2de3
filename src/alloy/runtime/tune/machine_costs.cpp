#include "alloy/runtime/tune/machine_costs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "alloy/backend/backend.h"
#include "alloy/common/error.h"
#include "alloy/common/files.h"
#include "alloy/common/settings.h"
#include "alloy/ir/parser.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/runtime/executor.h"

namespace alloy {
namespace {

using host_ir::MachineCosts;
using multidevice::Communicator;

// 2: a GEMM's fixed cost and rate from its cost inside a run (a chain of two probe GEMMs less one);
// version 1's were whole runs of one GEMM, whose host overhead (~29 us on an H200) counted as
// every chunk's launch. 3: the unpipelined program's own all-gather and reduce-scatter (NCCL's
// beside the copy engines' chunks) measured apart.
constexpr int kFileVersion = 3;
// The measured numbers, in the order they are broadcast and the names they are kept under.
constexpr const char* kFields[] = {"hop_latency_us",         "hop_bytes_per_us",        "gather_latency_us",
                                   "gather_bytes_per_us",    "off_gather_latency_us",   "off_gather_bytes_per_us",
                                   "off_scatter_latency_us", "off_scatter_bytes_per_us", "gemm_flops_per_us",
                                   "gemm_half_rows",         "launch_us"};
constexpr size_t kFieldCount = sizeof kFields / sizeof kFields[0];

double* field(MachineCosts& c, size_t i) {
  double* fields[] = {&c.hop_latency_us,         &c.hop_bytes_per_us,         &c.gather_latency_us,
                      &c.gather_bytes_per_us,    &c.off_gather_latency_us,    &c.off_gather_bytes_per_us,
                      &c.off_scatter_latency_us, &c.off_scatter_bytes_per_us, &c.gemm_flops_per_us,
                      &c.gemm_half_rows,         &c.launch_us};
  return fields[i];
}

// The whole file, or an empty object where it is missing or does not parse.
nlohmann::json read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("version", 0) != kFileVersion || !j.contains("machines") ||
      !j["machines"].is_object())
    return nlohmann::json::object();
  return j;
}

// The entry for `key`, when every field is a finite number and every rate positive.
bool read_entry(const nlohmann::json& file, const std::string& key, MachineCosts& out) {
  if (!file.contains("machines") || !file["machines"].contains(key)) return false;
  const nlohmann::json& e = file["machines"][key];
  if (!e.is_object()) return false;
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (!e.contains(kFields[i]) || !e[kFields[i]].is_number()) return false;
    double v = e[kFields[i]].get<double>();
    if (!std::isfinite(v) || v < 0) return false;
    *field(out, i) = v;
  }
  return out.hop_bytes_per_us > 0 && out.gather_bytes_per_us > 0 && out.off_gather_bytes_per_us > 0 &&
         out.off_scatter_bytes_per_us > 0 && out.gemm_flops_per_us > 0;
}

void write_entry(const std::string& path, const MachineCosts& c) {
  nlohmann::json file = read_file(path);
  if (file.empty()) file = {{"version", kFileVersion}, {"machines", nlohmann::json::object()}};
  nlohmann::json entry = nlohmann::json::object();
  for (size_t i = 0; i < kFieldCount; ++i) entry[kFields[i]] = *field(const_cast<MachineCosts&>(c), i);
  file["machines"][c.key] = entry;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // written whole, then renamed over the old file: a reader never sees half of it
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return;  // a cache that cannot be written is no error: the next process measures again
    out << file.dump(2) << "\n";
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

// Times `work` on every rank of the team, started together: the slowest rank's microseconds,
// the best of `repeats` (after one untimed run).
class Timer {
 public:
  Timer(Communicator& host_team, Device device) : host_team_(host_team), device_(device) {}

  template <class Fn>
  double us(Fn&& work, int repeats = 3) {
    work();
    double best = 1e300;
    for (int i = 0; i < repeats; ++i) {
      barrier();
      auto start = std::chrono::steady_clock::now();
      work();
      synchronize();
      double mine = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count(), slowest = 0;
      host_team_.all_reduce(Tensor::borrow(&mine, Device{}, DType::f64, {1}, {1}), Tensor::borrow(&slowest, Device{}, DType::f64, {1}, {1}),
                            PartialReduce::max);
      best = std::min(best, slowest);
    }
    return best;
  }

 private:
  void synchronize() {
    backend::device_runtime(device_.kind).synchronize(device_.index);
  }
  void barrier() {
    synchronize();
    int32_t one = 1, sum = 0;
    host_team_.all_reduce(Tensor::borrow(&one, Device{}, DType::i32, {1}, {1}), Tensor::borrow(&sum, Device{}, DType::i32, {1}, {1}),
                          PartialReduce::sum);
  }

  Communicator& host_team_;
  Device device_;
};

Tensor zeros_on(Device device, DType dtype, const std::vector<int64_t>& sizes) {
  Tensor t = Tensor::empty(dtype, sizes);
  std::memset(t.data(), 0, size_t(t.numel()) * size_t(dtype_size(dtype)));
  return device.kind == DeviceKind::cpu ? t : backend::device_runtime(device.kind).to_device(t, device.index);
}

// latency + bytes / rate through two points (latency at least 0, the rate positive)
std::pair<double, double> fit(double small_bytes, double small_us, double large_bytes, double large_us) {
  double slope = std::max(large_us - small_us, 1e-3) / (large_bytes - small_bytes);  // us a byte
  return {std::max(0.0, small_us - slope * small_bytes), 1.0 / slope};
}

// What the measurement runs on, made and warmed up on each rank before any rank times anything.
struct Probes {
  Tensor send_small, recv_small, send_large, recv_large, all_small, all_large;
  // a reduce-scatter's partial sums (size() blocks of small or large bytes) and its sum (one block),
  // of the GEMMs' dtype (bf16; f32 on the CPU)
  Tensor sums_small, sum_small, sums_large, sum_large;
  std::unique_ptr<FusionExecutor> gemm, chain;  // one probe GEMM; two, the second on the first's result
  std::map<int64_t, std::vector<Tensor>> gemm_inputs;  // by rows
};

MachineCosts measure(Communicator& team, Communicator& host_team, Device device, MachineCosts c) {
  Timer timer(host_team, device);
  const bool gpu = device.kind == DeviceKind::cuda;
  // The link: sizes where latency dominates and where bandwidth does (smaller on the CPU, whose
  // numbers only serve tests: auto is off there).
  const int64_t small = 16 << 10, large = gpu ? 16 << 20 : 1 << 20;
  int n = team.size(), r = team.rank();
  // The GEMM: a probe linear at the rows where launch, ramp and rate each dominate.
  const int64_t width = gpu ? 4096 : 64;
  const int64_t tiny = 8, mid = gpu ? 256 : 16, big = gpu ? 4096 : 256;
  // Buffers, the probe and its first runs are local and can fail on one rank alone (memory, the
  // GEMM): the ranks agree on that before the first collective, so none waits for a failed one.
  Probes p;
  agree_on_step(host_team, [&] {
    p.send_small = zeros_on(device, DType::boolean, {small});
    p.recv_small = zeros_on(device, DType::boolean, {small});
    p.send_large = zeros_on(device, DType::boolean, {large});
    p.recv_large = zeros_on(device, DType::boolean, {large});
    p.all_small = zeros_on(device, DType::boolean, {small * n});
    p.all_large = zeros_on(device, DType::boolean, {large * n});
    const DType dtype = gpu ? DType::bf16 : DType::f32;
    const int64_t bytes = dtype_size(dtype);
    p.sums_small = zeros_on(device, dtype, {small / bytes * n});
    p.sum_small = zeros_on(device, dtype, {small / bytes});
    p.sums_large = zeros_on(device, dtype, {large / bytes * n});
    p.sum_large = zeros_on(device, dtype, {large / bytes});
    std::string type = gpu ? "bf16" : "f32";
    std::string head = "fusion gemm_probe(x: " + type + "[M, " + std::to_string(width) + "], w: " + type + "[" +
                       std::to_string(width) + ", " + std::to_string(width) + "]) {\n";
    ExecutorOptions options;
    options.device = gpu ? DeviceChoice::cuda : DeviceChoice::cpu;
    options.device_index = gpu ? device.index : -1;
    options.pipeline = "off";
    p.gemm = std::make_unique<FusionExecutor>(parse_fusion(head + "  y = linear(x, w)\n  return y\n}\n", "<gemm probe>"), options);
    p.chain = std::make_unique<FusionExecutor>(
        parse_fusion(head + "  y1 = linear(x, w)\n  y = linear(y1, w)\n  return y\n}\n", "<gemm chain probe>"), options);
    Tensor w = zeros_on(device, dtype, {width, width});
    for (int64_t rows : {tiny, mid, big}) {
      p.gemm_inputs[rows] = {zeros_on(device, dtype, {rows, width}), w};
      p.gemm->run(p.gemm_inputs[rows]);
      p.chain->run(p.gemm_inputs[rows]);
    }
    backend::device_runtime(device.kind).synchronize(device.index);
  }, "measuring the pipeline's costs");

  auto hop = [&](const Tensor& in, const Tensor& out) { return [&, in, out] { team.send_recv(in, (r + 1) % n, out, (r + n - 1) % n); }; };
  double t_small = timer.us(hop(p.send_small, p.recv_small)), t_large = timer.us(hop(p.send_large, p.recv_large));
  std::tie(c.hop_latency_us, c.hop_bytes_per_us) = fit(double(small), t_small, double(large), t_large);
  // the chunked form the pipelined loops use (the copy engines' where the team has them)
  auto parts = [n](const Tensor& all, int64_t bytes) { return all.as_strided({n, bytes}, {bytes, 1}, all.offset()); };
  double g_small = timer.us([&] { team.all_gather_into_parts(p.send_small, parts(p.all_small, small)); });
  double g_large = timer.us([&] { team.all_gather_into_parts(p.send_large, parts(p.all_large, large)); });
  std::tie(c.gather_latency_us, c.gather_bytes_per_us) = fit(double(small), g_small, double(large), g_large);
  // the unpipelined program's own: the team's all_gather, and its sum reduce_scatter of a block a rank
  double a_small = timer.us([&] { team.all_gather(p.send_small, p.all_small); });
  double a_large = timer.us([&] { team.all_gather(p.send_large, p.all_large); });
  std::tie(c.off_gather_latency_us, c.off_gather_bytes_per_us) = fit(double(small), a_small, double(large), a_large);
  double s_small = timer.us([&] { team.reduce_scatter(p.sums_small, p.sum_small, PartialReduce::sum); });
  double s_large = timer.us([&] { team.reduce_scatter(p.sums_large, p.sum_large, PartialReduce::sum); });
  std::tie(c.off_scatter_latency_us, c.off_scatter_bytes_per_us) = fit(double(small), s_small, double(large), s_large);

  // A GEMM's cost inside a run (what each GEMM of a pipelined loop adds): the chain of two less
  // one, so the run's own host overhead (binding, launching, the synchronization) is not counted
  // as every chunk's (at least half a microsecond: two timings' difference at tiny rows is noise).
  auto gemm_us = [&](int64_t rows) {
    double one = timer.us([&] { p.gemm->run(p.gemm_inputs[rows]); });
    double two = timer.us([&] { p.chain->run(p.gemm_inputs[rows]); });
    return std::max(two - one, 0.5);
  };
  double t_tiny = gemm_us(tiny), t_mid = std::max(gemm_us(mid), t_tiny), t_big = gemm_us(big);
  double us_a_row = std::max(t_big - t_mid, 1e-3) / double(big - mid);
  c.gemm_flops_per_us = 2.0 * double(width) * double(width) / us_a_row;
  c.launch_us = t_tiny;
  c.gemm_half_rows = std::max(0.0, (t_mid - t_tiny) / us_a_row - double(mid));
  return c;
}

std::mutex costs_mutex;
std::map<std::string, MachineCosts> costs_known;

}  // namespace

std::string machine_costs_file() {
  std::string dir = cache_dir();
  return dir.empty() ? "" : dir + "/machine_costs.json";
}

void forget_machine_costs() {
  std::lock_guard lock(costs_mutex);
  costs_known.clear();
}

MachineCosts machine_costs(Communicator& team, Communicator& host_team, Device device) {
  MachineCosts c;
  std::string device_name = backend::device_runtime(device.kind).device_name(device.index);
  c.key = device_name + ", " + team.name() + ", " + std::to_string(team.size()) + " rank" + (team.size() == 1 ? "" : "s");
  c.overlaps = device.kind == DeviceKind::cuda;
  std::lock_guard lock(costs_mutex);
  if (auto it = costs_known.find(c.key); it != costs_known.end()) return it->second;
  const bool use_file = !settings::flag("ALLOY_PIPELINE_NO_COST_CACHE");
  const std::string path = use_file ? machine_costs_file() : "";
  // rank 0 reads; every rank takes what it found (or that it found nothing) from the broadcast
  double shared[kFieldCount + 1] = {};
  if (host_team.rank() == 0 && !path.empty() && !settings::flag("ALLOY_PIPELINE_REMEASURE")) {
    MachineCosts cached = c;
    if (read_entry(read_file(path), c.key, cached)) {
      shared[0] = 1;
      for (size_t i = 0; i < kFieldCount; ++i) shared[i + 1] = *field(cached, i);
    }
  }
  host_team.broadcast(Tensor::borrow(shared, Device{}, DType::f64, {int64_t(kFieldCount + 1)}, {1}), 0);
  if (shared[0] == 1) {
    for (size_t i = 0; i < kFieldCount; ++i) *field(c, i) = shared[i + 1];
    c.source = "read from " + path;
  } else {
    c = measure(team, host_team, device, c);
    c.source = "measured now" + std::string(path.empty() ? " (no cache file)" : ", kept in " + path);
    if (host_team.rank() == 0 && !path.empty()) write_entry(path, c);
  }
  c.chunks_take_no_sms = team.lands_in_place();
  costs_known[c.key] = c;
  return c;
}

}  // namespace alloy
