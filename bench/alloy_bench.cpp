// Times Alloy on the benchmark cases on the GPU and prints one JSON object per line:
//   {"case": ..., "alloy_us": median, "min_us": ..., "bytes": ..., "runs": N}
// (N samples, each the mean of kBatch calls enqueued back to back)
// plus, for the matmul cases (issue 4: GEMMs with their epilogue, forward and backward), "flops"
// and "isolated_us": the median of N single calls, each after the GPU idled (see isolated_samples).
// bench/run_benchmarks.py times PyTorch on the same cases in the same job and prints the tables.
// Before timing, each case checks its plan (plan_problem) and its outputs against the CPU
// reference (output_problem); a case that fails either exits 1.
// usage: alloy_bench [RUNS] [CASES]   (CASES: comma-separated substrings of case names; default all)
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "alloy/backend/backend.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "backend/cuda/kernel_cases.h"  // the fusions the GPU tests specify, timed here as they are tested

using namespace alloy;

namespace {

struct Case {
  std::string name;
  std::string fusion;
  Bindings sizes;
  int64_t bytes;  // fewest bytes the fusion must move: inputs read once, outputs written once
  double flops = 0;  // matmul cases: 2 * M * N * K per GEMM
  bool cpu_fallback_expected = false;  // a case that times a cpu_fallback segment on purpose
};

// Before timing, a case checks that it times what it claims: no segment planned for the host
// (cpu_fallback) unless the case says so, and no matmul segment that cuBLASLt refused at run time
// (its fallback runs the plain GEMM or the reference matmul). Returns why not, or "".
std::string plan_problem(const Case& c, FusionExecutor& exec) {
  std::string segments = exec.dump("segments");
  if (!c.cpu_fallback_expected && segments.find("[cpu_fallback]") != std::string::npos)
    return "the plan has a cpu_fallback segment:\n" + segments;
  std::string launched = exec.dump("cuda");  // after a run: what it launched
  if (launched.find("cuBLASLt refused") != std::string::npos) return "a matmul fell back at run time:\n" + launched;
  return "";
}

// The elements of a fusion's inputs at `sizes`.
int64_t input_elements(const Fusion& f, const Bindings& sizes) {
  int64_t total = 0;
  for (const Value* in : f.inputs()) {
    int64_t n = 1;
    for (const Extent& e : in->shape()) n *= e.evaluate(sizes).value_or(1);
    total += n;
  }
  return total;
}

// Inputs up to this many elements are checked at the timed sizes (the host reference computes in
// doubles, one thread: a few seconds).
constexpr int64_t kCheckedElements = int64_t(1) << 25;

// Before timing, a case checks its outputs against the CPU reference: at the timed sizes where the
// inputs are small enough, else with each symbol cut to 512 plus its remainder by 128 (an odd
// total stays odd, a multiple of 128 stays one). Each output's relative L2 error must be within a
// few times its dtype's rounding, and NaN where the reference has NaN. Returns why not, or "" (also where a
// case cannot be checked: fixed sizes too large for the host, said on stderr).
std::string output_problem(const Case& c) {
  auto fusion = parse_fusion(c.fusion, c.name + ".fusion", std::nullopt);
  Bindings sizes = c.sizes;
  if (input_elements(*fusion, sizes) > kCheckedElements) {
    if (sizes.empty()) {
      std::fprintf(stderr, "alloy_bench: case %s: outputs not checked (fixed sizes too large for the host reference)\n", c.name.c_str());
      return "";
    }
    for (auto& [name, value] : sizes)
      if (value > 512) value = 512 + value % 128;
  }
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes, 99);
  FusionExecutor cpu(parse_fusion(c.fusion, c.name + ".fusion", std::nullopt), {DeviceChoice::cpu});
  FusionExecutor gpu(std::move(fusion), {DeviceChoice::cuda});
  // in-place outputs (`return y -> x`) write their inputs: the GPU run gets its own copy of those
  std::vector<Tensor> gpu_inputs = inputs;
  const std::vector<Value*>& targets = gpu.fusion().output_aliases();
  for (size_t i = 0; i < gpu_inputs.size(); ++i)
    if (std::find(targets.begin(), targets.end(), gpu.fusion().inputs()[i]) != targets.end()) gpu_inputs[i] = cpu_copy(inputs[i]);
  std::vector<Tensor> expected = cpu.run(inputs);
  std::vector<Tensor> actual = gpu.run(gpu_inputs);
  gpu.synchronize();
  for (size_t i = 0; i < expected.size(); ++i) {
    Tensor a = to_cpu(actual[i]), e = to_cpu(expected[i]);
    if (a.sizes() != e.sizes() || a.dtype() != e.dtype()) return "output " + std::to_string(i) + ": a different shape or dtype";
    Tensor ac = packed_cpu(a), ec = packed_cpu(e);
    double diff2 = 0, ref2 = 0;
    for (int64_t k = 0; k < a.numel(); ++k) {
      double x = load_as_double(ac.data(), ac.dtype(), k), y = load_as_double(ec.data(), ec.dtype(), k);
      if (std::isnan(y) != std::isnan(x)) return "output " + std::to_string(i) + ": NaN where the reference has none, or the reverse";
      if (std::isfinite(x) && std::isfinite(y)) {
        diff2 += (x - y) * (x - y);
        ref2 += y * y;
      }
    }
    // a check of what is timed, not of precision (the tests do that): a wrong layout or garbage
    // is off by about 1, a chain of bf16 GEMMs rounded at other points by about 1e-2
    double tol = a.dtype() == DType::bf16 ? 5e-2 : a.dtype() == DType::f16 ? 1e-2 : a.dtype() == DType::f32 ? 1e-3 : 0;
    if (std::sqrt(diff2) > tol * std::sqrt(ref2)) {
      char why[160];
      std::snprintf(why, sizeof why, "output %zu differs from the CPU reference: relative L2 error %.3g, allowed %.3g", i,
                    std::sqrt(diff2 / std::max(ref2, 1e-300)), tol);
      return why;
    }
  }
  return "";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs per timed sample: the calls of a sample are enqueued back to back, so the GPU stays busy
// and the time is the device's, not the host's launch path (measured apart: host_latency).
// bench/run_benchmarks.py times PyTorch the same way.
constexpr int kBatch = 10;

// `samples` timings (us per call, CUDA events) of kBatch back-to-back calls of `call` each.
// The GPU's runtime (device 0): allocations, copies and device timing.
const host_ir::DeviceRuntime& gpu() { return backend::device_runtime(DeviceKind::cuda); }

template <class Call>
std::vector<double> timed_samples(int samples, Call call) {
  std::vector<double> times;
  auto timer = gpu().timer(0);
  for (int i = 0; i < samples; ++i) {
    timer->start();
    for (int k = 0; k < kBatch; ++k) call();
    timer->stop();
    times.push_back(1000.0 * timer->elapsed_ms() / kBatch);
  }
  return times;
}

// Back to back, a GPU doing compute-bound work for long reaches its power limit and lowers its
// clock; then time follows energy. `samples` timings (us) of one call each, measured the other
// way: each call is enqueued while the stream is held by a host function that sleeps kHoldMs, so
// the launch path is hidden (the events time the device alone), and the GPU idles that long before
// every call, so it starts each at its full clock. bench/run_benchmarks.py times PyTorch the same
// way (torch.cuda._sleep holds its stream).
constexpr double kHoldMs = 2.0;

template <class Call>
std::vector<double> isolated_samples(int samples, Call call) {
  std::vector<double> times;
  auto timer = gpu().timer(0);
  for (int i = 0; i < samples; ++i) {
    timer->hold(kHoldMs);
    timer->start();
    call();
    timer->stop();
    times.push_back(1000.0 * timer->elapsed_ms());
  }
  return times;
}

void time_case(const Case& c, int runs) {
  if (std::string problem = output_problem(c); !problem.empty()) {
    std::fprintf(stderr, "alloy_bench: case %s: %s\n", c.name.c_str(), problem.c_str());
    std::exit(1);
  }
  auto fusion = parse_fusion(c.fusion, c.name + ".fusion", std::nullopt);
  std::vector<Tensor> given(fusion->inputs().size());
  auto inputs = complete_inputs(*fusion, given, c.sizes, 1234);
  FusionExecutor exec(std::move(fusion), {DeviceChoice::cuda});
  // tensors on the GPU, scalars (a learning rate) on the host, as a caller passes them
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!exec.fusion().inputs()[i]->is_scalar()) inputs[i] = gpu().to_device(inputs[i], 0);
  for (int i = 0; i < 5; ++i) exec.run(inputs);
  gpu().synchronize(0);
  if (std::string problem = plan_problem(c, exec); !problem.empty()) {
    std::fprintf(stderr, "alloy_bench: case %s: %s", c.name.c_str(), problem.c_str());
    std::exit(1);
  }
  std::vector<double> times = timed_samples(runs, [&] { exec.run(inputs); });
  // every case's device time alone too: for small fusions the back-to-back time is the host's
  char isolated[64];
  std::snprintf(isolated, sizeof isolated, ", \"isolated_us\": %.3f", median(isolated_samples(runs, [&] { exec.run(inputs); })));
  std::string flops = isolated;
  if (c.flops > 0) flops = ", \"flops\": " + std::to_string(int64_t(c.flops)) + isolated;
  std::printf("{\"case\": \"%s\", \"alloy_us\": %.3f, \"min_us\": %.3f, \"bytes\": %lld, \"runs\": %d%s}\n", c.name.c_str(),
              median(times), *std::min_element(times.begin(), times.end()), (long long)c.bytes, runs, flops.c_str());
  std::fflush(stdout);
}

// Device-to-device copy of 1 GiB: the bandwidth ceiling the kernels are measured against.
void time_copy(int runs) {
  int64_t n = int64_t(1) << 28;
  Tensor a = gpu().empty(DType::f32, {n}, 0), b = gpu().empty(DType::f32, {n}, 0);
  gpu().fill_poison(a);
  for (int i = 0; i < 3; ++i) gpu().copy(b, a);
  std::vector<double> times = timed_samples(runs, [&] { gpu().copy(b, a); });
  std::printf("{\"case\": \"copy\", \"alloy_us\": %.3f, \"min_us\": %.3f, \"bytes\": %lld, \"runs\": %d}\n", median(times),
              *std::min_element(times.begin(), times.end()), (long long)(2 * n * 4), runs);
}

// Host time of one cached run() of a tiny fusion: from the call to the last launch enqueued.
void time_host_latency(int runs) {
  auto fusion = parse_fusion("fusion tiny(x: f32[4]) {\n  y = add(x, 1.0)\n  return y\n}\n", "tiny.fusion", std::nullopt);
  std::vector<Tensor> given(1);
  auto inputs = complete_inputs(*fusion, given, {}, 1);
  FusionExecutor exec(std::move(fusion), {DeviceChoice::cuda});
  inputs[0] = gpu().to_device(inputs[0], 0);
  for (int i = 0; i < 100; ++i) exec.run(inputs);
  gpu().synchronize(0);
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    exec.run(inputs);
    auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (i % 256 == 255) gpu().synchronize(0);  // keep the launch queue from filling
  }
  gpu().synchronize(0);
  std::printf("{\"case\": \"host_latency\", \"alloy_us\": %.3f, \"min_us\": %.3f, \"bytes\": 0, \"runs\": %d}\n", median(times),
              *std::min_element(times.begin(), times.end()), runs);
}

// y = gelu(linear(x, w, b), tanh) in bf16, x [M, K], w [N, K]: one GEMM with the bias + GELU epilogue.
Case linear_gelu(int64_t m, int64_t k, int64_t n) {
  return {"linear_gelu_" + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n),
          R"(fusion linear_gelu(x: bf16[M, K], w: bf16[N, K], b: bf16[N]) {
  h = linear(x, w, b)
  y = gelu(h, approximate="tanh")
  return y
})",
          {{"M", m}, {"K", k}, {"N", n}},
          2 * (m * k + n * k + n + m * n),
          2.0 * double(m) * double(n) * double(k)};
}

// Issue 27's training-step fusions, written as a user writes them in primitives.
// Layer norm backward (`rms`: RMSNorm's, no mean and no bias) over N rows of D: dx from two row
// reductions, dw (and db) from column reductions of the same operands; bytes: dy and x read, dx
// written, the row statistics and the weight read, dw (db) written.
std::string norm_backward_fusion(int64_t d, bool rms) {
  std::string inv = std::to_string(1.0 / double(d));
  std::string s = "fusion norm_bwd(dy: bf16[N, " + std::to_string(d) + "], x: bf16[N, " + std::to_string(d) + "], " +
                  (rms ? std::string("") : std::string("mean: f32[N], ")) + "rstd: f32[N], w: bf16[" + std::to_string(d) + "]) {\n";
  s += "  dy32 = cast(dy, dtype=f32)\n  x32 = cast(x, dtype=f32)\n  w32 = cast(w, dtype=f32)\n  rstd2 = unsqueeze(rstd, dim=1)\n";
  if (rms) {
    s += "  xhat = mul(x32, rstd2)\n";
  } else {
    s += "  mean2 = unsqueeze(mean, dim=1)\n  xc = sub(x32, mean2)\n  xhat = mul(xc, rstd2)\n";
  }
  s += "  g = mul(dy32, w32)\n  gx = mul(g, xhat)\n  b = sum(gx, dims=[1], keepdim=true)\n  gb = mul(b, " + inv + ")\n"
       "  t1 = mul(xhat, gb)\n";
  if (rms) {
    s += "  t3 = sub(g, t1)\n";
  } else {
    s += "  a = sum(g, dims=[1], keepdim=true)\n  ga = mul(a, " + inv + ")\n  t2 = sub(g, ga)\n  t3 = sub(t2, t1)\n";
  }
  s += "  dx32 = mul(t3, rstd2)\n  dx = cast(dx32, dtype=bf16)\n  dyx = mul(dy32, xhat)\n  dw32 = sum(dyx, dims=[0])\n"
       "  dw = cast(dw32, dtype=bf16)\n";
  if (!rms) s += "  db32 = sum(dy32, dims=[0])\n  db = cast(db32, dtype=bf16)\n  return dx, dw, db\n}\n";
  else s += "  return dx, dw\n}\n";
  return s;
}

Case norm_backward(int64_t n, int64_t d, bool rms) {
  int64_t bytes = 3 * 2 * n * d + (rms ? 1 : 2) * 4 * n + 2 * d + (rms ? 1 : 2) * 2 * d;
  return {std::string(rms ? "rms_norm_backward_" : "layer_norm_backward_") + std::to_string(n) + "x" + std::to_string(d),
          norm_backward_fusion(d, rms), {{"N", n}}, bytes};
}

// Cross-entropy over a vocabulary of V for T tokens (bf16 logits, i64 targets): the forward's
// per-token loss (log-sum-exp minus the target's logit), and the backward's logits gradient from
// the saved log-sum-exp and the loss gradient ((softmax - one-hot) * g), each one pass over the logits.
Case cross_entropy_forward(int64_t t, int64_t v) {
  return {"cross_entropy_fwd_" + std::to_string(t) + "x" + std::to_string(v), R"(fusion ce(logits: bf16[T, V], target: i64[T]) {
  x = cast(logits, dtype=f32)
  m = max(x, dims=[1], keepdim=true)
  z = sub(x, m)
  e = exp(z)
  s = sum(e, dims=[1], keepdim=true)
  ls = log(s)
  lse = add(ls, m)
  tg = unsqueeze(target, dim=1)
  xt = gather(x, tg, dim=1)
  l2 = sub(lse, xt)
  loss = squeeze(l2, dims=[1])
  return loss
}
)",
          {{"T", t}, {"V", v}}, 2 * t * v + 8 * t + 4 * t};
}

Case cross_entropy_backward(int64_t t, int64_t v) {
  return {"cross_entropy_bwd_" + std::to_string(t) + "x" + std::to_string(v), std::string(testing::kCrossEntropyGradient) + "\n",
          {{"T", t}, {"V", v}}, 2 * 2 * t * v + 16 * t};
}

// The MLP backward of examples/mlp_backward.fusion at width C, hidden H, T tokens: four GEMMs.
Case mlp_backward(int64_t t, int64_t c, int64_t h) {
  return {"mlp_backward_" + std::to_string(t) + "x" + std::to_string(c) + "x" + std::to_string(h),
          R"(fusion mlp_backward(dy: bf16[T, C], x: bf16[T, C], h: bf16[T, H], g: bf16[T, H],
                    w_fc: bf16[H, C], w_proj: bf16[C, H]) {
  dy_t = permute(dy, dims=[1, 0])
  dw_proj = matmul(dy_t, g)
  db_proj = sum(dy, dims=[0])
  dg = matmul(dy, w_proj)
  dh = gelu_backward(dg, h, approximate="tanh")
  db_fc = sum(dh, dims=[0])
  dh_t = permute(dh, dims=[1, 0])
  dw_fc = matmul(dh_t, x)
  dx = matmul(dh, w_fc)
  return dx, dw_fc, db_fc, dw_proj, db_proj
})",
          {{"T", t}, {"C", c}, {"H", h}},
          // read dy, x, h, g, both weights; write dx, both weight gradients, both bias gradients
          2 * (2 * t * c + 2 * t * h + 2 * h * c + t * c + 2 * h * c + h + c),
          4 * 2.0 * double(t) * double(c) * double(h)};
}

// The MLP backward's GEMMs one at a time (bwd_gemm_*), to see where its time goes.
std::vector<Case> mlp_backward_gemms(int64_t t, int64_t c, int64_t h) {
  const Bindings sizes = {{"T", t}, {"C", c}, {"H", h}};
  const double flops = 2.0 * double(t) * double(c) * double(h);
  auto gemm = [&](const std::string& name, const std::string& body, int64_t bytes) {
    return Case{"bwd_gemm_" + name, body, sizes, bytes, flops};
  };
  return {
      gemm("dw_proj", "fusion f(dy: bf16[T, C], g: bf16[T, H]) {\n  dy_t = permute(dy, dims=[1, 0])\n  d = matmul(dy_t, g)\n  return d\n}\n",
           2 * (t * c + t * h + c * h)),
      gemm("dg", "fusion f(dy: bf16[T, C], w: bf16[C, H]) {\n  d = matmul(dy, w)\n  return d\n}\n", 2 * (t * c + c * h + t * h)),
      gemm("dg_dgelu",
           "fusion f(dy: bf16[T, C], w: bf16[C, H], h: bf16[T, H]) {\n  dg = matmul(dy, w)\n"
           "  d = gelu_backward(dg, h, approximate=\"tanh\")\n  return d\n}\n",
           2 * (t * c + c * h + 2 * t * h)),
      gemm("dw_fc", "fusion f(dh: bf16[T, H], x: bf16[T, C]) {\n  dh_t = permute(dh, dims=[1, 0])\n  d = matmul(dh_t, x)\n  return d\n}\n",
           2 * (t * h + t * c + h * c)),
      gemm("dx", "fusion f(dh: bf16[T, H], w: bf16[H, C]) {\n  d = matmul(dh, w)\n  return d\n}\n", 2 * (t * h + h * c + t * c)),
  };
}

}  // namespace

// Issue 27, many tensors in one launch: the AdamW step of examples/adam_step.fusion over GPT-2
// small's parameters as nanoGPT lists them (wte, wpe, then 12 layers of ln_1, c_attn, c_proj,
// ln_2, c_fc and c_proj weights and biases, then ln_f: 148 tensors, 124M elements, from the
// 50257 x 768 embedding to biases of 768), each parameter its own chain on its own p, g, m and v,
// all sharing lr, wd, bc1 and bc2: one multi-tensor launch. The sizes are symbols (V, T, C, C3 =
// 3C, C4 = 4C) so that the output check can cut them. bench/run_benchmarks.py times
// torch._fused_adamw_ over the same list. `two_groups`: PyTorch's usual two parameter groups, the
// matrices decaying with their own lr_d and wd_d, the biases and norm weights reading lr_n and wd_n
// (still one launch: each member's table entry holds its own lr and wd).
Case adam_step_gpt2(bool two_groups = false) {
  const int64_t v = 50257, t = 1024, c = 768;
  std::vector<std::pair<std::string, int64_t>> shapes = {{"V, C", v * c}, {"T, C", t * c}};
  for (int layer = 0; layer < 12; ++layer)
    for (auto& shape : std::vector<std::pair<std::string, int64_t>>{{"C", c}, {"C", c}, {"C3, C", 3 * c * c}, {"C3", 3 * c},
                                                                    {"C, C", c * c}, {"C", c}, {"C", c}, {"C", c},
                                                                    {"C4, C", 4 * c * c}, {"C4", 4 * c}, {"C, C4", 4 * c * c}, {"C", c}})
      shapes.push_back(shape);
  shapes.push_back({"C", c});
  shapes.push_back({"C", c});
  std::string params, body, results;
  int64_t elements = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string n = std::to_string(i), type = "f32[" + shapes[i].first + "]";
    elements += shapes[i].second;
    for (const char* x : {"p", "g", "m", "v"}) params += std::string(x) + "_" + n + ": " + type + ", ";
    const std::string lines[] = {
        "m_kept = mul(m, 0.9)", "g_part = mul(g, 0.1)", "m2 = add(m_kept, g_part)", "g_sq = mul(g, g)", "v_kept = mul(v, 0.999)",
        "g_sq_part = mul(g_sq, 0.001)", "v2 = add(v_kept, g_sq_part)", "m_hat = div(m2, bc1)", "v_hat = div(v2, bc2)",
        "root = sqrt(v_hat)", "denom = add(root, 1e-8)", "ratio = div(m_hat, denom)", "step = mul(ratio, lr)", "lr_wd = mul(lr, wd)",
        "keep = sub(1.0, lr_wd)", "p_decayed = mul(p, keep)", "p2 = sub(p_decayed, step)"};
    for (std::string line : lines) {  // every name but the shared scalars gets the parameter's number
      std::string numbered;
      for (size_t at = 0; at < line.size();) {
        size_t end = at;
        while (end < line.size() && (std::isalnum((unsigned char)line[end]) || line[end] == '_')) ++end;
        if (end == at) {
          numbered += line[at++];
          continue;
        }
        std::string word = line.substr(at, end - at);
        bool name = std::isalpha((unsigned char)word[0]) && word != "lr" && word != "wd" && word != "bc1" && word != "bc2" &&
                    line.compare(end, 1, "(") != 0;
        const bool matrix = shapes[i].first.find(',') != std::string::npos;
        if (two_groups && (word == "lr" || word == "wd")) word += matrix ? "_d" : "_n";
        numbered += name ? word + "_" + n : word;
        at = end;
      }
      body += "  " + numbered + "\n";
    }
    results += std::string(i ? ", " : "") + "p2_" + n + " -> p_" + n + ", m2_" + n + " -> m_" + n + ", v2_" + n + " -> v_" + n;
  }
  const std::string scalars = two_groups ? "lr_d: f32, wd_d: f32, lr_n: f32, wd_n: f32, " : "lr: f32, wd: f32, ";
  std::string text = "fusion adam_step_gpt2(" + params + scalars + "bc1: f32, bc2: f32) {\n" + body + "  return " + results + "\n}\n";
  return {two_groups ? "adam_step_gpt2_two_groups_150" : "adam_step_gpt2_150", text, {{"V", v}, {"T", t}, {"C", c}, {"C3", 3 * c}, {"C4", 4 * c}},
          7 * 4 * elements};
}

// A crash says where: the stack on stderr (function names through -rdynamic), then the signal's
// own end (run_benchmarks.py reports the exit code).
void print_stack_and_die(int signal) {
  void* frames[64];
  int n = backtrace(frames, 64);
  const char what[] = "alloy_bench: fatal signal, stack:\n";
  (void)!write(2, what, sizeof what - 1);
  backtrace_symbols_fd(frames, n, 2);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// "a,b,,c" -> {"a", "b", "c"}
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) parts.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

int main(int argc, char** argv) {
  std::signal(SIGSEGV, print_stack_and_die);
  std::signal(SIGBUS, print_stack_and_die);
  std::signal(SIGABRT, print_stack_and_die);
  if (!gpu().available()) {
    std::fprintf(stderr, "alloy_bench: no GPU (%s)\n", gpu().unavailable_reason().c_str());
    return 1;
  }
  int runs = 100;
  if (argc > 1) {
    char* end = nullptr;
    long n = std::strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || n < 1 || n > 1000000) {
      std::fprintf(stderr, "usage: alloy_bench [RUNS] [CASES]: RUNS must be a whole number from 1 to 1000000, got '%s'\n", argv[1]);
      return 2;
    }
    runs = int(n);
  }
  // run only the cases whose name contains one of these comma-separated strings
  std::string only = argc > 2 ? argv[2] : "";
  const int64_t big = 8192;
  std::vector<Case> cases = {
      {"layer_norm_nanogpt",
       R"(fusion ln(x: bf16[16, 128, 1600], weight: bf16[1600], bias: bf16[1600]) {
  x32 = cast(x, dtype=f32)
  var, mean = var_mean(x32, dims=[2], correction=0, keepdim=false)
  mean_b = broadcast_in_dim(mean, shape=[16, 128, 1], broadcast_dims=[0, 1])
  var_b = broadcast_in_dim(var, shape=[16, 128, 1], broadcast_dims=[0, 1])
  var_eps = add(var_b, 1.0e-5)
  rstd = rsqrt(var_eps)
  mean_full = broadcast_in_dim(mean_b, shape=[16, 128, 1600], broadcast_dims=[0, 1, 2])
  centered = sub(x32, mean_full)
  rstd_full = broadcast_in_dim(rstd, shape=[16, 128, 1600], broadcast_dims=[0, 1, 2])
  normed = mul(centered, rstd_full)
  weight_full = broadcast_in_dim(weight, shape=[16, 128, 1600], broadcast_dims=[2])
  weight32 = cast(weight_full, dtype=f32)
  scaled = mul(normed, weight32)
  bias_full = broadcast_in_dim(bias, shape=[16, 128, 1600], broadcast_dims=[2])
  bias32 = cast(bias_full, dtype=f32)
  shifted = add(scaled, bias32)
  y = cast(shifted, dtype=bf16)
  return y
})",
       {}, 2 * 16 * 128 * 1600 * 2},
      {"layer_norm_8192",
       "fusion ln(x: bf16[N, D], w: bf16[D], b: bf16[D]) {\n  y = layer_norm(x, w, b, normalized_ndim=1, eps=1e-5)\n  return y\n}\n",
       {{"N", big}, {"D", big}}, 2 * big * big * 2},
      {"softmax_8192", "fusion sm(x: bf16[N, D]) {\n  y = softmax(x, dim=-1)\n  return y\n}\n", {{"N", big}, {"D", big}},
       2 * big * big * 2},
      {"rms_norm_8192", "fusion rms(x: bf16[N, D], w: bf16[D]) {\n  y = rms_norm(x, w, normalized_ndim=1, eps=1e-6)\n  return y\n}\n",
       {{"N", big}, {"D", big}}, 2 * big * big * 2},
      {"gelu_chain_2e28",
       "fusion chain(a: bf16[N], b: bf16[N], c: bf16[N]) {\n  m = mul(a, b)\n  s = add(m, c)\n  y = gelu(s)\n  return y\n}\n",
       {{"N", int64_t(1) << 28}}, 4 * (int64_t(1) << 28) * 2},
  };
  // Issue 17's held-out QKV split + rotary embedding (Llama-2-13b: batch 2, seq 4096, 40 heads of
  // 128): slices, reshape and permute are views; rotate-half is a cat; bytes: q and k read once,
  // written once (v is a view)
  cases.push_back({"qkv_rope_llama13b", R"(fusion qkv_rope(qkv: bf16[2, 4096, 15360], cos: bf16[4096, 128], sin: bf16[4096, 128]) {
  q = slice(qkv, starts=[0, 0, 0], ends=[2, 4096, 5120])
  k = slice(qkv, starts=[0, 0, 5120], ends=[2, 4096, 10240])
  v = slice(qkv, starts=[0, 0, 10240], ends=[2, 4096, 15360])
  q4 = reshape(q, shape=[2, 4096, 40, 128])
  k4 = reshape(k, shape=[2, 4096, 40, 128])
  qh = permute(q4, dims=[0, 2, 1, 3])
  kh = permute(k4, dims=[0, 2, 1, 3])
  q1 = slice(qh, starts=[0, 0, 0, 0], ends=[2, 40, 4096, 64])
  q2 = slice(qh, starts=[0, 0, 0, 64], ends=[2, 40, 4096, 128])
  k1 = slice(kh, starts=[0, 0, 0, 0], ends=[2, 40, 4096, 64])
  k2 = slice(kh, starts=[0, 0, 0, 64], ends=[2, 40, 4096, 128])
  nq2 = neg(q2)
  nk2 = neg(k2)
  q_rot = cat(nq2, q1, dim=3)
  k_rot = cat(nk2, k1, dim=3)
  q_cos = mul(qh, cos)
  q_sin = mul(q_rot, sin)
  q_out = add(q_cos, q_sin)
  k_cos = mul(kh, cos)
  k_sin = mul(k_rot, sin)
  k_out = add(k_cos, k_sin)
  return q_out, k_out, v
}
)",
                   {}, 2 * 2 * 4096 * 10240 * 2});
  // Issue 17's held-out layouts and sizes: a transposed operand (a tile transpose), layer norm
  // over the non-contiguous axis, a row width and a total the vector does not divide
  cases.push_back({"transpose_add_8192",
                   "fusion ta(x: bf16[N, N], z: bf16[N, N]) {\n  zt = permute(z, dims=[1, 0])\n  s = mul(zt, 2.0)\n  y = add(x, s)\n"
                   "  return y\n}\n",
                   {{"N", big}}, 3 * big * big * 2});
  cases.push_back({"layer_norm_permuted_4096x8192",
                   "fusion lnp(x: bf16[4096, 8192], w: bf16[4096], b: bf16[4096]) {\n  xt = permute(x, dims=[1, 0])\n"
                   "  y = layer_norm(xt, w, b, normalized_ndim=1, eps=1e-5)\n  return y\n}\n",
                   {}, 2 * 4096 * 8192 * 2});
  cases.push_back({"logsumexp_8192x50257", R"(fusion lse(x: bf16[8192, 50257]) {
  x32 = cast(x, dtype=f32)
  m = max(x32, dims=[1], keepdim=true)
  d = sub(x32, m)
  e = exp(d)
  s = sum(e, dims=[1])
  l = log(s)
  ms = squeeze(m, dims=[1])
  y = add(l, ms)
  o = cast(y, dtype=bf16)
  return o
}
)",
                   {}, 8192 * 50257 * 2 + 8192 * 2});
  cases.push_back({"gelu_chain_1e8p3",
                   "fusion chain(a: bf16[N], b: bf16[N], c: bf16[N]) {\n  m = mul(a, b)\n  s = add(m, c)\n  y = gelu(s)\n  return y\n}\n",
                   {{"N", 100000003}}, 4 * int64_t(100000003) * 2});
  // Issue 27's grid reductions: a gradient norm (the squares of 10^8 bf16 summed in f32, and the
  // root; against torch.linalg.vector_norm(x, dtype=torch.float32)), and var_mean of 4 rows of 25M
  // over the long axis (against torch.var_mean)
  cases.push_back({"grad_norm_1e8", R"(fusion gn(x: bf16[N]) {
  x32 = cast(x, dtype=f32)
  sq = mul(x32, x32)
  s = sum(sq)
  n = sqrt(s)
  return n
}
)",
                   {{"N", 100000000}}, int64_t(100000000) * 2 + 4});
  cases.push_back({"var_mean_rows_4x25m", "fusion vm(x: bf16[R, N]) {\n  v, m = var_mean(x, dims=[1])\n  return v, m\n}\n",
                   {{"R", 4}, {"N", 25000000}}, int64_t(4) * 25000000 * 2 + 4 * 2 * 2});
  const std::array<int64_t, 3> gemm_shapes[] = {{{2048, 1600, 6400}}, {{8192, 4096, 11008}}, {{16384, 8192, 8192}}};
  for (const auto& [m, k, n] : gemm_shapes) cases.push_back(linear_gelu(m, k, n));
  cases.push_back(mlp_backward(8192, 1600, 6400));
  for (Case& c : mlp_backward_gemms(8192, 1600, 6400)) cases.push_back(c);
  // single-pass reductions over the outer axis (bias gradients): column kernels
  const int64_t t = 8192, h = 6400;
  cases.push_back({"column_sum_8192x6400", "fusion cs(x: bf16[T, H]) {\n  s = sum(x, dims=[0])\n  return s\n}\n",
                   {{"T", t}, {"H", h}}, 2 * t * h + 2 * h});
  cases.push_back({"gelu_backward_bgrad_8192x6400",
                   "fusion gb(g: bf16[T, H], x: bf16[T, H]) {\n  d = gelu_backward(g, x, approximate=\"tanh\")\n"
                   "  db = sum(d, dims=[0])\n  return d, db\n}\n",
                   {{"T", t}, {"H", h}}, 3 * 2 * t * h + 2 * h});
  // Issue 27: the AdamW step in place (examples/adam_step.fusion): one kernel reads p, g, m and v
  // and writes p, m and v, 28 bytes an element; the bar is 90% of the copy's bandwidth
  const int64_t adam_n = int64_t(1) << 28;
  cases.push_back({"adam_step_2e28", R"(fusion adam_step(p: f32[N], g: f32[N], m: f32[N], v: f32[N], lr: f32, wd: f32, bc1: f32, bc2: f32) {
  m_kept = mul(m, 0.9)
  g_part = mul(g, 0.1)
  m2 = add(m_kept, g_part)
  g_sq = mul(g, g)
  v_kept = mul(v, 0.999)
  g_sq_part = mul(g_sq, 0.001)
  v2 = add(v_kept, g_sq_part)
  m_hat = div(m2, bc1)
  v_hat = div(v2, bc2)
  root = sqrt(v_hat)
  denom = add(root, 1e-8)
  ratio = div(m_hat, denom)
  step = mul(ratio, lr)
  lr_wd = mul(lr, wd)
  keep = sub(1.0, lr_wd)
  p_decayed = mul(p, keep)
  p2 = sub(p_decayed, step)
  return p2 -> p, m2 -> m, v2 -> v
}
)",
                   {{"N", adam_n}}, 7 * 4 * adam_n});
  // Issue 27: norm backwards (GPT-2 small's width at 32k tokens, a 7B's at 8k), cross-entropy at
  // three vocabularies, SwiGLU over a fused gate/up projection (two slices of one input at the edge)
  for (bool rms : {false, true}) {
    cases.push_back(norm_backward(8192, 4096, rms));
    cases.push_back(norm_backward(32768, 768, rms));
  }
  // ALLOY_BENCH_NORM_ROWS=132,264,...: the layer norm backward over 4096 columns at those rows too
  // (scripts/gpu-ab inner_outer_rows: an inner-outer launch's fixed part and its time a row)
  if (const char* rows = std::getenv("ALLOY_BENCH_NORM_ROWS"))
    for (const std::string& n : split_list(rows)) cases.push_back(norm_backward(std::stoll(n), 4096, false));
  // ALLOY_BENCH_NORM_SHAPES=layer:4096x16384,rms:8192x12288,...: norm backwards (bf16) at those rows
  // x widths too (bench/run_benchmarks.py reads the same list for PyTorch's side)
  if (const char* shapes = std::getenv("ALLOY_BENCH_NORM_SHAPES"))
    for (const std::string& entry : split_list(shapes)) {
      const size_t colon = entry.find(':'), x = entry.find('x', colon);
      if (colon == std::string::npos || x == std::string::npos)
        throw std::runtime_error("ALLOY_BENCH_NORM_SHAPES: '" + entry + "' is not layer:RxD or rms:RxD");
      cases.push_back(norm_backward(std::stoll(entry.substr(colon + 1, x - colon - 1)), std::stoll(entry.substr(x + 1)),
                                    entry.substr(0, colon) == "rms"));
    }
  // ALLOY_BENCH_SOFTMAX_SHAPES=bf16:8192x50257,f32:4096x32000,...: softmax over the rows' last
  // axis at those sizes (vocabularies: rows a block of 1024 threads holds in registers or reads again)
  if (const char* shapes = std::getenv("ALLOY_BENCH_SOFTMAX_SHAPES"))
    for (const std::string& entry : split_list(shapes)) {
      const size_t colon = entry.find(':'), x = entry.find('x', colon);
      if (colon == std::string::npos || x == std::string::npos)
        throw std::runtime_error("ALLOY_BENCH_SOFTMAX_SHAPES: '" + entry + "' is not DTYPE:RxV");
      const std::string dtype = entry.substr(0, colon);
      const int64_t rows = std::stoll(entry.substr(colon + 1, x - colon - 1)), width = std::stoll(entry.substr(x + 1));
      cases.push_back({"softmax_" + dtype + "_" + std::to_string(rows) + "x" + std::to_string(width),
                       "fusion sm(x: " + dtype + "[R, V]) {\n  y = softmax(x, dim=1)\n  return y\n}\n",
                       {{"R", rows}, {"V", width}}, 2 * rows * width * (dtype == "f32" ? 4 : 2)});
    }
  for (int64_t v : {int64_t(32000), int64_t(50257), int64_t(128256)}) {
    cases.push_back(cross_entropy_forward(8192, v));
    cases.push_back(cross_entropy_backward(8192, v));
  }
  cases.push_back({"swiglu_slices_8192x11008", R"(fusion swiglu(gu: bf16[T, 22016]) {
  gate = slice(gu, starts=[0, 0], ends=[2147483647, 11008])
  up = slice(gu, starts=[0, 11008], ends=[2147483647, 22016])
  s = silu(gate)
  y = mul(s, up)
  return y
}
)",
                   {{"T", 8192}}, 3 * 2 * int64_t(8192) * 11008});
  cases.push_back(adam_step_gpt2());
  cases.push_back(adam_step_gpt2(true));
  time_copy(runs);
  auto wanted = [&](const std::string& name) {
    if (only.empty()) return true;
    for (const std::string& part : split_list(only))
      if (name.find(part) != std::string::npos) return true;
    return false;
  };
  for (auto& c : cases)
    if (wanted(c.name)) time_case(c, runs);
  if (only.empty() || wanted("host_latency")) time_host_latency(20000);
  return 0;
}
