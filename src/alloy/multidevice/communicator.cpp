#include "alloy/multidevice/communicator.h"

#include <cstring>
#include <map>
#include <mutex>

#include "alloy/common/error.h"

#include "alloy/multidevice/mpi_communicator.h"

namespace alloy::multidevice {

Tensor part_of(const Tensor& parts, int r) {
  std::vector<int64_t> sizes(parts.sizes().begin() + 1, parts.sizes().end());
  std::vector<int64_t> strides(parts.strides().begin() + 1, parts.strides().end());
  return parts.as_strided(sizes, strides, parts.offset() + r * parts.stride(0));
}

void agree_on_step(Communicator& team, const std::function<void()>& step, const std::string& what,
                   const std::function<std::string(int)>& name_rank) {
  std::exception_ptr failure;
  try {
    step();
  } catch (...) {
    failure = std::current_exception();
  }
  int32_t mine = failure ? team.rank() : team.size(), lowest = team.size();
  if (team.size() > 1)
    team.all_reduce(Tensor::borrow(&mine, Device{}, DType::i32, {1}, {1}), Tensor::borrow(&lowest, Device{}, DType::i32, {1}, {1}),
                    PartialReduce::min);
  if (failure) std::rethrow_exception(failure);
  if (lowest < team.size())
    throw PeerError(what + ": " + (name_rank ? name_rank(lowest) : "rank " + std::to_string(lowest) + " of the team") +
                    " failed before communicating");
}

void Communicator::all_gather_into_parts(const Tensor& in, const Tensor& parts) {
  ALLOY_CHECK(parts.device().kind == DeviceKind::cpu, name(), ": all_gather_into_parts of device tensors");
  if (parts.is_contiguous()) return all_gather(packed_cpu(in), parts);
  Tensor whole = Tensor::empty(parts.dtype(), parts.sizes());
  all_gather(packed_cpu(in), whole);
  size_t bytes = size_t(whole.numel() / size()) * size_t(dtype_size(whole.dtype()));
  for (int r = 0; r < size(); ++r) {
    Tensor dst = part_of(parts, r);
    ALLOY_CHECK(dst.is_contiguous(), name(), ": part ", r, " of ", parts.str(), " is not contiguous");
    std::memcpy(dst.data(), part_of(whole, r).data(), bytes);
  }
}

LandedParts Communicator::all_gather_landed(const Tensor& in, const Tensor& parts) {
  ALLOY_CHECK(parts.defined(), name(), ": all_gather_landed without a buffer to copy the chunks into");
  all_gather_into_parts(in, parts);
  LandedParts landed;
  for (int r = 0; r < size(); ++r) landed.parts.push_back(part_of(parts, r));
  return landed;
}

LandedParts Communicator::reduce_scatter_parts_landed(const Tensor& parts, const Tensor& sum) {
  ALLOY_CHECK(sum.defined(), name(), ": reduce_scatter_parts_landed without a buffer to sum into");
  reduce_scatter_parts(parts, sum, PartialReduce::sum);
  return LandedParts{{sum}, 0, {}};
}

void Communicator::release_landed(const LandedParts& landed) {
  ALLOY_CHECK(landed.call == 0, name(), ": a landing to give back, but this communicator copies the chunks");
}

void Communicator::wait_landed_part(const LandedParts&, int part) {
  internal_error(name(), ": a wait for landed part ", part, " alone, but this communicator's parts land together");
}

void Communicator::send_recv(const Tensor& in, int to, const Tensor& out, int from) {
  if (to == rank() && from == rank()) {  // a ring of one (nothing else can pair with itself)
    ALLOY_CHECK(in.device().kind == DeviceKind::cpu && in.is_contiguous() && out.is_contiguous(), name(), ": send_recv to itself of ", in.str());
    if (in.data() != out.data()) std::memcpy(out.data(), in.data(), size_t(in.numel()) * size_t(dtype_size(in.dtype())));
    return;
  }
  if (rank() % 2 == 0) {
    send(in, to);
    recv(out, from);
  } else {
    recv(out, from);
    send(in, to);
  }
}

void Communicator::reduce_scatter_parts(const Tensor& parts, const Tensor& out, PartialReduce op) {
  ALLOY_CHECK(parts.device().kind == DeviceKind::cpu && out.is_contiguous(), name(), ": reduce_scatter_parts of device tensors");
  reduce_scatter(packed_cpu(parts), out, op);
}

void Communicator::reduce_scatter_parts_send(const Tensor&, PartialReduce) {}

void Communicator::reduce_scatter_parts_finish(const Tensor& parts, const Tensor& out, PartialReduce op) {
  Tensor own = part_of(parts, rank());
  ALLOY_CHECK(own.device().kind == DeviceKind::cpu && own.is_contiguous() && out.is_contiguous(), name(),
              ": reduce_scatter_parts_finish of ", out.str());
  if (own.data() != out.data()) std::memcpy(own.data(), out.data(), size_t(out.numel()) * size_t(dtype_size(out.dtype())));
  reduce_scatter_parts(parts, out, op);
}

void Communicator::reduce_scatter_parts_send_when_ready(const Tensor& parts, PartialReduce op, const std::function<void(int)>& ready) {
  for (int j = 1; j < size(); ++j) ready((rank() + j) % size());
  reduce_scatter_parts_send(parts, op);
}

std::shared_ptr<Communicator> communicator_for(const std::vector<int64_t>& mesh, Device device,
                                               const host_ir::DeviceRuntime* runtime) {
  static std::mutex mutex;
  static std::map<std::pair<std::vector<int64_t>, int>, std::shared_ptr<Communicator>> made;
  std::lock_guard lock(mutex);
  int key = device.kind == DeviceKind::cpu ? -1 : device.index;
  auto it = made.find({mesh, key});
  if (it != made.end()) return it->second;
  // made once per mesh (a rank outside it keeps its nullptr: making one is collective)
  auto host_it = made.find({mesh, -1});
  std::shared_ptr<Communicator> host = host_it != made.end() ? host_it->second : (made[{mesh, -1}] = host_communicator(mesh));
  if (device.kind == DeviceKind::cpu || !host) return made[{mesh, key}] = host;
  ALLOY_CHECK(runtime != nullptr && runtime->kind() == device.kind, "a communicator for ", device.str(), " without its device runtime");
  std::shared_ptr<Communicator> c = device_communicator(host, device.index, *runtime);
  made[{mesh, key}] = c;
  return c;
}

}  // namespace alloy::multidevice
