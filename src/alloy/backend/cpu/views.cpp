#include "alloy/backend/cpu/views.h"

#include <algorithm>

#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

// Output axis k of a broadcast reads input axis `source[k]` (or nothing: stride 0).
Tensor broadcast_view(const Tensor& in, const std::vector<int>& source, const std::vector<int64_t>& out_sizes) {
  std::vector<int64_t> strides(out_sizes.size(), 0);
  for (size_t k = 0; k < out_sizes.size(); ++k) {
    int i = source[k];
    if (i >= 0 && in.size(i) == out_sizes[k]) strides[k] = in.stride(i);
  }
  return in.as_strided(out_sizes, strides, in.offset());
}

int64_t clamp_index(int64_t i, int64_t n) { return std::clamp(i < 0 ? i + n : i, int64_t(0), n); }

}  // namespace

Tensor apply_view(const Op& op, const Tensor& in, const std::vector<int64_t>& out_sizes) {
  switch (op.kind) {
    case OpKind::segment_set:
    // a resharding op of a fusion without a mesh: the global value unchanged
    case OpKind::all_gather: case OpKind::reduce_scatter: case OpKind::all_reduce: case OpKind::all_to_all:
    case OpKind::shard_slice:
      return in;
    case OpKind::broadcast_in_dim: {
      std::vector<int> source(out_sizes.size(), -1);
      auto dims = op.ints_attr("broadcast_dims");
      for (size_t i = 0; i < dims.size(); ++i) source[dims[i]] = int(i);
      return broadcast_view(in, source, out_sizes);
    }
    case OpKind::expand: {
      std::vector<int> source(out_sizes.size(), -1);
      int offset = int(out_sizes.size()) - in.dim();
      for (int i = 0; i < in.dim(); ++i) source[offset + i] = i;
      return broadcast_view(in, source, out_sizes);
    }
    case OpKind::permute: {
      std::vector<int> dims;
      for (int64_t d : op.ints_attr("dims")) dims.push_back(int(d < 0 ? d + in.dim() : d));
      return in.permute(dims);
    }
    case OpKind::slice: {
      auto starts = op.ints_attr("starts"), ends = op.ints_attr("ends");
      std::vector<int64_t> steps = op.attr("steps") ? op.ints_attr("steps") : std::vector<int64_t>(starts.size(), 1);
      if (steps.empty()) steps.assign(starts.size(), 1);  // `steps=[]` means step 1, as in infer_slice
      std::vector<int64_t> strides = in.strides();
      int64_t offset = in.offset();
      for (size_t k = 0; k < starts.size(); ++k) {
        int64_t begin = clamp_index(starts[k], in.size(int(k)));
        if (out_sizes[k] > 0) offset += begin * in.stride(int(k));
        strides[k] *= steps[k];
      }
      return in.as_strided(out_sizes, strides, offset);
    }
    case OpKind::squeeze: case OpKind::unsqueeze: case OpKind::reshape:
      return in.view(out_sizes);
    default:
      internal_error("apply_view on a non-view op ", op_name(op.kind));
  }
}

}  // namespace alloy
