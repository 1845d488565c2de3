#include "alloy/backend/cuda/cuda_plan.h"

#include <map>
#include <optional>
#include <vector>

#include "alloy/backend/cpu/cpu_executable.h"
#include "alloy/backend/cuda/accumulate.h"
#include "alloy/backend/cuda/bitmask_segment.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/generated_kernel.h"
#include "alloy/backend/cuda/matmul_segment.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/multidevice/communication_segment.h"
#include "alloy/runtime/views.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"

namespace alloy::cuda {
namespace {

// Views made on the host: no kernel at all. A reshape that cannot be a view copies.
class NoopSegment final : public host_ir::SegmentExecutable {
 public:
  explicit NoopSegment(const Segment& s) : ops_(s.ops) {}
  void run(host_ir::RunState& state) override {
    for (const Op* op : ops_) {
      const Tensor& in = state.at(op->inputs[0]);
      std::vector<int64_t> sizes = state.concrete_shape(op->outputs[0]);
      Tensor t = apply_view(*op, in, sizes);
      if (!t.defined()) {
        t = contiguous(in, Stream::current(state.device.index)).view(sizes);
      }
      state.values[op->outputs[0]->id] = t;
    }
  }

 private:
  std::vector<const Op*> ops_;
};

// Ops no GPU path runs (the segment's note says why): through the host and the reference
// kernels, then back. A scalar result stays on the host, where kernels read scalars by value.
class CpuFallbackSegment final : public host_ir::SegmentExecutable {
 public:
  explicit CpuFallbackSegment(const Segment& s) : ops_(s.ops) {}
  void run(host_ir::RunState& state) override {
    Stream stream = Stream::current(state.device.index);
    run_reference_ops(ops_, state, [&](const Tensor& t) { return to_host(t, stream); }, {});
    for (const Op* op : ops_)
      for (Value* out : op->outputs)
        if (!out->is_scalar()) state.values[out->id] = to_device(state.at(out), stream);
  }

 private:
  std::vector<const Op*> ops_;
};

Tensor allocate_on_device(DType dtype, const std::vector<int64_t>& sizes, host_ir::RunState& state) {
  Stream stream = Stream::current(state.device.index);
  Tensor t = cuda_empty(dtype, sizes, stream);
  if (state.poison) fill_poison(t, stream);
  return t;
}

// The side streams and events of one run. Both are kept per thread and reused run after run: a
// side stream per (run's stream, index), and events, which a later record may reuse as soon as the
// waits on them are enqueued.
class CudaRunStreams final : public host_ir::RunStreams {
 public:
  CudaRunStreams(const host_ir::Program& program, int device) : main_(Stream::current(device)) {
    thread_local std::map<uint64_t, std::vector<Stream>> side_streams;  // by the run's stream id
    thread_local std::map<int, std::vector<Event>> event_pool;          // by device
    // a caller making a new stream for each run must not collect side streams: keep the newest
    // few (stream ids only grow; a dropped stream frees its buffers in its own order)
    constexpr size_t kKeptCallerStreams = 8;
    if (side_streams.size() >= kKeptCallerStreams && !side_streams.count(main_.id())) side_streams.erase(side_streams.begin());
    std::vector<Stream>& side = side_streams[main_.id()];
    while (int(side.size()) < program.streams - 1) side.push_back(Stream::create(device));
    side_ = &side;
    std::vector<Event>& events = event_pool[device];
    while (int(events.size()) < program.events) events.emplace_back(device, false);
    events_ = &events;
  }

  void record(int stream, int event) override {
    events_->at(size_t(event)).record(stream_at(stream));
  }
  void wait(int stream, int event) override { stream_at(stream).wait(events_->at(size_t(event))); }
  void use(int stream) override {
    guard_.reset();
    if (stream != 0) guard_.emplace(stream_at(stream));
  }
  void join() override {
    for (const Stream& side : *side_) {
      Event done(main_.device(), false);
      done.record(side);
      main_.wait(done);
    }
  }

 private:
  const Stream& stream_at(int stream) const { return stream == 0 ? main_ : side_->at(size_t(stream - 1)); }

  Stream main_;
  std::vector<Stream>* side_ = nullptr;
  std::vector<Event>* events_ = nullptr;
  std::optional<StreamGuard> guard_;
};

multidevice::DeviceMemory device_memory() {
  return {[](DType dtype, const std::vector<int64_t>& sizes, host_ir::RunState& state) { return allocate_on_device(dtype, sizes, state); },
          [](const Tensor& t, host_ir::RunState& state) { return contiguous(t, Stream::current(state.device.index)); }};
}

std::unique_ptr<host_ir::RunStreams> open_cuda_streams(const host_ir::Program& program, host_ir::RunState& state) {
  return std::make_unique<CudaRunStreams>(program, state.device.index);
}

}  // namespace

std::unique_ptr<host_ir::Executable> build_cuda_plan(const Fusion& fusion) {
  auto plan = std::make_unique<host_ir::Executable>();
  plan->program = host_ir::lower_to_program(segment_for_cuda(fusion));
  plan->allocate = allocate_on_device;
  plan->copy = [](const Tensor& dst, const Tensor& src, host_ir::RunState& state) {
    copy_d2d(dst, contiguous(src, Stream::current(state.device.index)), Stream::current(state.device.index));
  };
  plan->open_streams = open_cuda_streams;
  plan->accumulate = [](const Tensor& into, const Tensor& sum, host_ir::RunState& state) {
    accumulate(into, sum, Stream::current(state.device.index));
  };
  plan->ring = multidevice::ring_exchange();
  for (const Segment& s : plan->program.segmentation.segments) {
    if (s.scheduler == "noop") {
      plan->segments.push_back(std::make_unique<NoopSegment>(s));
    } else if (s.scheduler == "matmul") {
      plan->segments.push_back(make_matmul_segment(s));
    } else if (s.scheduler == "communication") {
      plan->segments.push_back(multidevice::make_communication_segment(s, device_memory()));
    } else if (s.scheduler == "bitmask") {
      plan->segments.push_back(make_bitmask_segment(s));
    } else if (s.scheduler == "cpu_fallback") {
      plan->segments.push_back(std::make_unique<CpuFallbackSegment>(s));
    } else {
      auto analysis = analyze_kernel(s.ops, s.inputs, s.outputs);
      ALLOY_CHECK(std::holds_alternative<KernelAnalysis>(analysis), "segment ", s.id, " was accepted but no longer analyzes");
      plan->segments.push_back(make_generated_kernel(s, std::get<KernelAnalysis>(std::move(analysis))));
    }
  }
  return plan;
}

}  // namespace alloy::cuda
