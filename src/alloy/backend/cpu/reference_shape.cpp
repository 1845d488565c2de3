// Reference kernels of the shape ops. broadcast_in_dim, expand, permute, slice, squeeze,
// unsqueeze and segment_set are zero-copy views (backend/cpu/views.h makes them; the checks here
// catch run-time sizes that break the op's contract). reshape is a view where the strides allow
// one and a contiguous copy otherwise; cat copies into a new tensor of the promoted dtype.
#include <algorithm>
#include <string>

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"
#include "alloy/backend/cpu/views.h"

namespace alloy::reference {
namespace {

// Input axis i lands on output axis source[i]; it must be 1 or the output's size there.
void check_broadcast(const Op& op, const Tensor& x, const Shape& out, const std::vector<int64_t>& target) {
  for (int i = 0; i < x.dim(); ++i) {
    int64_t n = x.size(i), m = out.at(size_t(target[i]));
    if (n != 1 && n != m)
      user_error(op.loc, op_name(op.kind), ": input ", shape_str(x.sizes()), " does not broadcast to ", shape_str(out),
                 " (input axis ", i, " has size ", n, "; expected 1 or ", m, ")");
  }
}

// The sizes Python slicing gives (negative indices count from the end, out-of-range clamps).
Shape sliced_sizes(const Op& op, const Tensor& x) {
  auto starts = op.ints_attr("starts"), ends = op.ints_attr("ends");
  std::vector<int64_t> steps = op.attr("steps") ? op.ints_attr("steps") : std::vector<int64_t>(starts.size(), 1);
  if (steps.empty()) steps.assign(starts.size(), 1);  // `steps=[]` means step 1, as in infer_slice
  Shape sizes = x.sizes();
  for (size_t k = 0; k < starts.size() && k < sizes.size(); ++k) sizes[k] = slice_length(sizes[k], starts[k], ends[k], steps[k]);
  return sizes;
}

void check_view_sizes(const Op& op, const Tensor& x, const Shape& out) {
  switch (op.kind) {
    case OpKind::broadcast_in_dim: check_broadcast(op, x, out, op.ints_attr("broadcast_dims")); return;
    case OpKind::expand: {
      std::vector<int64_t> target;
      for (int i = 0; i < x.dim(); ++i) target.push_back(int64_t(out.size()) - x.dim() + i);
      check_broadcast(op, x, out, target);
      return;
    }
    case OpKind::slice: {
      Shape expected = sliced_sizes(op, x);
      if (expected != out)
        user_error(op.loc, "slice: input ", shape_str(x.sizes()), " sliced gives ", shape_str(expected),
                   ", but the program expects ", shape_str(out));
      return;
    }
    default:
      if (numel_of(x.sizes()) != numel_of(out))
        internal_error(op_name(op.kind), ": input ", shape_str(x.sizes()), " and output ", shape_str(out), " differ in size");
  }
}

}  // namespace

std::vector<Tensor> view_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  check_view_sizes(op, in[0], out[0]);
  Tensor view = apply_view(op, in[0], out[0]);
  ALLOY_CHECK(view.defined(), op_name(op.kind), ": no view of ", in[0].str(), " as ", shape_str(out[0]));
  return {view};
}

std::vector<Tensor> reshape_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  if (numel_of(in[0].sizes()) != numel_of(out[0]))
    user_error(op.loc, "reshape: cannot reshape ", shape_str(in[0].sizes()), " (", numel_of(in[0].sizes()),
               " elements) into ", shape_str(out[0]));
  Tensor view = apply_view(op, in[0], out[0]);
  if (view.defined()) return {view};
  Tensor copy = Tensor::empty(in[0].dtype(), in[0].sizes());
  copy_into(in[0], copy);
  return {copy.view(out[0])};
}

std::vector<Tensor> cat_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  int rank = result.dim();
  int axis = normalize_axis(op, op.int_attr("dim"), rank, "dim");
  int64_t position = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& part = in[i];
    bool fits = part.dim() == rank;
    for (int k = 0; fits && k < rank; ++k) fits = k == axis || part.size(k) == result.size(k);
    if (!fits || position + part.size(axis) > result.size(axis))
      user_error(op.loc, "cat: input ", i, " is ", shape_str(part.sizes()), ", which does not fit the result ",
                 shape_str(out[0]), " along axis ", axis);
    Tensor slot = result.as_strided(part.sizes(), result.strides(), result.offset() + position * result.stride(axis));
    copy_into(part, slot);
    position += part.size(axis);
  }
  ALLOY_CHECK(position == result.size(axis), "cat: inputs fill ", position, " of ", result.size(axis), " along axis ", axis);
  return {result};
}

}  // namespace alloy::reference
