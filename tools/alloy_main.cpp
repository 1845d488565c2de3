// The `alloy` command-line program: run, check, print and compile .fusion files. Exit codes:
// 0 success, 1 a user error (bad file, bad input), 2 a usage error, 3 an internal error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"
#include "alloy/ir/fusion.h"
#include "alloy/backend/backend.h"
#include "alloy/common/files.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "alloy/multidevice/agreement.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/multidevice/shards.h"
#include "alloy/passes/sharding/propagate_sharding.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/tensor/npy.h"
#include "alloy/pipeline/pipeline.h"
#include "alloy/runtime/run_inputs.h"
#include "alloy/runtime/trace_file.h"

namespace alloy {
namespace {

namespace fs = std::filesystem;

// A malformed argument that CLI11 could not check itself (`--bind B=x`): exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};


struct RunOptions {
  std::string file;
  std::string fusion_name;
  std::vector<std::string> inputs;  // NAME=PATH.npy
  std::vector<std::string> binds;   // SYM=N or INPUT.AXIS=N
  int64_t seed = 0;
  std::string device = "auto";
  std::string pipeline = "auto";
  std::string agreement = "every_run";
  std::string save_dir;
  std::vector<std::string> dumps;
  int bench = 0;
  std::string trace;  // a Chrome trace-event file of the last run (--trace)
};

// ---- reading and choosing fusions ---------------------------------------------------------

std::string read_source(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) user_error_at(path, "is a directory; expected a .fusion file");
  // a .fusion file is text a person writes: 64 MiB is far beyond any, and bounds what is read
  return read_regular_file(path, size_t(64) << 20, ".fusion file");
}

std::string fusion_names(const std::vector<std::unique_ptr<Fusion>>& fusions) {
  std::string names;
  for (auto& f : fusions) names += (names.empty() ? "" : ", ") + f->name();
  return names;
}

std::unique_ptr<Fusion> choose_fusion(std::vector<std::unique_ptr<Fusion>> fusions, const std::string& name,
                                      const std::string& file) {
  if (fusions.empty()) user_error_at(file, "holds no fusion");
  if (name.empty()) return std::move(fusions.front());  // like parse_fusion: the first one
  for (auto& f : fusions)
    if (f->name() == name) return std::move(f);
  user_error_at(file, "has no fusion named '", name, "'; it holds ", fusion_names(fusions));
}

// ---- alloy check: every error, one fusion at a time, every failed statement within it -----

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Where each top-level `fusion` keyword starts (outside comments, strings and braces).
std::vector<size_t> fusion_starts(std::string_view text) {
  std::vector<size_t> starts;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '"') {
      while (++i < text.size() && text[i] != '"' && text[i] != '\n') {}
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      depth = std::max(0, depth - 1);
    } else if (depth == 0 && text.substr(i, 6) == "fusion" && (i == 0 || !is_name_char(text[i - 1])) &&
               (i + 6 == text.size() || !is_name_char(text[i + 6]))) {
      starts.push_back(i);
      i += 5;
    }
  }
  return starts;
}

// The errors of each fusion of `text` parsed alone. Everything outside the fusion is blanked
// (newlines kept), so the parser's line:col positions stay those of the whole file.
std::vector<std::string> errors_per_fusion(const std::string& text, const std::string& file) {
  std::vector<size_t> starts = fusion_starts(text);
  if (starts.empty()) starts.push_back(0);
  starts.front() = 0;  // text before the first fusion belongs to it
  starts.push_back(text.size());
  std::vector<std::string> errors;
  for (size_t k = 0; k + 1 < starts.size(); ++k) {
    std::string alone = text;
    for (size_t i = 0; i < alone.size(); ++i)
      if ((i < starts[k] || i >= starts[k + 1]) && alone[i] != '\n') alone[i] = ' ';
    for (std::string& e : check_fusions(alone, file)) errors.push_back(std::move(e));
  }
  return errors;
}

std::string count(size_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

int check_command(const std::string& file) {
  std::string text = read_source(file);
  std::vector<std::unique_ptr<Fusion>> fusions;
  std::string whole_error;
  try {
    fusions = parse_fusions(text, file);
  } catch (const UserError& e) {
    whole_error = e.what();
  }
  // what `run` refuses before it plans, `check` refuses too: the sharding of a fusion with a mesh
  // (a collective stated in the text, annotations on different meshes) is decided by its first pass
  for (auto& f : fusions) {
    if (!whole_error.empty()) break;
    try {
      propagate_sharding(*f);
    } catch (const UserError& e) {
      whole_error = e.what();
    }
  }
  if (whole_error.empty()) {
    if (fusions.empty()) user_error_at(file, "holds no fusion");
    for (auto& f : fusions)
      std::cout << file << ": fusion " << f->name() << ": " << count(f->inputs().size(), "input") << ", "
                << count(f->ops().size(), "op") << ", " << count(f->outputs().size(), "output") << ": ok\n";
    return 0;
  }
  std::vector<std::string> errors = errors_per_fusion(text, file);
  if (std::find(errors.begin(), errors.end(), whole_error) == errors.end()) errors.insert(errors.begin(), whole_error);
  for (const std::string& e : errors) std::cerr << e << "\n";
  std::cerr << count(errors.size(), "error") << " in " << file << "\n";
  return 1;
}

int print_command(const std::string& file, const std::string& name) {
  std::string text = read_source(file);
  auto fusions = parse_fusions(text, file);
  if (fusions.empty()) user_error_at(file, "holds no fusion");
  std::vector<const Fusion*> chosen;
  for (auto& f : fusions)
    if (name.empty() || f->name() == name) chosen.push_back(f.get());
  if (chosen.empty()) user_error_at(file, "has no fusion named '", name, "'; it holds ", fusion_names(fusions));
  std::cout << print_fusions(chosen);
  return 0;
}

// Generates and compiles every kernel of every fusion in the file for `arch`; no GPU needed.
std::vector<SizeRequest> parse_binds(const std::vector<std::string>& binds);

// With --bind, only the variant the runtime would launch for contiguous inputs of those sizes.
// --dump segments|program print the CUDA plan (as a run on a GPU makes it) before the kernels are
// compiled; --dump cuda prints the kernels' source instead of the report.
int compile_command(const std::string& file, const std::string& arch, const std::vector<std::string>& dumps,
                    const std::vector<std::string>& binds) {
  auto fusions = parse_fusions(read_source(file), file);
  std::vector<SizeRequest> requests = parse_binds(binds);
  bool dump_cuda = std::find(dumps.begin(), dumps.end(), "cuda") != dumps.end();
  for (auto& fusion : fusions) {
    std::optional<Bindings> sizes;
    if (!requests.empty()) sizes = resolve_input_sizes(*fusion, std::vector<Tensor>(fusion->inputs().size()), requests);
    for (const std::string& stage : dumps)
      if (stage != "cuda")
        std::cout << "== dump " << stage << " (cuda): " << (stage == "segments" ? "the fusion after the passes, cut into segments" : "the host program that runs the segments")
                  << "\n" << settings::dump_note() << offline_dump(*fusion, stage, sizes ? &*sizes : nullptr);
    if (!dump_cuda) std::cout << "fusion " << fusion->name() << ":\n";
    std::cout << compile_offline(*fusion, arch, dump_cuda, sizes ? &*sizes : nullptr);
  }
  return 0;
}

// ---- alloy run ----------------------------------------------------------------------------

std::pair<std::string, std::string> split_assignment(const std::string& arg, const char* option, const char* form) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
    throw UsageError(std::string(option) + " " + arg + ": expected " + form);
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

std::vector<SizeRequest> parse_binds(const std::vector<std::string>& binds) {
  std::vector<SizeRequest> out;
  for (const std::string& arg : binds) {
    auto [name, text] = split_assignment(arg, "--bind", "SYMBOL=N (or INPUT.AXIS=N for an axis declared ?)");
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
      throw UsageError("--bind " + arg + ": expected an integer size after '=', found '" + text + "'");
    out.emplace_back(name, value);
  }
  return out;
}

// A file given for a scalar input: converted by value (scalars carry no dtype of their own), a
// value the declared dtype holds: an integer (or an integral float) within its range, 0 or 1 for a
// bool, a float that does not round past the largest finite one; else an error, as for tensors.
Tensor convert_scalar(const Tensor& t, DType declared, const std::string& name) {
  if (t.dtype() == declared || t.numel() != 1) return t;
  Tensor out = Tensor::empty(declared, t.sizes());
  const double value = load_as_double(t.data(), t.dtype(), 0);
  auto number_text = [](double x) {
    std::ostringstream text;
    text << x;
    return text.str();
  };
  auto refuse = [&](const std::string& text, const std::string& why) {
    user_error_at("input '" + name + "'", "expected ", declared == DType::boolean || declared == DType::bf16 ? "a " : "an ", dtype_name(declared),
                  " value, found ", text, " (the ", dtype_name(t.dtype()), " file), ", why);
  };
  if (is_floating(declared)) {
    store_double(out.data(), declared, 0, value);
    if (std::isfinite(value) && !std::isfinite(load_as_double(out.data(), declared, 0)))
      refuse(number_text(value), "past the largest finite " + std::string(dtype_name(declared)));
    return out;
  }
  int64_t integer = 0;
  if (is_floating(t.dtype())) {
    if (!std::isfinite(value) || value != std::trunc(value) || std::fabs(value) >= 9.2e18)
      refuse(number_text(value), "which is not an integer");
    integer = int64_t(value);
  } else {
    integer = load_as_int(t.data(), t.dtype(), 0);
  }
  if (declared == DType::boolean && integer != 0 && integer != 1) refuse(std::to_string(integer), "which is not 0 or 1");
  if (declared == DType::i32 && (integer < std::numeric_limits<int32_t>::min() || integer > std::numeric_limits<int32_t>::max()))
    refuse(std::to_string(integer), "which does not fit");
  store_int(out.data(), declared, 0, integer);
  return out;
}

// The tensors read from --input files, in declaration order (undefined where not given), and
// for each input where its values come from.
std::vector<Tensor> read_given_inputs(const Fusion& fusion, const std::vector<std::string>& args,
                                      std::vector<std::string>& sources) {
  const auto& decls = fusion.inputs();
  std::vector<Tensor> given(decls.size());
  sources.assign(decls.size(), "");  // empty: drawn at random
  for (const std::string& arg : args) {
    auto [name, path] = split_assignment(arg, "--input", "NAME=PATH.npy");
    auto it = std::find_if(decls.begin(), decls.end(), [&](Value* v) { return v->name == name; });
    if (it == decls.end()) {
      std::string names;
      for (Value* v : decls) names += (names.empty() ? "" : ", ") + v->name;
      user_error_at("--input " + arg, "fusion '", fusion.name(), "' has no input named '", name, "'; its inputs are ", names);
    }
    size_t i = size_t(it - decls.begin());
    if (given[i].defined()) user_error_at("--input " + arg, "input '", name, "' is given twice");
    Tensor t = read_npy(path);
    given[i] = (*it)->is_scalar() ? convert_scalar(t, (*it)->dtype(), name) : convert_for_input(t, (*it)->dtype(), name);
    sources[i] = path;
  }
  return given;
}

DeviceChoice device_choice(const std::string& name) {
  if (name == "cpu") return DeviceChoice::cpu;
  if (name == "cuda") return DeviceChoice::cuda;
  return DeviceChoice::automatic;
}

std::string bindings_text(const Fusion& fusion, const Bindings& bindings) {
  std::string out;
  for (const std::string& s : fusion.input_symbols()) {
    auto it = bindings.find(s);
    if (it == bindings.end() || (!s.empty() && s[0] == '?')) continue;
    out += " " + s + "=" + std::to_string(it->second);
  }
  return out;
}

// Where the run will write (--save-outputs DIR, --trace FILE), checked before it runs: a place it
// cannot write is an error now, not after a long run.
void check_output_places(const RunOptions& opts, const Fusion& fusion) {
  std::error_code ec;
  if (!opts.save_dir.empty()) {
    fs::create_directories(opts.save_dir, ec);
    if (ec || !fs::is_directory(opts.save_dir) || ::access(opts.save_dir.c_str(), W_OK) != 0)
      user_error_at("--save-outputs " + opts.save_dir, "cannot write into the directory",
                    ec ? ": " + ec.message() : std::string(" (not a writable directory)"));
    // the files it will hold: NAME.npy (the printing rank's global values), NAME.rankK.npy (each
    // rank's part, in a job of several)
    for (const Value* out : fusion.outputs()) {
      std::vector<std::string> names{out->name + ".npy"};
      if (multidevice::process().size > 1) names.push_back(out->name + ".rank" + std::to_string(multidevice::process().rank) + ".npy");
      for (const std::string& name : names)
        if (std::string why = why_unwritable((fs::path(opts.save_dir) / name).string()); !why.empty())
          user_error_at("--save-outputs " + opts.save_dir, "cannot write ", name, ": ", why);
    }
  }
  if (!opts.trace.empty())
    if (std::string why = why_unwritable(opts.trace); !why.empty()) user_error_at("--trace " + opts.trace, "cannot write the file: ", why);
}

// Runs `step`, then, in a job of several, agrees on how it went: a failure there (on one rank or
// on all) is the whole job's, told once, every rank stopping at the agreement rather than
// printing it each or aborting the job from the next collective. `what` names the step.
template <class Step>
void agreed_step(const char* what, Step&& step) {
  if (multidevice::process().size == 1) return step();
  std::exception_ptr failure;
  try {
    step();
  } catch (...) {
    failure = std::current_exception();
  }
  multidevice::agree_with_job({{"step", what}}, true, failure, "alloy run");
}

// Writes this rank's files (`write`: the outputs, the trace), agreed: a place that fails only now (a
// full disk, a device the check before the run could not tell from a file).
template <class Write>
void write_agreed(Write&& write) {
  agreed_step("files written", write);
}

void save_outputs(const std::string& dir, const Fusion& fusion, const std::vector<Tensor>& outputs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) user_error_at("--save-outputs " + dir, "cannot create the directory: ", ec.message());
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string path = (fs::path(dir) / (fusion.outputs()[i]->name + ".npy")).string();
    write_npy(path, to_cpu(outputs[i]));
    std::cout << "wrote " << path << "\n";
  }
}

// Tensor inputs copied to the executor's GPU once, so that runs (and --bench) time the fusion
// rather than host-to-device copies; scalar inputs stay on the host.
std::vector<Tensor> place_inputs(const Fusion& fusion, std::vector<Tensor> inputs, Device device) {
  if (device.kind == DeviceKind::cpu) return inputs;
  const host_ir::DeviceRuntime& runtime = backend::device_runtime(device.kind);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!fusion.inputs()[i]->is_scalar()) inputs[i] = runtime.to_device(inputs[i], device.index);
  runtime.synchronize(device.index);
  return inputs;
}

// The line above each --dump: what the stage shows. `ir` is the fusion as written, before any
// pass; the later stages come after the passes (composites decomposed, sharded, segmented).
std::string dump_title(const std::string& stage) {
  if (stage == "ir") return "== dump ir: the fusion as parsed, before the passes\n";
  if (stage.starts_with("after=")) return "== dump " + stage + ": after the step " + stage.substr(6) + "\n";
  if (stage == "steps") return "== dump steps: the pipeline's steps and the time each took\n";
  if (stage == "sharding") return "== dump sharding: each value's sharding, after the passes\n";
  if (stage == "local") return "== dump local: the fusion one device runs, after the passes\n";
  if (stage == "segments") return "== dump segments: the fusion after the passes (composites decomposed), cut into segments\n";
  if (stage == "program") return "== dump program: the host program that runs the segments\n";
  if (stage == "cuda") return "== dump cuda: what the run launched (generated kernels, cuBLASLt calls)\n";
  return "== dump " + stage + "\n";
}

// Prints the stages asked for at this point of the run: `cuda` after it (kernels are generated
// and compiled at the first run for its sizes, so before it there is nothing to show), the
// others before; and `program` again after the run where the run changed it (--pipeline auto's
// choice and its numbers are made at the run, for its sizes).
void print_dumps(FusionExecutor& executor, const std::vector<std::string>& dumps, bool after_run, const std::vector<Tensor>* inputs) {
  static std::string program_before;
  for (const std::string& stage : dumps) {
    if (stage == "program" && !after_run) program_before = executor.dump(stage, inputs);
    if (stage == "program" && after_run) {
      std::string now = executor.dump(stage, inputs);
      if (now != program_before)
        std::cout << "== dump program after the run: what --pipeline auto chose, and why\n" << now;
      continue;
    }
    if ((stage == "cuda") == after_run) std::cout << dump_title(stage) << executor.dump(stage, inputs);
  }
}

// Times `runs` runs after a warm-up; returns the `bench median_us=... min_us=... runs=N` line
// (other scripts parse it: it stays the last line).
std::string bench(FusionExecutor& executor, const std::vector<Tensor>& inputs, int runs) {
  executor.run(inputs);  // warm-up beyond the first run: caches and allocators settle
  executor.synchronize();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    executor.run(inputs);
    executor.synchronize();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  size_t mid = times.size() / 2;
  double median = times.size() % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
  char line[128];
  std::snprintf(line, sizeof line, "bench median_us=%.1f min_us=%.1f runs=%d", median, times.front(), runs);
  return line;
}

// One run, finished on the device. A fusion without a mesh runs whole on every rank of a job, each
// on its own, so a run that fails (an out-of-range index on one rank, or on all) is agreed on
// after it: the job tells it once and ends (every rank printed it, and one aborted the job). A
// fusion with a mesh agrees in the executor.
std::vector<Tensor> run_agreed(FusionExecutor& executor, const std::vector<Tensor>& inputs, const alloy::RunOptions& options = {}) {
  std::vector<Tensor> made;
  auto run = [&] {
    made = executor.run(inputs, options);
    executor.synchronize();
  };
  if (executor.input_shardings().empty()) agreed_step("run done", run);
  else run();
  return made;
}

// One run with its timeline (alloy::RunOptions::trace): every rank of the job calls it together.
// The executor gathers every rank's spans for a fusion with a mesh; a fusion without one runs
// whole on each rank, and its ranks' spans are gathered here.
RunTrace traced_run(FusionExecutor& executor, const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs = nullptr) {
  RunTrace trace;
  alloy::RunOptions options;
  options.trace = &trace;
  std::vector<Tensor> made = run_agreed(executor, inputs, options);
  if (executor.input_shardings().empty() && multidevice::process().size > 1) trace.ranks = gather_job_spans(trace.ranks.at(0).spans);
  if (outputs) *outputs = std::move(made);
  return trace;
}

// What a traced run tells: the trace file, written by the printing rank (`root`); and after
// --bench, where the run communicated, the share of its communication under compute.
void report_trace(const RunOptions& opts, const RunTrace& trace, bool root, bool after_bench) {
  if (!root) return;
  if (after_bench) {
    host_ir::CommunicationOverlap overlap = communication_under_compute(trace.ranks);
    if (overlap.communication_us > 0) {
      char line[160];
      std::snprintf(line, sizeof line, "overlap comm_under_compute=%.2f comm_us=%.1f under_compute_us=%.1f ranks=%zu", overlap.share(),
                    overlap.communication_us, overlap.under_compute_us, trace.ranks.size());
      std::cout << line << "\n";
    }
  }
  if (opts.trace.empty()) return;
  write_chrome_trace(opts.trace, trace.ranks);
  size_t spans = 0;
  for (const RankSpans& r : trace.ranks) spans += r.spans.size();
  std::cout << "wrote " << opts.trace << " (" << spans << " spans of " << trace.ranks.size() << " rank"
            << (trace.ranks.size() == 1 ? "" : "s") << ")\n";
}

// --bench: the timed runs; then, with --trace or for a fusion with a mesh (whose communication
// share it reports), one more run, traced (a traced run waits for the device and marks every
// node, so it is not one of the timed ones). The bench line comes last.
void bench_and_report(const RunOptions& opts, FusionExecutor& executor, const std::vector<Tensor>& inputs, bool root) {
  std::string line = bench(executor, inputs, opts.bench);
  // what --pipeline auto ran in the timed runs (each pair's Choose: the model's times and pick)
  if (root) {
    std::istringstream program(executor.dump("program"));
    for (std::string text; std::getline(program, text);)
      if (text.find("Choose per run") != std::string::npos) std::cout << "pipeline auto in the bench: " << text.substr(std::min(text.find("last run: "), text.size())) << "\n";
  }
  if (!opts.trace.empty() || !executor.input_shardings().empty()) {
    RunTrace trace = traced_run(executor, inputs);
    if (opts.trace.empty()) report_trace(opts, trace, root, true);
    else write_agreed([&] { report_trace(opts, trace, root, true); });
  }
  if (root) std::cout << line << std::endl;
}

// What every rank of a job must be given alike, beyond the fusion and its inputs' shapes: the
// command line's choices that change what a rank does (the seed of random inputs, the dumps it
// prints, how many runs --bench makes). The executor's agreement covers them at every run; the
// setup agreement (run_command) covers them with the fusion and the global sizes.
std::vector<std::pair<std::string, std::string>> command_facts(const RunOptions& opts) {
  std::string dumps, binds;
  for (const std::string& d : opts.dumps) dumps += (dumps.empty() ? "" : " ") + d;
  return {{"command", "run"},
          {"seed", std::to_string(opts.seed)},
          {"dumps", dumps.empty() ? "none" : dumps},
          {"bench runs", std::to_string(opts.bench)},
          {"trace", opts.trace.empty() ? "off" : "on"},
          // (the printing rank writes the global outputs, every rank its part: all or none)
          {"saved outputs", opts.save_dir.empty() ? "off" : "on"}};
}

// Under mpirun every rank runs this: it reads the same global inputs (files, or the same seeded
// random ones as a one-process run), keeps its part (computed in run_command's set-up), runs, and
// gathers the outputs. The mesh's first rank prints (rank 0 where the fusion has no mesh); a rank
// outside the mesh runs too (it takes part in every run's agreement) and prints nothing.
int run_sharded(const RunOptions& opts, FusionExecutor& executor, std::vector<Tensor> local, const std::vector<int64_t>& team_mesh,
                const std::string& header) {
  const Fusion& f = executor.fusion();
  const int printer = team_mesh.empty() ? 0 : int(team_mesh.front());
  const bool root = multidevice::process().rank == printer;
  auto out_shardings = executor.output_shardings();
  if (root) std::cout << header;
  // the dumps of the plan for this rank's part of the inputs (the sharding is decided at their
  // sizes); parts the run will refuse, on every rank at its agreement, show the unbound plan
  const std::vector<Tensor>* sized = &local;
  if (root && !opts.dumps.empty()) {
    try {
      executor.dump("sharding", &local);
    } catch (const UserError&) {
      sized = nullptr;
    }
  }
  if (root) print_dumps(executor, opts.dumps, false, sized);
  local = place_inputs(f, std::move(local), executor.device());
  std::vector<Tensor> outputs;
  std::optional<RunTrace> trace;
  if (!opts.trace.empty() && opts.bench == 0) trace = traced_run(executor, local, &outputs);
  else outputs = run_agreed(executor, local);
  if (root) print_dumps(executor, opts.dumps, true, nullptr);  // (the run's plan)
  bool in_team = team_mesh.empty() || multidevice::team_rank_of(team_mesh) >= 0;
  auto team = team_mesh.empty() || !in_team ? nullptr : multidevice::communicator_for(team_mesh, Device{});
  std::vector<Tensor> global;
  for (size_t i = 0; i < outputs.size() && in_team; ++i) {
    outputs[i] = to_cpu(outputs[i]);
    global.push_back(team && out_shardings[i] ? multidevice::gather_global(outputs[i], *out_shardings[i], *team) : outputs[i]);
    if (root) std::cout << f.outputs()[i]->name << ": " << tensor_type_str(global[i]) << "  " << summarize_tensor(global[i]) << "\n";
  }
  if (!opts.save_dir.empty() || trace)
    write_agreed([&] {
      if (!opts.save_dir.empty() && in_team) {
        // the printing rank the global values (NAME.npy), every rank of the mesh its own part (NAME.rankK.npy)
        if (root) save_outputs(opts.save_dir, f, global);
        std::error_code ec;
        fs::create_directories(opts.save_dir, ec);
        for (size_t i = 0; i < outputs.size(); ++i)
          write_npy((fs::path(opts.save_dir) / (f.outputs()[i]->name + ".rank" + std::to_string(multidevice::process().rank) + ".npy")).string(),
                    outputs[i]);
      }
      if (trace) report_trace(opts, *trace, root, false);
    });
  // every rank, in the mesh or not, makes the same runs (each begins with the job's agreement)
  if (opts.bench > 0) bench_and_report(opts, executor, local, root);  // (already on the device)
  return 0;
}

// A 64-bit hash of a CPU tensor's values in row-major order, in hex (8 bytes a step).
std::string values_hash(const Tensor& t) {
  const Tensor packed = t.is_contiguous() ? t : packed_cpu(t);
  const auto* bytes = static_cast<const unsigned char*>(packed.data());
  const size_t n = size_t(packed.numel()) * dtype_size(packed.dtype());
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  std::ostringstream out;
  out << std::hex << h;
  return out.str();
}

int run_command(const RunOptions& opts) {
  std::vector<SizeRequest> requests = parse_binds(opts.binds);
  std::optional<FusionExecutor> made;
  std::vector<Tensor> inputs, local;
  std::vector<std::string> sources;
  std::vector<int64_t> team_mesh;  // empty: a fusion without a mesh, run whole on every rank
  Bindings bindings;
  std::string fusion_text;
  std::exception_ptr setup_error;
  try {
    std::string text = read_source(opts.file);
    auto fusion = choose_fusion(parse_fusions(text, opts.file), opts.fusion_name, opts.file);
    fusion_text = print_fusion(*fusion);
    check_output_places(opts, *fusion);
    ExecutorOptions options{device_choice(opts.device)};
    options.pipeline = opts.pipeline;
    options.agreement = opts.agreement == "on_change" ? ExecutorOptions::Agreement::on_change : ExecutorOptions::Agreement::every_run;
    options.job_facts = command_facts(opts);
    made.emplace(std::move(fusion), options);
    const Fusion& f = made->fusion();
    std::vector<Tensor> given = read_given_inputs(f, opts.inputs, sources);
    bindings = resolve_input_sizes(f, given, requests);
    inputs = complete_inputs(f, std::move(given), bindings, uint64_t(opts.seed));
    // the whole tensors against the declaration, before any is cut into parts (an error then
    // names the declared sizes, not a part's)
    if (fusion_mesh(f)) bind_inputs(f, inputs);
    // a mesh larger than the job, said as such (before the passes check sizes against it)
    if (auto mesh = fusion_mesh(f))
      if (auto misfit = multidevice::mesh_misfit(*mesh)) user_error_at("fusion '" + f.name() + "'", *misfit);
    // compiles: a fusion the passes refuse fails here, on every rank alike
    auto in_shardings = made->input_shardings();
    for (auto& s : in_shardings)
      if (s) team_mesh = s->mesh;
    // this rank's part of each input (an indivisible size fails here, before any rank communicates)
    local = inputs;
    int team_rank = multidevice::team_rank_of(team_mesh);
    for (size_t i = 0; i < inputs.size() && team_rank >= 0; ++i)
      if (in_shardings[i]) local[i] = multidevice::local_part(inputs[i], *in_shardings[i], team_rank, "input '" + f.inputs()[i]->name + "'");
  } catch (...) {
    setup_error = std::current_exception();
  }
  // The ranks of a job agree that each set up, and with the same fusion, options and sizes, before
  // any of them communicates (one all-gather: multidevice/agreement.h).
  std::vector<multidevice::JobFact> facts;
  for (auto& [name, value] : command_facts(opts)) facts.push_back({name, value});
  facts.push_back({"fusion", std::to_string(std::hash<std::string>{}(fusion_text)) + " (the hash of the fusion as printed)", false, fusion_text});
  facts.push_back({"pipeline", opts.pipeline});
  facts.push_back({"agreement", opts.agreement});
  facts.push_back({"device", opts.device});
  if (made) {
    std::string sizes = bindings_text(made->fusion(), bindings);
    facts.push_back({"bound sizes", sizes.empty() ? "none" : sizes.substr(1)});
  }
  for (size_t i = 0; i < inputs.size(); ++i) facts.push_back({"shape of input '" + made->fusion().inputs()[i]->name + "'", tensor_type_str(inputs[i])});
  // every rank reads the whole inputs and keeps its part: their values too (a rank given another
  // file, or random values where the others read one, computed a different fusion's result)
  for (size_t i = 0; i < inputs.size(); ++i)
    facts.push_back({"values of input '" + made->fusion().inputs()[i]->name + "' (a hash of the whole array each rank read)", values_hash(inputs[i])});
  multidevice::agree_with_job(facts, true, setup_error, "alloy run");
  FusionExecutor& executor = *made;
  const Fusion& f = executor.fusion();
  if (!executor.input_shardings().empty() || multidevice::process().size > 1) {
    std::ostringstream header;
    header << "fusion " << f.name() << " on " << executor.device().str() << bindings_text(f, bindings) << ", seed " << opts.seed
           << ", " << multidevice::process().size << " process" << (multidevice::process().size == 1 ? "" : "es") << "\n";
    for (size_t i = 0; i < inputs.size(); ++i)
      header << "  input " << f.inputs()[i]->name << ": " << tensor_type_str(inputs[i]) << " "
             << (sources[i].empty() ? "random" : "from " + sources[i]) << "\n";
    return run_sharded(opts, executor, std::move(local), team_mesh, header.str());
  }

  std::cout << "fusion " << f.name() << " on " << executor.device().str() << bindings_text(f, bindings) << ", seed "
            << opts.seed << "\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    std::cout << "  input " << f.inputs()[i]->name << ": " << tensor_type_str(inputs[i]) << " "
              << (sources[i].empty() ? "random" : "from " + sources[i]) << "\n";
  inputs = place_inputs(f, std::move(inputs), executor.device());
  print_dumps(executor, opts.dumps, false, &inputs);

  std::vector<Tensor> outputs;
  std::optional<RunTrace> trace;
  if (!opts.trace.empty() && opts.bench == 0) trace = traced_run(executor, inputs, &outputs);
  else outputs = executor.run(inputs);
  executor.synchronize();
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor out = to_cpu(outputs[i]);
    std::cout << f.outputs()[i]->name << ": " << tensor_type_str(out) << "  " << summarize_tensor(out) << "\n";
  }
  print_dumps(executor, opts.dumps, true, &inputs);
  if (!opts.save_dir.empty()) save_outputs(opts.save_dir, f, outputs);
  if (trace) report_trace(opts, *trace, true, false);
  if (opts.bench > 0) bench_and_report(opts, executor, inputs, true);
  return 0;
}

// ---- the command line ---------------------------------------------------------------------

std::string pass_list() {
  std::string out;
  for (std::string_view n : pass_names()) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// A usage error's text where a job of several reports it (`report`, one rank), else empty.
std::string usage_message;

// A usage error (exit 2; in a job of several, 1, as every failure of a job: `report`): in a job
// of several, this rank meets the job's first agreement as a failed rank, so a rank that parsed its
// command line fails there too instead of waiting for this one, and the job tells the error once
// (the lowest failing rank) without aborting. An error found while the run set up (a malformed
// --input, caught there as the run's setup error) was the failure of that agreement already: the
// others learnt of it there, and a second agreement would wait for them forever.
int usage_failure(const std::string& text) {
  if (multidevice::process().size == 1) {
    std::cerr << text;
    return 2;
  }
  if (!multidevice::failure_agreed()) {
    try {
      multidevice::agree_with_job({{"command", "a usage error"}}, true, std::make_exception_ptr(UserError(text)), "alloy");
    } catch (const std::exception&) {
      // (rethrown after the others learnt of it: reported by `report`)
    }
  }
  usage_message = text;
  return 2;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"Alloy: a fusion compiler and runtime for deep-learning tensor programs", "alloy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "alloy 0.1.0");
  std::vector<std::string> setting_values;
  app.add_option("--set", setting_values, "NAME=VALUE: a setting (listed below), over its environment variable (repeatable)");
  app.footer(settings::help_text());
  // --set after the subcommand too (`alloy compile F --set ALLOY_NO_WARP_ROWS=1`): the subcommands
  // pass what they do not know to the top level
  app.fallthrough();

  RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Run a fusion on random or given inputs and summarize its outputs");
  run_cmd->add_option("file", run.file, "The .fusion file")->required();
  run_cmd->add_option("--fusion", run.fusion_name, "Which fusion of the file to run (default: the first)");
  run_cmd->add_option("--input", run.inputs, "NAME=PATH.npy: take input NAME from a .npy file (repeatable)");
  run_cmd->add_option("--bind", run.binds, "SYMBOL=N: the size of a symbolic dimension (INPUT.AXIS=N for a ?) (repeatable)");
  run_cmd
      ->add_option_function<std::string>(
          "--seed",
          [&run](const std::string& text) {
            // parsed here: CLI11 saturates an out-of-range integer instead of refusing it
            int64_t value = -1;
            auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
            if (ec != std::errc() || end != text.data() + text.size() || value < 0)
              throw CLI::ValidationError("--seed", "expected a whole number from 0 to 9223372036854775807, found '" + text + "'");
            run.seed = value;
          },
          "Seed of the random inputs, 0 to 2^63-1 (default 0)");
  run_cmd->add_option("--device", run.device, "Where to run")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->default_val("auto");
  run_cmd
      ->add_option("--pipeline", run.pipeline,
                   "Pipelining of all-gather + GEMM and GEMM + reduce-scatter over chunks and streams: off, auto, ring or chunks=N")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              parse_pipeline_option(text);
            } catch (const UserError& e) {
              // CLI11 names the option itself: the message without parse_pipeline_option's prefix
              std::string message = e.what();
              return message.starts_with("--pipeline: ") ? message.substr(12) : message;
            }
            return {};
          },
          "off|auto|ring|chunks=N", "pipeline"))
      ->default_val("auto");
  run_cmd
      ->add_option("--agreement", run.agreement,
                   "When the ranks of a job agree on what they run: every_run, or on_change (a run like the last agreed one skips it)")
      ->check(CLI::IsMember({"every_run", "on_change"}))
      ->default_val("every_run");
  run_cmd
      ->add_option("--save-outputs", run.save_dir, "Write DIR/<output name>.npy for each output")
      ->check(CLI::Validator([](std::string& dir) { return dir.empty() ? std::string("the folder name is empty") : std::string(); },
                             "DIR", "non-empty"));
  run_cmd->add_option("--dump", run.dumps,
                      "Print a stage (repeatable): ir (before the passes), after=PASS (" + pass_list() +
                          "), sharding, local (the fusion one device runs), segments, program, steps (each pipeline step's time); cuda (after the run: what it launched)")
      ->check(CLI::Validator(
          [](std::string& stage) {
            static const std::vector<std::string> stages{"ir", "sharding", "local", "segments", "program", "steps", "cuda"};
            if (std::find(stages.begin(), stages.end(), stage) != stages.end()) return std::string();
            if (stage.starts_with("after=")) {
              const auto& names = pass_names();
              if (std::find(names.begin(), names.end(), std::string_view(stage).substr(6)) != names.end()) return std::string();
              return "unknown pass '" + stage.substr(6) + "'; expected one of: " + pass_list();
            }
            return "expected ir, after=PASS, sharding, local, segments, program, steps or cuda; found '" + stage + "'";
          },
          "STAGE"));
  run_cmd->add_option("--bench", run.bench,
                      "Time N runs after warm-up; a fusion with a mesh then runs once more, traced, for the line `overlap "
                      "comm_under_compute=SHARE ...` (the share of communication time under compute on another stream); "
                      "the last line is `bench median_us=... min_us=... runs=N`")
      ->check(CLI::Range(1, 1000000));
  run_cmd
      ->add_option("--trace", run.trace,
                   "Write FILE, a Chrome trace-event timeline (Perfetto, chrome://tracing) of the run: a span for each kernel, GEMM "
                   "chunk, collective, copy and wait on its stream (device time), and the host's enqueue time; a process per rank "
                   "under mpirun, all in one file. With --bench, of one more run after the timed ones; without, of the one run "
                   "(which compiles the kernels for its sizes)")
      ->check(CLI::Validator([](std::string& file) { return file.empty() ? std::string("the file name is empty") : std::string(); },
                             "FILE", "non-empty"));

  std::string check_file;
  CLI::App* check_cmd = app.add_subcommand("check", "Parse and validate a .fusion file, printing every error");
  check_cmd->add_option("file", check_file, "The .fusion file")->required();

  std::string print_file, print_name;
  CLI::App* print_cmd = app.add_subcommand("print", "Print a .fusion file in canonical form");
  print_cmd->add_option("file", print_file, "The .fusion file")->required();
  print_cmd->add_option("--fusion", print_name, "Print only this fusion");

  std::string compile_file, arch = "sm_90";
  std::vector<std::string> compile_dumps;
  CLI::App* compile_cmd =
      app.add_subcommand("compile", "Generate and compile every GPU kernel of a fusion for an architecture (no GPU needed)");
  compile_cmd->add_option("file", compile_file, "The .fusion file")->required();
  compile_cmd->add_option("--arch", arch, "GPU architecture, e.g. sm_90")->default_val("sm_90");
  compile_cmd->add_option("--dump", compile_dumps,
                          "Print a stage (repeatable): segments, program (the CUDA plan, before compiling), cuda (the kernels' source)")
      ->check(CLI::IsMember({"segments", "program", "cuda"}));
  std::vector<std::string> compile_binds;
  compile_cmd->add_option("--bind", compile_binds,
                          "SYMBOL=N: compile only the variant a run at these sizes would launch, and report its registers (repeatable)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream err;
    int code = app.exit(e, std::cout, err);  // prints help or the version; the error with a hint
    if (code != 0) return usage_failure(err.str());
    // help or the version on one rank of a job of several: it meets the others' first agreement
    // (they would wait for it forever), where a rank running something else is a disagreement on
    // the command, told once (every rank asking for help agrees, and ends)
    if (multidevice::process().size > 1)
      multidevice::agree_with_job({{"command", e.get_name() == "CallForVersion" ? "--version" : "--help"}}, true, nullptr, "alloy");
    return 0;
  }
  try {
    try {
      settings::non_default();  // reads the environment's settings now: a bad value is a usage error before any work
    } catch (const UserError& e) {
      throw UsageError(e.what());
    }
    for (const std::string& assignment : setting_values) {
      size_t eq = assignment.find('=');
      if (eq == std::string::npos) throw UsageError("--set " + assignment + ": expected NAME=VALUE");
      try {
        settings::set(assignment.substr(0, eq), assignment.substr(eq + 1));
      } catch (const UserError& e) {
        throw UsageError(e.what());
      }
    }
    if (!run_cmd->parsed() && multidevice::process().size > 1) {
      // every rank of a job runs one command: `check` on one rank and `run` on another is a
      // disagreement at the first agreement of each, not a wait
      std::string command = check_cmd->parsed() ? "check" : print_cmd->parsed() ? "print" : "compile";
      std::string file = check_cmd->parsed() ? check_file : print_cmd->parsed() ? print_file : compile_file;
      multidevice::agree_with_job({{"command", command}, {"file", file}}, true, nullptr, "alloy " + command);
    }
    if (run_cmd->parsed()) return run_command(run);
    if (check_cmd->parsed()) return check_command(check_file);
    if (print_cmd->parsed()) return print_command(print_file, print_name);
    if (compile_cmd->parsed()) return compile_command(compile_file, arch, compile_dumps, compile_binds);
  } catch (const UsageError& e) {
    return usage_failure(std::string(e.what()) + "\nRun with --help for more information.\n");
  }
  internal_error("no subcommand ran");
}

}  // namespace
}  // namespace alloy

// Prints a failure and gives its exit code. In a job of several processes, a failure every rank
// learnt of at an agreement (multidevice/agreement.h) ends with one more agreement: only the
// lowest failing rank prints (a rank stopped because another failed prints nothing), and every
// rank exits 1. Any other failure (a usage error on one rank, an error between two
// agreements) may leave other ranks waiting for this one, so it ends the whole job.
int report(int code, const std::string& message, bool peer, const std::string& raw) {
  std::cout << std::flush;  // what the run printed before the error, then the error (one stream on a terminal)
  const auto& p = alloy::multidevice::process();
  if (p.size == 1) {  // (under `mpirun -n 1` MPI was started: it ends here, or mpirun fails the job)
    if (code != 0) std::cerr << message;
    alloy::multidevice::finalize();
    return code;
  }
  if (code != 0 && !alloy::multidevice::failure_agreed()) {
    std::cerr << message << std::flush;
    alloy::multidevice::abort_job(code);
  }
  // the job's last gather, the one a Python rank's exit makes too (so a job of both ends, not
  // waits): which rank prints (the failing one; a PeerError prints nothing); where a rank left
  // before (nothing gathered), the rank the agreement named tells the leaving
  int first = alloy::multidevice::leave_job(code != 0 && !peer);
  if (first >= 0 && first == p.rank && !peer) std::cerr << message;
  if (first == -2 && code != 0 && alloy::multidevice::agreed_failure_teller(raw) == p.rank) std::cerr << message;
  alloy::multidevice::finalize();
  // a failed job exits 1 on every rank, whatever failed where (a usage error on one rank and the
  // others' PeerError: mpirun's code would be whichever rank ended first)
  return first >= 0 || (first == -2 && code != 0) ? 1 : 0;
}

int main(int argc, char** argv) {
  int code = 0;
  std::string message, raw;  // (raw: the error's own text, as the agreement noted it)
  bool peer = false;
  try {
    code = alloy::run_cli(argc, argv);
    message = raw = alloy::usage_message;
  } catch (const alloy::PeerError& e) {
    code = 1;
    peer = true;
    raw = e.what();
    message = std::string("error: ") + e.what() + "\n";
  } catch (const alloy::UserError& e) {
    code = 1;
    raw = e.what();
    message = std::string("error: ") + e.what() + "\n";
  } catch (const alloy::InternalError& e) {
    std::cerr << e.what() << "\nPlease report this with the .fusion file and the command line.\n";
    if (alloy::multidevice::process().size > 1) alloy::multidevice::abort_job(3);
    return 3;
  } catch (const std::bad_alloc&) {
    code = 1;
    message = "error: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "internal error (a bug in Alloy): " << e.what() << "\n";
    if (alloy::multidevice::process().size > 1) alloy::multidevice::abort_job(3);
    return 3;
  } catch (...) {
    std::cerr << "internal error (a bug in Alloy): an unknown exception\n";
    if (alloy::multidevice::process().size > 1) alloy::multidevice::abort_job(3);
    return 3;
  }
  return report(code, message, peer, raw);
}
