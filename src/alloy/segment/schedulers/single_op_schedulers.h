// The schedulers of one op each (the offer holds one op):
//   communication  a resharding op (all_gather, reduce_scatter, ...): a segment of its own,
//                  never inside a kernel, run by multidevice/ through the run's team
//   bitmask        relu_mask / relu_backward_mask no GEMM took: a generated kernel of its own
//                  shape (backend/cuda/codegen/bitmask_kernel.h)
//   noop           a view (or segment_set): a zero-copy view made on the host
//   cpu_fallback   what no GPU path runs (a matmul of other dtypes than cuBLASLt takes, a segment
//                  whose result is a scalar): copied to the host, run by the reference kernels and
//                  copied back; `why` (the GPU schedulers' refusal) becomes the segment's note
#pragma once

#include "alloy/segment/schedulers/scheduler.h"

namespace alloy {

Verdict can_schedule_communication(const Offer& offer);
Verdict can_schedule_bitmask(const Offer& offer);
Verdict can_schedule_noop(const Offer& offer);
Segment schedule_cpu_fallback(const Offer& offer, const std::string& why);

}  // namespace alloy
