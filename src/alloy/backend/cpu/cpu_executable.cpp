#include "alloy/backend/cpu/cpu_executable.h"

#include <chrono>
#include <cstring>
#include <exception>

#include "alloy/backend/cpu/reference_ops.h"
#include "alloy/common/error.h"

namespace alloy {
namespace {

void fill_zero_cpu(const Tensor& t) {
  if (t.numel() == 0) return;
  ALLOY_CHECK(t.is_contiguous(), "fill_zero of ", t.str());
  std::memset(t.data(), 0, size_t(t.numel()) * size_t(dtype_size(t.dtype())));
}

class CpuSegment final : public host_ir::SegmentExecutable {
 public:
  explicit CpuSegment(const Segment& segment) : ops_(segment.ops) {}

  void run(host_ir::RunState& state) override { run_reference_ops(ops_, state); }

 private:
  std::vector<const Op*> ops_;
};

}  // namespace

void run_reference_ops(const std::vector<const Op*>& ops, host_ir::RunState& state, const TensorMove& to_host,
                       const TensorMove& from_host) {
  for (const Op* op : ops) {
    std::vector<Tensor> inputs;
    inputs.reserve(op->inputs.size());
    for (Value* in : op->inputs) {
      const Tensor& t = state.at(in);
      inputs.push_back(to_host && t.device().kind != DeviceKind::cpu ? to_host(t) : t);
    }
    std::vector<std::vector<int64_t>> sizes;
    for (Value* out : op->outputs) sizes.push_back(state.concrete_shape(out));
    std::vector<Tensor> outputs;
    if (op->kind == OpKind::gather && state.defer_index_errors) {
      // (RunState::defer_index_errors: the error at the run's end, a value of zeros meanwhile)
      try {
        outputs = run_reference_op(*op, inputs, sizes);
      } catch (const UserError&) {
        state.check_at_end(op, [failure = std::current_exception()] { std::rethrow_exception(failure); });
        Tensor zeros = Tensor::empty(op->outputs[0]->dtype(), sizes[0]);
        fill_zero_cpu(zeros);
        outputs = {zeros};
      }
    } else {
      outputs = run_reference_op(*op, inputs, sizes);
    }
    ALLOY_CHECK(outputs.size() == op->outputs.size(), "reference kernel returned the wrong number of outputs");
    for (size_t i = 0; i < outputs.size(); ++i)
      state.values[op->outputs[i]->id] = from_host ? from_host(outputs[i]) : std::move(outputs[i]);
  }
}

std::unique_ptr<host_ir::SegmentExecutable> make_cpu_executable(const Segment& segment) {
  return std::make_unique<CpuSegment>(segment);
}

namespace {

// dst = src for CPU tensors of one dtype and shape, dst at any strides (a loop's chunk views).
void copy_into_cpu(const Tensor& dst, const Tensor& src) {
  ALLOY_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "copy of ", src.str(), " into ", dst.str());
  Tensor packed = packed_cpu(src);
  const int64_t width = dtype_size(dst.dtype());
  auto* to = static_cast<char*>(dst.data());
  const auto* from = static_cast<const char*>(packed.data());
  for_each_element(dst, [&](int64_t k, int64_t at) { std::memcpy(to + at * width, from + k * width, size_t(width)); });
}

// into += the sum of `addends` for CPU tensors of one dtype and shape, `into` at any strides (a
// ring's block): summed in double and stored once (integers exactly, as int64; bools or).
void accumulate_cpu(const Tensor& into, const std::vector<Tensor>& addends) {
  std::vector<Tensor> packed;
  for (const Tensor& a : addends) {
    ALLOY_CHECK(into.sizes() == a.sizes() && into.dtype() == a.dtype(), "accumulate of ", a.str(), " into ", into.str());
    packed.push_back(packed_cpu(a));
  }
  void* base = into.data();
  const DType t = into.dtype();
  if (is_integral(t) || t == DType::boolean) {
    for_each_element(into, [&](int64_t k, int64_t at) {
      uint64_t sum = uint64_t(load_as_int(base, t, at));
      for (const Tensor& a : packed) sum += uint64_t(load_as_int(a.data(), t, k));
      store_int(base, t, at, int64_t(sum));
    });
    return;
  }
  for_each_element(into, [&](int64_t k, int64_t at) {
    double sum = load_as_double(base, t, at);
    for (const Tensor& a : packed) sum += load_as_double(a.data(), t, k);
    store_double(base, t, at, sum);
  });
}

// The host: every node runs in order on the calling thread, so streams, events and timing are
// nothing to do (a timer measures the host's time).
class CpuRuntime final : public host_ir::DeviceRuntime {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  bool available() const override { return true; }
  std::string unavailable_reason() const override { return ""; }
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "cpu"; }
  int64_t memory_bytes(int) const override { return host_memory_bytes(); }

  Tensor empty(DType dtype, const std::vector<int64_t>& sizes, int) const override { return Tensor::empty(dtype, sizes); }
  void fill_poison(const Tensor& t) const override {
    if (t.numel() == 0) return;
    ALLOY_CHECK(t.is_contiguous(), "fill_poison of ", t.str());
    std::memset(t.data(), 0xFF, size_t(t.numel()) * size_t(dtype_size(t.dtype())));
  }
  void fill_zero(const Tensor& t) const override { fill_zero_cpu(t); }
  Tensor contiguous(const Tensor& t) const override { return packed_cpu(t); }
  void copy(const Tensor& dst, const Tensor& src) const override { copy_into_cpu(dst, src); }
  void accumulate(const Tensor& into, const std::vector<Tensor>& addends) const override { accumulate_cpu(into, addends); }
  Tensor to_device(const Tensor& host, int) const override { return packed_cpu(host); }
  Tensor to_host(const Tensor& t) const override { return packed_cpu(t); }
  void synchronize(int) const override {}

  std::unique_ptr<host_ir::RunStreams> open_streams(const host_ir::Program&, host_ir::RunState&) const override { return nullptr; }
  std::unique_ptr<host_ir::Scope> use_stream(int, uintptr_t handle) const override {
    if (handle != 0) user_error_at("stream", "a CPU run takes no stream");
    return std::make_unique<host_ir::Scope>();
  }
  uintptr_t current_stream(int) const override { return 0; }
  std::unique_ptr<host_ir::DeviceTimer> timer(int) const override { return std::make_unique<HostTimer>(); }
  std::unique_ptr<host_ir::TraceClock> trace_clock(int) const override { return std::make_unique<HostClock>(); }

 private:
  // Every node has run when the next is enqueued: a mark is the host's time then.
  class HostClock final : public host_ir::TraceClock {
   public:
    int mark() override {
      marks_.push_back(std::chrono::steady_clock::now());
      return int(marks_.size()) - 1;
    }
    std::vector<double> times_us() override {
      std::vector<double> out;
      out.reserve(marks_.size());
      for (auto& t : marks_) out.push_back(std::chrono::duration<double, std::micro>(t - marks_.front()).count());
      return out;
    }

   private:
    std::vector<std::chrono::steady_clock::time_point> marks_;
  };

  class HostTimer final : public host_ir::DeviceTimer {
   public:
    void start() override { start_ = std::chrono::steady_clock::now(); }
    void stop() override { stop_ = std::chrono::steady_clock::now(); }
    double elapsed_ms() override { return std::chrono::duration<double, std::milli>(stop_ - start_).count(); }
    void hold(double) override {}

   private:
    std::chrono::steady_clock::time_point start_, stop_;
  };
};

}  // namespace

const host_ir::DeviceRuntime& cpu_runtime() {
  static const CpuRuntime runtime;
  return runtime;
}

}  // namespace alloy
