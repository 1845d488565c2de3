#include "alloy/backend/cuda/gather_fault.h"

#include <cstring>

#include "alloy/backend/cpu/reference_indexing.h"
#include "alloy/backend/cuda/cuda_api.h"

namespace alloy::cuda {
namespace {

Tensor zeroed_flag(const Stream& stream) {
  Tensor zeros = Tensor::empty(DType::i64, {4});
  std::memset(zeros.data(), 0, 4 * sizeof(int64_t));
  return to_device(zeros, stream);
}

}  // namespace

std::vector<GatherShapes> gather_shapes(const KernelAnalysis& a, const host_ir::RunState& state) {
  std::vector<GatherShapes> shapes;
  for (const GatherLoad& g : a.gathers) shapes.push_back({state.concrete_shape(g.op->outputs[0]), state.concrete_shape(g.op->inputs[0])});
  return shapes;
}

void check_gather_flag(const KernelAnalysis& a, const uint64_t words[4], const std::vector<GatherShapes>& shapes) {
  if (words[0] == 0) return;
  size_t j = size_t(words[1]);
  ALLOY_CHECK(j < a.gathers.size() && j < shapes.size(), "a kernel's gather flag names gather ", j, " of ", a.gathers.size());
  const GatherLoad& g = a.gathers[j];
  reference::gather_index_out_of_range(*g.op, int64_t(words[2]), int64_t(words[3]), shapes[j].index, shapes[j].input, g.axis);
}

uint64_t GatherFlag::word(const KernelAnalysis& a, host_ir::RunState& state) {
  const int device = state.device.index;
  if (int(flags_.size()) <= device) flags_.resize(size_t(device) + 1);
  Tensor& flag = flags_[size_t(device)];
  if (!flag.defined()) flag = zeroed_flag(Stream::current(device));
  state.check_at_end(this, [this, &a, device, shapes = gather_shapes(a, state)] { check(a, device, shapes); });
  return uint64_t(reinterpret_cast<uintptr_t>(flag.data()));
}

void GatherFlag::check(const KernelAnalysis& a, int device, const std::vector<GatherShapes>& shapes) {
  Tensor& flag = flags_.at(size_t(device));
  Stream stream = Stream::current(device);
  Tensor words = to_host(flag, stream);  // waits for the run's work: the check's cost
  if (words.data_as<uint64_t>()[0] == 0) return;
  flag = zeroed_flag(stream);  // the next run starts clear
  check_gather_flag(a, words.data_as<uint64_t>(), shapes);
}

}  // namespace alloy::cuda
