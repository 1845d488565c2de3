#include "alloy/multidevice/communicator.h"

#include <map>
#include <mutex>

#include "alloy/multidevice/mpi_communicator.h"

namespace alloy::multidevice {

std::shared_ptr<Communicator> communicator_for(const std::vector<int64_t>& mesh, Device device) {
  static std::mutex mutex;
  static std::map<std::pair<std::vector<int64_t>, int>, std::shared_ptr<Communicator>> made;
  std::lock_guard lock(mutex);
  int key = device.kind == DeviceKind::cpu ? -1 : device.index;
  auto it = made.find({mesh, key});
  if (it != made.end()) return it->second;
  // made once per mesh (a rank outside it keeps its nullptr: making one is collective)
  auto host_it = made.find({mesh, -1});
  std::shared_ptr<Communicator> host = host_it != made.end() ? host_it->second : (made[{mesh, -1}] = host_communicator(mesh));
  std::shared_ptr<Communicator> c = device.kind == DeviceKind::cpu || !host ? host : device_communicator(host, device.index);
  made[{mesh, key}] = c;
  return c;
}

}  // namespace alloy::multidevice
