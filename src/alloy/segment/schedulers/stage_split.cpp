#include "alloy/segment/schedulers/stage_split.h"

#include <algorithm>
#include <map>
#include <set>

namespace alloy {
namespace {

// The ops of `ops` (kept in their order) that `roots` need, reading `available` values as given.
std::vector<const Op*> needed_ops(const std::vector<const Op*>& ops, const std::vector<const Op*>& roots,
                                  const std::set<const Value*>& available) {
  std::map<const Value*, const Op*> producer;
  for (const Op* op : ops)
    for (const Value* out : op->outputs) producer[out] = op;
  std::set<const Op*> needed;
  std::vector<const Op*> work = roots;
  while (!work.empty()) {
    const Op* op = work.back();
    work.pop_back();
    if (!needed.insert(op).second) continue;
    for (const Value* in : op->inputs) {
      if (available.count(in)) continue;
      if (auto it = producer.find(in); it != producer.end()) work.push_back(it->second);
    }
  }
  std::vector<const Op*> ordered;
  for (const Op* op : ops)
    if (needed.count(op)) ordered.push_back(op);
  return ordered;
}

bool contains(const std::vector<Value*>& values, const Value* v) { return std::find(values.begin(), values.end(), v) != values.end(); }

}  // namespace

std::optional<StageSplit> split_by_stage(const KernelAnalysis& analysis, const std::vector<const Op*>& ops,
                                         const std::vector<Value*>& inputs) {
  if (analysis.single_pass || analysis.stages.empty()) return std::nullopt;
  StageSplit split;
  std::vector<Value*> kernel_inputs = inputs;
  std::set<const Value*> available(inputs.begin(), inputs.end());
  // what some op of the segment reads, or the segment stores
  auto read_later = [&](const Value* v) {
    if (contains(analysis.outputs, v)) return true;
    for (const Op* op : ops)
      if (std::find(op->inputs.begin(), op->inputs.end(), v) != op->inputs.end()) return true;
    return false;
  };
  for (const std::vector<const Op*>& stage : analysis.stages) {
    std::vector<Value*> results;
    for (const Op* op : stage)
      for (Value* out : op->outputs)
        if (read_later(out)) results.push_back(out);
    if (results.empty()) return std::nullopt;
    auto a = analyze_kernel(needed_ops(ops, stage, available), kernel_inputs, results);
    auto* kernel = std::get_if<KernelAnalysis>(&a);
    if (!kernel || !kernel->single_pass) return std::nullopt;
    split.kernels.push_back(std::move(*kernel));
    for (Value* v : results) {
      kernel_inputs.push_back(v);
      available.insert(v);
      if (!contains(analysis.outputs, v)) split.intermediates.push_back(v);
    }
  }
  // the stored values the stages did not write, from the inputs and the row statistics
  std::vector<Value*> rest;
  std::vector<const Op*> roots;
  for (Value* out : analysis.outputs)
    if (!available.count(out)) {
      rest.push_back(out);
      for (const Op* op : ops)
        if (contains(op->outputs, out)) roots.push_back(op);
    }
  if (!rest.empty()) {
    auto a = analyze_kernel(needed_ops(ops, roots, available), kernel_inputs, rest);
    auto* kernel = std::get_if<KernelAnalysis>(&a);
    if (!kernel || kernel->is_reduction()) return std::nullopt;
    split.kernels.push_back(std::move(*kernel));
  }
  return split;
}

}  // namespace alloy
