#include "alloy/backend/cuda/host_views.h"

#include "alloy/backend/cpu/views.h"
#include "alloy/backend/cuda/strided_copy.h"

namespace alloy::cuda {

void make_host_view(const Op& view, host_ir::RunState& state) {
  const Tensor& in = state.at(view.inputs[0]);
  std::vector<int64_t> sizes = state.concrete_shape(view.outputs[0]);
  Tensor t = apply_view(view, in, sizes);
  if (!t.defined()) t = contiguous(in, Stream::current(state.device.index)).view(sizes);
  state.values[view.outputs[0]->id] = t;
}

}  // namespace alloy::cuda
