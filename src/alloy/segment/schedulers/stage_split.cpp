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
  // (positions and gathers keep one row kernel: launch_plan never splits them)
  if (analysis.single_pass || analysis.stages.empty() || analysis.has_indexing()) return std::nullopt;
  StageSplit split;
  std::vector<Value*> kernel_inputs = inputs;
  std::set<const Value*> available(inputs.begin(), inputs.end());
  for (const std::vector<const Op*>& stage : analysis.stages) {
    // the stage's reductions, then the per-row ops computable from their results alone (and
    // literals): rstd = rsqrt(var + eps) once a row here rather than once an element later; the
    // kernel without them where they do not make it single-pass
    std::vector<const Op*> row_ops;
    {
      std::set<const Value*> known(available);
      for (const Op* op : stage)
        for (const Value* out : op->outputs) known.insert(out);
      for (const Op* op : ops) {
        if (std::find(stage.begin(), stage.end(), op) != stage.end() || op->outputs.size() != 1) continue;
        const Value* out = op->outputs[0];
        if (known.count(out) || !analysis.layout.count(out) || !analysis.at(out).per_row) continue;
        bool ready = false;  // reads this stage's values (and literals) only
        for (const Value* in : op->inputs) {
          if (in->literal) continue;
          if (!known.count(in) || available.count(in)) {
            ready = false;
            break;
          }
          ready = true;
        }
        if (!ready) continue;
        row_ops.push_back(op);
        known.insert(out);
      }
    }
    std::optional<KernelAnalysis> kernel;
    std::vector<Value*> results;
    for (bool with_row_ops : {true, false}) {
      if (!with_row_ops && row_ops.empty()) break;
      std::vector<const Op*> roots = stage;
      if (with_row_ops) roots.insert(roots.end(), row_ops.begin(), row_ops.end());
      std::vector<const Op*> kernel_ops = needed_ops(ops, roots, available);
      // what the kernel computes that an op outside it reads, or the segment stores
      results.clear();
      for (const Op* op : kernel_ops)
        for (Value* out : op->outputs) {
          bool outside = contains(analysis.outputs, out);
          for (const Op* reader : ops)
            if (std::find(kernel_ops.begin(), kernel_ops.end(), reader) == kernel_ops.end() &&
                std::find(reader->inputs.begin(), reader->inputs.end(), out) != reader->inputs.end())
              outside = true;
          bool computed_per_row = std::find(stage.begin(), stage.end(), op) != stage.end() ||
                                  std::find(row_ops.begin(), row_ops.end(), op) != row_ops.end();
          if (outside && computed_per_row) results.push_back(out);
        }
      if (results.empty()) return std::nullopt;
      auto a = analyze_kernel(kernel_ops, kernel_inputs, results);
      if (auto* k = std::get_if<KernelAnalysis>(&a); k && k->single_pass) {
        kernel = std::move(*k);
        break;
      }
    }
    if (!kernel) return std::nullopt;
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
