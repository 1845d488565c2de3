// Multi-tensor segments (issue 27): many independent chains of the same pointwise ops over tensors
// of different sizes — an optimizer step over every parameter of a model, each parameter with its
// own update chain — run as one launch, as PyTorch's multi_tensor_apply does: a table of each
// tensor's element count and pointers, blocks assigned over all the tensors.
//
// A *chain* is a connected piece of the fusion: ops joined through the tensors they read and write
// (a tensor input read by two ops joins them too), and the scalar ops whose results only that piece
// reads (`lr_wd = mul(lr, wd)` written out in each chain). Scalar inputs, and scalars computed once
// and read by several chains, join nothing.
// A chain can join a group when it is one generated pointwise kernel whose tensors all have one
// shape (no broadcast, view, cat, gather or iota: each tensor is read and written at the element
// the kernel computes, so the kernel may treat it as a flat vector) and whose results are tensors.
// Chains with the same *structure* (ops, attributes, dtypes and literals in the same order, scalars
// read from outside in the same places, the same values returned; the sizes and ranks may differ,
// and which scalar each place reads) form a group; a group of two or more is a `multi_tensor`
// segment (several where one launch's table would pass CUDA's 32 KB of kernel parameters:
// max_multi_tensor_members). A scalar every member reads is passed once; one that differs between
// members (two parameter groups, each with its own `wd`) is a word of each member's table entry.
// Precondition: the CUDA target. Postcondition: `grouped` holds every op of the returned segments;
// the other ops are segmented as before; every chain left out says why in `refusals` (where a group
// was formed or several chains could have been).
#pragma once

#include <memory>
#include <unordered_set>
#include <vector>

#include "alloy/segment/schedulers/kernel_analysis.h"
#include "alloy/segment/segment.h"

namespace alloy {

// The chains one multi-tensor launch computes. members[0]'s analysis is the template the kernel is
// generated from; `tensors[i]` are member i's values in the template's launch order: the value of
// each of its leaves, then of each of its outputs. `per_member[k]`: whether the template's scalar
// input k (kernel().scalar_inputs) differs between members, then `scalars[i]` holds member i's own
// value of each such scalar, in the template's order.
struct MultiTensorGroup {
  std::vector<Segment> members;  // each a pointwise segment, with its analysis
  std::vector<std::vector<Value*>> tensors;
  std::vector<bool> per_member;
  std::vector<std::vector<Value*>> scalars;
  const KernelAnalysis& kernel() const { return *members.at(0).analysis; }
};

// The largest group one launch takes for a kernel of `leaves` and `outputs` tensors, `shared`
// scalar inputs read by every member and `per_member` scalars of each member's own (each member's
// table entry: its block start, element count, vector flag, one pointer per tensor and its scalars).
int max_multi_tensor_members(int leaves, int outputs, int shared, int per_member);

// The multi-tensor segments of `fusion` (ids not set) and the ops they take.
std::vector<Segment> group_multi_tensor(const Fusion& fusion, const ValueReaders& readers, std::vector<Refusal>& refusals,
                                        std::unordered_set<const Op*>& grouped);

}  // namespace alloy
