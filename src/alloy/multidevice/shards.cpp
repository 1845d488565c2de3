#include "alloy/multidevice/shards.h"

#include "alloy/ir/printer.h"

namespace alloy::multidevice {

Tensor local_part(const Tensor& global, const Sharding& sharding, int team_rank, const std::string& what) {
  if (!sharding.shard_axis) return global;
  int axis = *sharding.shard_axis;
  int64_t n = int64_t(sharding.mesh.size());
  int64_t size = global.size(axis);
  if (size % n != 0)
    user_error_at(what + ", axis " + std::to_string(axis), "size ", size, " is sharded over the ", n, " devices of ",
                  mesh_str(sharding.mesh), ", which do not divide it evenly");
  std::vector<int64_t> sizes = global.sizes();
  sizes[size_t(axis)] = size / n;
  return packed_cpu(global.as_strided(sizes, global.strides(), global.offset() + team_rank * sizes[size_t(axis)] * global.stride(axis)));
}

Tensor gather_global(const Tensor& local, const Sharding& sharding, Communicator& team) {
  if (!sharding.shard_axis) return local;
  int axis = *sharding.shard_axis;
  std::vector<int> order{axis};
  for (int a = 0; a < local.dim(); ++a)
    if (a != axis) order.push_back(a);
  Tensor part = packed_cpu(local.permute(order));
  std::vector<int64_t> sizes = part.sizes();
  sizes[0] *= team.size();
  Tensor whole = Tensor::empty(local.dtype(), sizes);
  team.all_gather(part, whole);
  std::vector<int> back(order.size());
  for (size_t i = 0; i < order.size(); ++i) back[size_t(order[i])] = int(i);
  return packed_cpu(whole.permute(back));
}

int team_rank_of(const std::vector<int64_t>& mesh) {
  for (size_t i = 0; i < mesh.size(); ++i)
    if (mesh[i] == process().rank) return int(i);
  return -1;
}

}  // namespace alloy::multidevice
