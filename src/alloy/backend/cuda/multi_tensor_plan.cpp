#include "alloy/backend/cuda/multi_tensor_plan.h"

#include <algorithm>

namespace alloy::cuda {

KernelVariant multi_tensor_variant(const KernelAnalysis& kernel, const KernelTuning& tuning) {
  int min_size = 8;
  for (const auto* list : {&kernel.leaves, &kernel.outputs})
    for (const Value* v : *list) min_size = std::min(min_size, dtype_size(v->dtype()));
  KernelVariant v;
  v.outer_rank = 1;
  v.threads = tuning.multi_tensor_threads;
  v.items = tuning.multi_tensor_chunk_vectors;  // a thread's vectors of each chunk
  v.vector = std::min(8, 16 / min_size);
  v.leaf_modes = std::string(kernel.leaves.size(), 'v');
  return v;
}

MultiTensorScalars multi_tensor_scalar_words(const MultiTensorGroup& group, const std::function<const Tensor&(const Value*)>& value_of) {
  MultiTensorScalars words;
  const KernelAnalysis& kernel = group.kernel();
  for (size_t k = 0; k < kernel.scalar_inputs.size(); ++k)
    if (!group.per_member.at(k)) words.shared.push_back(scalar_words({kernel.scalar_inputs[k]}, value_of).at(0));
  for (const std::vector<Value*>& own : group.scalars) words.own.push_back(scalar_words(own, value_of));
  return words;
}

MultiTensorLaunch plan_multi_tensor_launch(const KernelAnalysis& kernel, const std::vector<bool>& per_member, int members,
                                           const std::vector<std::vector<const Tensor*>>& tensors, const MultiTensorScalars& scalars,
                                           const LaunchTarget& target) {
  MultiTensorLaunch plan;
  plan.variant = multi_tensor_variant(kernel, target.tuning);
  const size_t pointers = kernel.leaves.size() + kernel.outputs.size();
  const size_t own = size_t(std::count(per_member.begin(), per_member.end(), true));
  ALLOY_CHECK(int(tensors.size()) == members, "a multi-tensor launch of ", members, " members got ", tensors.size());
  ALLOY_CHECK(per_member.size() == kernel.scalar_inputs.size() && scalars.shared.size() == per_member.size() - own &&
                  (own == 0 || scalars.own.size() == tensors.size()),
              "a multi-tensor launch's scalars: ", scalars.shared.size(), " shared and ", scalars.own.size(), " members' own for ",
              per_member.size(), " scalar inputs, ", own, " per member");
  const int64_t V = plan.variant.vector, chunk = int64_t(plan.variant.threads) * V * plan.variant.items;
  std::vector<uint64_t> first, entries;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ALLOY_CHECK(tensors[i].size() == pointers, "member ", i, " of a multi-tensor launch has ", tensors[i].size(), " tensors, not ", pointers);
    int64_t numel = tensors[i][0]->numel();
    bool contiguous = true, aligned = true;
    for (const Tensor* t : tensors[i]) {
      contiguous &= t->is_contiguous() && t->numel() == numel;
      aligned &= reinterpret_cast<uintptr_t>(t->data()) % uintptr_t(V * dtype_size(t->dtype())) == 0;
    }
    if (!contiguous) {
      plan.apart.push_back(i);
      continue;
    }
    if (numel == 0) continue;
    first.push_back(uint64_t(plan.chunks));
    plan.chunks += (numel + chunk - 1) / chunk;
    entries.push_back(uint64_t(numel));
    entries.push_back(aligned ? 1 : 0);
    for (const Tensor* t : tensors[i]) entries.push_back(uint64_t(reinterpret_cast<uintptr_t>(t->data())));
    if (own) {
      ALLOY_CHECK(scalars.own[i].size() == own, "member ", i, " of a multi-tensor launch has ", scalars.own[i].size(), " scalars of its own, not ", own);
      entries.insert(entries.end(), scalars.own[i].begin(), scalars.own[i].end());
    }
    ++plan.tensors;
    plan.vectorized += aligned;
  }
  std::vector<uint64_t>& words = plan.words;
  words.push_back(uint64_t(plan.tensors));
  words.push_back(uint64_t(plan.chunks));
  words.insert(words.end(), scalars.shared.begin(), scalars.shared.end());
  first.resize(size_t(members), 0);
  entries.resize(size_t(members) * (2 + pointers + own), 0);
  words.insert(words.end(), first.begin(), first.end());
  words.insert(words.end(), entries.begin(), entries.end());
  ALLOY_CHECK(int(words.size()) == multi_tensor_param_words(kernel, per_member, members), "the multi-tensor Params layout");
  if (plan.chunks == 0) return plan;
  // the blocks an SM holds at once, over every SM: each block strides over the chunks
  int64_t wave = int64_t(std::max(1, target.sm_count)) * std::max(1, 2048 / plan.variant.threads);
  plan.grid = unsigned(std::min(plan.chunks, wave));
  plan.block = unsigned(plan.variant.threads);
  plan.launch = true;
  return plan;
}

}  // namespace alloy::cuda
