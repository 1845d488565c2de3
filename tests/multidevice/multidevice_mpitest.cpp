// Multi-process tests, run by CTest under `mpirun -n 2`, `-n 3` and `-n 4` (every rank runs every
// test; the mesh is the whole job, or all of it but the last rank where ranks outside a mesh are
// the point): each collective against values computed here, every sharded fusion against the same
// fusion run unsharded in this process, a property test over random fusions with random input
// shardings, and the failures that must not hang the job. Sizes are built from the job's size, so
// every test runs at any size from 1 to 4 (a test of ranks that disagree needs two, of a rank
// outside the mesh two, and says so at one).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "alloy/ir/parser.h"
#include "alloy/multidevice/agreement.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/multidevice/shards.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/trace_file.h"
#include "alloy/runtime/tune/machine_costs.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

#if ALLOY_HAVE_CUDA
#include "alloy/backend/backend.h"
#endif

namespace alloy {
namespace {

using multidevice::process;

std::vector<int64_t> world_mesh() {
  std::vector<int64_t> mesh;
  for (int r = 0; r < process().size; ++r) mesh.push_back(r);
  return mesh;
}

// The mesh of ranks 0 to devices - 1.
std::string mesh_text(int devices) {
  std::string out = "@mesh[";
  for (int r = 0; r < devices; ++r) out += (r ? ", " : "") + std::to_string(r);
  return out + "]";
}

std::string world_mesh_text() { return mesh_text(process().size); }

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) text.replace(at, from.size(), to);
}

// `text` (an example) on a mesh of `devices` ranks: every "@mesh[0, 1]" becomes that mesh, and
// the examples' feature sizes, 256 and 1024, become 64 and 256 a device where the mesh does not
// divide them (192 and 768 on three devices), so every example runs on a mesh of any size.
std::string on_mesh(std::string text, int devices) {
  replace_all(text, "@mesh[0, 1]", mesh_text(devices));
  if (256 % devices != 0) {
    replace_all(text, "1024", "<H>");
    replace_all(text, "256", std::to_string(64 * devices));
    replace_all(text, "<H>", std::to_string(256 * devices));
  }
  return text;
}

// ALLOY_MPI_TEST_DEVICE=cuda (scripts/gpu-check sets it) runs the sharded fusions and the
// collectives on each rank's GPU too (NCCL, or the staged path where ranks share one GPU); a
// machine that cannot then fails rather than skips.
bool on_gpu() {
  const char* d = std::getenv("ALLOY_MPI_TEST_DEVICE");
  return d && std::string(d) == "cuda";
}

DeviceChoice sharded_device() { return on_gpu() ? DeviceChoice::cuda : DeviceChoice::cpu; }

Tensor filled(DType dtype, std::vector<int64_t> sizes, const std::function<double(int64_t)>& value) {
  Tensor t = Tensor::empty(dtype, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) store_double(t.data(), dtype, i, value(i));
  return t;
}

// ---- collectives -----------------------------------------------------------------------------

class Collectives : public ::testing::TestWithParam<DType> {};

TEST_P(Collectives, AllGather_PutsEveryRanksPartInRankOrder) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  int n = team->size(), r = team->rank();
  Tensor mine = filled(GetParam(), {3}, [&](int64_t i) { return r * 10 + i; });
  Tensor all = Tensor::empty(GetParam(), {3 * n});
  team->all_gather(mine, all);
  EXPECT_TRUE(testing::tensors_close(all, filled(GetParam(), {3 * n}, [](int64_t i) { return (i / 3) * 10 + i % 3; })));
}

TEST_P(Collectives, ReduceScatterAndAllReduce_SumMaxAndMin) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  int n = team->size(), r = team->rank();
  Tensor terms = filled(GetParam(), {2 * n}, [&](int64_t i) { return (r + 1) * (i + 1); });
  Tensor part = Tensor::empty(GetParam(), {2});
  team->reduce_scatter(terms, part, PartialReduce::sum);
  double ranks = n * (n + 1) / 2.0;  // sum of (r + 1)
  EXPECT_TRUE(testing::tensors_close(part, filled(GetParam(), {2}, [&](int64_t i) { return ranks * (2 * r + i + 1); })));
  Tensor whole = Tensor::empty(GetParam(), {2 * n});
  team->all_reduce(terms, whole, PartialReduce::max);
  EXPECT_TRUE(testing::tensors_close(whole, filled(GetParam(), {2 * n}, [&](int64_t i) { return n * (i + 1); })));
  team->all_reduce(terms, whole, PartialReduce::min);
  EXPECT_TRUE(testing::tensors_close(whole, filled(GetParam(), {2 * n}, [&](int64_t i) { return i + 1; })));
}

TEST_P(Collectives, AllToAll_SendsPartRToRankR) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  int n = team->size(), r = team->rank();
  Tensor send = filled(GetParam(), {2 * n}, [&](int64_t i) { return r * 100 + i; });  // part p = elements 2p, 2p+1
  Tensor received = Tensor::empty(GetParam(), {2 * n});
  team->all_to_all(send, received);
  // part s of what I receive is rank s's part r
  EXPECT_TRUE(testing::tensors_close(received, filled(GetParam(), {2 * n}, [&](int64_t i) { return (i / 2) * 100 + 2 * r + i % 2; })));
}

TEST_P(Collectives, BroadcastAndSendRecv) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  int n = team->size(), r = team->rank();
  Tensor b = filled(GetParam(), {4}, [&](int64_t i) { return r == n - 1 ? i + 5 : 0; });
  team->broadcast(b, n - 1);
  EXPECT_TRUE(testing::tensors_close(b, filled(GetParam(), {4}, [](int64_t i) { return i + 5; })));
  if (n == 1) return;  // a team of one has no neighbour to send to
  // a ring: even ranks send first, odd ranks receive first
  Tensor out = filled(GetParam(), {4}, [&](int64_t i) { return r + i; });
  Tensor in = Tensor::empty(GetParam(), {4});
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  if (r % 2 == 0) {
    team->send(out, next);
    team->recv(in, prev);
  } else {
    team->recv(in, prev);
    team->send(out, next);
  }
  EXPECT_TRUE(testing::tensors_close(in, filled(GetParam(), {4}, [&](int64_t i) { return prev + i; })));
}

// A ring step: every rank sends to r + 1 and receives from r - 1 at once (MPI_Sendrecv), and the
// default's parity order of send and recv, which any communicator without its own falls back to.
TEST_P(Collectives, SendRecv_ShiftsARingByOneWithoutDeadlock) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  int n = team->size(), r = team->rank();
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor mine = filled(GetParam(), {5}, [&](int64_t i) { return r * 7 + i; });
  Tensor expected = filled(GetParam(), {5}, [&](int64_t i) { return prev * 7 + i; });
  Tensor in = Tensor::empty(GetParam(), {5});
  team->send_recv(mine, next, in, prev);
  EXPECT_TRUE(testing::tensors_close(in, expected));
  Tensor again = Tensor::empty(GetParam(), {5});
  team->Communicator::send_recv(mine, next, again, prev);
  EXPECT_TRUE(testing::tensors_close(again, expected));
}

// Rows [a, b) of whole buffers, as a pipelined GEMM -> all-reduce loop hands them (views at an
// offset): those rows are the sum over the ranks, every other row of the result stays as it was.
template <class OnDevice, class OnHost>
void expect_all_reduce_of_rows(multidevice::Communicator& team, DType t, OnDevice on_device, OnHost on_host) {
  int n = team.size(), r = team.rank();
  const int64_t rows = 7, width = 3, begin = 2, end = 5;
  Tensor partial = on_device(filled(t, {rows, width}, [&](int64_t i) { return (r + 1) * (i % 11); }));
  Tensor sum = on_device(filled(t, {rows, width}, [](int64_t) { return -1; }));
  auto rows_of = [&](const Tensor& whole) {
    return whole.as_strided({end - begin, width}, whole.strides(), whole.offset() + begin * whole.stride(0));
  };
  team.all_reduce(rows_of(partial), rows_of(sum), PartialReduce::sum);
  double ranks = n * (n + 1) / 2.0;
  Tensor expected = filled(t, {rows, width}, [&](int64_t i) { return i / width >= begin && i / width < end ? ranks * (i % 11) : -1; });
  EXPECT_TRUE(testing::tensors_close(on_host(sum), expected));
}

TEST_P(Collectives, AllReduce_OfRowsOfWholeBuffers_LeavesTheOtherRows) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  expect_all_reduce_of_rows(*team, GetParam(), [](const Tensor& t) { return t; }, [](const Tensor& t) { return t; });
}

// The landed all-gather of a pipelined loop (issue 25), call after call as a loop makes them: each
// rank's chunk readable where the call says, until its release; a team that lands in place (the
// copy engines) is handed no buffer and reuses its places (two a peer) at every other call, so
// five calls with a copying all-gather between reuse both; the others copy into the buffer.
template <class OnDevice, class OnHost>
void expect_landed_all_gathers(multidevice::Communicator& team, DType t, OnDevice on_device, OnHost on_host) {
  int n = team.size(), r = team.rank();
  // integers below 256: exact in bf16
  auto chunk = [&](int rank, int call) { return filled(t, {3, 2}, [&](int64_t i) { return rank * 16 + call * 32 + i; }); };
  for (int call = 0; call < 5; ++call) {
    SCOPED_TRACE("call " + std::to_string(call) + " through " + team.name());
    Tensor buffer = team.lands_in_place() ? Tensor() : on_device(Tensor::empty(t, {n, 3, 2}));
    multidevice::LandedParts landed = team.all_gather_landed(on_device(chunk(r, call)), buffer);
    ASSERT_EQ(landed.parts.size(), size_t(n));
    EXPECT_EQ(landed.call != 0, team.lands_in_place()) << "only a landing is given back";
    for (int q = 0; q < n; ++q) EXPECT_TRUE(testing::tensors_close(on_host(landed.parts[size_t(q)]), chunk(q, call))) << "rank " << q;
    team.release_landed(landed);
    if (call == 2) {  // a copying all-gather between: its call takes a place of its own
      Tensor parts = on_device(Tensor::empty(t, {n, 3, 2}));
      team.all_gather_into_parts(on_device(chunk(r, 7)), parts);
      Tensor all = on_host(parts);
      for (int q = 0; q < n; ++q) EXPECT_TRUE(testing::tensors_close(multidevice::part_of(all, q), chunk(q, 7))) << "rank " << q;
    }
  }
}

TEST_P(Collectives, AllGatherLanded_CopiesIntoTheBufferCallAfterCall) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  EXPECT_FALSE(team->lands_in_place()) << team->name();
  expect_landed_all_gathers(*team, GetParam(), [](const Tensor& t) { return t; }, [](const Tensor& t) { return t; });
}

// The landed reduce-scatter of a pipelined GEMM -> reduce-scatter loop (issue 25), call after
// call as a loop makes them (its send, then its landing): what lands adds up to the other ranks'
// parts for this rank, this rank's own term being zeros (the loop's own GEMM adds its own part
// later). A team that lands in place (the copy engines) is handed no chunk to sum into and leaves
// a part per peer in its slots, reused at every other call, so five calls with a whole
// reduce-scatter between reuse both; the others reduce into the chunk, the one part.
template <class OnDevice, class OnHost>
void expect_landed_reduce_scatters(multidevice::Communicator& team, DType t, OnDevice on_device, OnHost on_host) {
  int n = team.size(), r = team.rank();
  // rank q's partial sums for rank p at call c: integers below 16, so every sum is exact in bf16
  auto part = [&](int q, int p, int call) { return filled(t, {3, 2}, [&](int64_t i) { return double((q * 5 + p * 3 + call * 7 + i) % 16); }); };
  auto host_parts = [&](int call, bool own_zero) {
    Tensor parts = Tensor::empty(t, {n, 3, 2});
    for (int p = 0; p < n; ++p) {
      Tensor mine = p == r && own_zero ? filled(t, {3, 2}, [](int64_t) { return 0.0; }) : part(r, p, call);
      std::memcpy(multidevice::part_of(parts, p).data(), mine.data(), size_t(mine.numel()) * size_t(dtype_size(t)));
    }
    return parts;
  };
  for (int call = 0; call < 5; ++call) {
    SCOPED_TRACE("call " + std::to_string(call) + " through " + team.name());
    Tensor parts = on_device(host_parts(call, true));
    team.reduce_scatter_parts_send(parts, PartialReduce::sum);
    Tensor sum = team.lands_in_place() ? Tensor() : on_device(Tensor::empty(t, {3, 2}));
    multidevice::LandedParts landed = team.reduce_scatter_parts_landed(parts, sum);
    EXPECT_EQ(landed.call != 0, team.lands_in_place()) << "only a landing is given back";
    EXPECT_EQ(landed.parts.size(), team.lands_in_place() ? size_t(n - 1) : size_t(1));
    Tensor expected = filled(t, {3, 2}, [&](int64_t i) {
      double s = 0;
      for (int q = 0; q < n; ++q)
        if (q != r) s += load_as_double(part(q, r, call).data(), t, i);
      return s;
    });
    Tensor total = filled(t, {3, 2}, [](int64_t) { return 0.0; });
    for (const Tensor& landed_part : landed.parts) {
      Tensor h = on_host(landed_part);
      for (int64_t i = 0; i < 6; ++i) store_double(total.data(), t, i, load_as_double(total.data(), t, i) + load_as_double(h.data(), t, i));
    }
    EXPECT_TRUE(testing::tensors_close(total, expected));
    team.release_landed(landed);
    if (call == 2) {  // a whole reduce-scatter between: its call takes a slot of its own
      Tensor whole = on_device(host_parts(7, false));
      Tensor out = on_device(Tensor::empty(t, {3, 2}));
      team.reduce_scatter_parts(whole, out, PartialReduce::sum);
      Tensor all = filled(t, {3, 2}, [&](int64_t i) {
        double s = 0;
        for (int q = 0; q < n; ++q) s += load_as_double(part(q, r, 7).data(), t, i);
        return s;
      });
      EXPECT_TRUE(testing::tensors_close(on_host(out), all));
    }
  }
}

TEST_P(Collectives, ReduceScatterLanded_SumsIntoTheChunkCallAfterCall) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  expect_landed_reduce_scatters(*team, GetParam(), [](const Tensor& t) { return t; }, [](const Tensor& t) { return t; });
}

// The same collectives on device tensors, through the communicator a GPU run uses.
class DeviceCollectives : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!on_gpu()) GTEST_SKIP() << "device collectives run where ALLOY_MPI_TEST_DEVICE=cuda (scripts/gpu-check on the GPU machine)";
#if !ALLOY_HAVE_CUDA
    FAIL() << "ALLOY_MPI_TEST_DEVICE=cuda but this build has no CUDA backend";
#else
    ASSERT_TRUE(gpu().available()) << "ALLOY_MPI_TEST_DEVICE=cuda but no GPU: " << gpu().unavailable_reason();
    device_ = Device{DeviceKind::cuda, process().local_rank % gpu().device_count()};
#endif
  }
#if ALLOY_HAVE_CUDA
  static const host_ir::DeviceRuntime& gpu() { return backend::device_runtime(DeviceKind::cuda); }
  Tensor on_device(const Tensor& t) const { return gpu().to_device(t, device_.index); }
  Tensor on_host(const Tensor& t) const { return gpu().to_host(t); }
#endif
  Device device_{};
};

#if ALLOY_HAVE_CUDA
TEST_P(DeviceCollectives, AllGatherReduceScatterAllReduceAndAllToAll) {
  auto team = multidevice::communicator_for(world_mesh(), device_, &gpu());
  int n = team->size(), r = team->rank();
  DType t = GetParam();
  Tensor mine = on_device(filled(t, {3}, [&](int64_t i) { return r * 10 + i; }));
  Tensor all = on_device(Tensor::empty(t, {3 * n}));
  team->all_gather(mine, all);
  EXPECT_TRUE(testing::tensors_close(on_host(all), filled(t, {3 * n}, [](int64_t i) { return (i / 3) * 10 + i % 3; })));
  Tensor terms = on_device(filled(t, {2 * n}, [&](int64_t i) { return (r + 1) * (i + 1); }));
  Tensor part = on_device(Tensor::empty(t, {2}));
  team->reduce_scatter(terms, part, PartialReduce::sum);
  double ranks = n * (n + 1) / 2.0;
  EXPECT_TRUE(testing::tensors_close(on_host(part), filled(t, {2}, [&](int64_t i) { return ranks * (2 * r + i + 1); })));
  Tensor whole = on_device(Tensor::empty(t, {2 * n}));
  team->all_reduce(terms, whole, PartialReduce::max);
  EXPECT_TRUE(testing::tensors_close(on_host(whole), filled(t, {2 * n}, [&](int64_t i) { return n * (i + 1); })));
  Tensor send = on_device(filled(t, {2 * n}, [&](int64_t i) { return r * 100 + i; }));
  Tensor received = on_device(Tensor::empty(t, {2 * n}));
  team->all_to_all(send, received);
  EXPECT_TRUE(testing::tensors_close(on_host(received), filled(t, {2 * n}, [&](int64_t i) { return (i / 2) * 100 + 2 * r + i % 2; })));
  // a ring step (NCCL: send and recv in one group; staged: through MPI_Sendrecv)
  Tensor ring_in = on_device(Tensor::empty(t, {5}));
  team->send_recv(on_device(filled(t, {5}, [&](int64_t i) { return r * 7 + i; })), (r + 1) % n, ring_in, (r + n - 1) % n);
  EXPECT_TRUE(testing::tensors_close(on_host(ring_in), filled(t, {5}, [&](int64_t i) { return ((r + n - 1) % n) * 7 + i; })));
  // rows of whole buffers (NCCL on the current stream, or the staged path)
  expect_all_reduce_of_rows(*team, t, [&](const Tensor& h) { return on_device(h); }, [&](const Tensor& d) { return on_host(d); });
}

// The copy engines' landed all-gather where the team has them (GPUs of one host that reach each
// other): the peers' chunks read in their staging slots, released call by call; elsewhere (NCCL,
// the staged path) copied into the buffer.
TEST_P(DeviceCollectives, AllGatherLanded_CallAfterCall) {
  auto team = multidevice::communicator_for(world_mesh(), device_, &gpu());
  expect_landed_all_gathers(*team, GetParam(), [&](const Tensor& h) { return on_device(h); }, [&](const Tensor& d) { return on_host(d); });
}

// The landed reduce-scatter on GPUs: the peers' parts in the copy engines' slots where the team
// has them (released call by call), elsewhere (NCCL, the staged path) reduced into the chunk.
TEST_P(DeviceCollectives, ReduceScatterLanded_CallAfterCall) {
  auto team = multidevice::communicator_for(world_mesh(), device_, &gpu());
  expect_landed_reduce_scatters(*team, GetParam(), [&](const Tensor& h) { return on_device(h); }, [&](const Tensor& d) { return on_host(d); });
}
#else
TEST_P(DeviceCollectives, NeedTheCudaBackend) {}
#endif

INSTANTIATE_TEST_SUITE_P(Dtypes, DeviceCollectives, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Dtypes, Collectives, ::testing::Values(DType::f32, DType::bf16, DType::f64, DType::i64, DType::i32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- sharded fusions against the same fusion in one process --------------------------------

std::unique_ptr<Fusion> without_shardings(const Fusion& f) {
  auto plain = f.clone();
  for (auto& v : plain->values()) {
    v->sharding.reset();
    v->sharding_source = {};
  }
  return plain;
}

// Runs `text` sharded (each rank its part of the same global inputs) and unsharded, and compares
// every output's global value; each rank must hold only its part of a sharded output.
void expect_sharded_matches_unsharded(const std::string& text, const Bindings& sizes, uint64_t seed = 3, double scale = 1.0,
                                      const std::string& pipeline = "auto") {
  auto fusion = parse_fusion(text, "mpi.fusion");
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()),
                                               resolve_input_sizes(*fusion, std::vector<Tensor>(fusion->inputs().size()), {}), seed);
  (void)sizes;
  FusionExecutor reference(without_shardings(*fusion), {DeviceChoice::cpu});
  std::vector<Tensor> expected = reference.run(inputs);

  ExecutorOptions options{sharded_device()};
  options.pipeline = pipeline;
  FusionExecutor sharded(std::move(fusion), options);
  auto in_shardings = sharded.input_shardings(), out_shardings = sharded.output_shardings();
  ASSERT_EQ(in_shardings.size(), inputs.size());
  int team_rank = multidevice::team_rank_of(in_shardings[0]->mesh);
  std::vector<Tensor> local;
  for (size_t i = 0; i < inputs.size(); ++i)
    local.push_back(in_shardings[i] ? multidevice::local_part(inputs[i], *in_shardings[i], team_rank, "input") : inputs[i]);
  std::vector<Tensor> outputs = sharded.run(local);
  ASSERT_EQ(outputs.size(), expected.size());
  auto team = multidevice::communicator_for(in_shardings[0]->mesh, Device{});
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Sharding& s = *out_shardings[i];
    if (s.shard_axis)
      EXPECT_EQ(outputs[i].size(*s.shard_axis) * int64_t(s.mesh.size()), expected[i].size(*s.shard_axis)) << "output " << i;
    Tensor global = multidevice::gather_global(to_cpu(outputs[i]), s, *team);
    EXPECT_TRUE(testing::tensors_close(global, expected[i], scale)) << "output " << i << " of\n" << text;
  }
}

// The sequence-parallel MLP in f32: its second GEMM sums 1024 products into outputs of RMS about
// 360, which a GPU's blocked accumulation and the reference's double sum round differently by a
// few ulps of that RMS, more than the 4 tensors_close allows where cuBLASLt's autotuned candidate
// sums in another order (on an H100 with two ranks sharing it, about one run in three had 10 of
// 5120 elements 1.3e-4 apart: 4e-7 of the RMS). Four times the allowance; a wrong row or element
// is still off by far more.
constexpr double kDeepF32GemmScale = 4.0;

std::string example(const std::string& name, int devices = process().size) {
  return on_mesh(testing::read_file(testing::source_path("examples/" + name + ".fusion")), devices);
}

std::string with_sizes(std::string text) {
  // the examples' T, bound by replacing the symbol's declarations: 4 rows a rank of the job (8 on
  // two), so a mesh of the whole job divides it
  replace_all(text, "[T,", "[" + std::to_string(4 * process().size) + ",");
  return text;
}

TEST(ShardedFusions, TheTensorParallelMlp_ForwardAndBackward) {
  expect_sharded_matches_unsharded(with_sizes(example("tp_mlp")), {});
  expect_sharded_matches_unsharded(with_sizes(example("tp_mlp_backward")), {});
}

TEST(ShardedFusions, TheSequenceParallelMlp) { expect_sharded_matches_unsharded(with_sizes(example("tp_mlp_sequence_parallel")), {}); }

// Issue 25: the sharding is decided at the bound sizes, per binding. The sequence-parallel MLP
// with only its output annotated, C = 12 features and H = 48 (divisible over 1 to 4 devices):
// gathering the tokens and reduce-scattering the output moves 2 * T * 48 bytes, gathering the
// weights 4800, so one cached executor moves the tokens at T = 4 a device, the weights at T = 128
// a device, and the tokens again; each run equals the unsharded one, and a decision is compiled
// once (the plan where T is unbound, 4096, is the weights').
TEST(ShardedFusions, TheSequenceParallelMlp_DecidesPerBinding) {
  const int n = process().size;
  std::string m = world_mesh_text();
  std::string text = "fusion sp(x: f32[T, 12] " + m + " shard(axis=0), w_fc: f32[48, 12] " + m + " shard(axis=0), b_fc: f32[48] " + m +
                     " shard(axis=0),\n  w_proj: f32[12, 48] " + m + " shard(axis=1), b_proj: f32[12] " + m + R"( replicated) {
    h = linear(x, w_fc, b_fc)
    g = gelu(h, approximate="tanh")
    y = linear(g, w_proj, b_proj) )" + m + R"( shard(axis=0)
    return y
  })";
  auto fusion = parse_fusion(text, "sp.fusion");
  FusionExecutor reference(without_shardings(*fusion), {DeviceChoice::cpu});
  FusionExecutor sharded(parse_fusion(text, "sp.fusion"), ExecutorOptions{sharded_device()});
  auto in_shardings = sharded.input_shardings();
  const Sharding out_sharding = *sharded.output_shardings().at(0);
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  for (int64_t rows : {4, 128, 4}) {
    const int64_t t = rows * n;
    SCOPED_TRACE("T = " + std::to_string(t));
    std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(5), {{"T", t}}, uint64_t(t));
    std::vector<Tensor> local;
    for (size_t i = 0; i < inputs.size(); ++i) local.push_back(multidevice::local_part(inputs[i], *in_shardings[i], team->rank(), "in"));
    std::vector<Tensor> out = sharded.run(local);
    EXPECT_EQ(out.at(0).size(0), rows);
    EXPECT_TRUE(testing::tensors_close(multidevice::gather_global(to_cpu(out.at(0)), out_sharding, *team), reference.run(inputs).at(0)));
    std::string program = sharded.dump("program");  // the plan of the last run (no communication)
    bool tokens = rows == 4;
    EXPECT_EQ(program.find("all_gather(axis=0) x:") != std::string::npos, tokens) << program;
    EXPECT_EQ(program.find("reduce_scatter(axis=0, reduce=\"sum\") y__computed") != std::string::npos, tokens) << program;
    EXPECT_EQ(program.find("all_gather(axis=0) w_fc:") != std::string::npos, !tokens) << program;
    EXPECT_EQ(program.find("all_gather(axis=1) w_proj:") != std::string::npos, !tokens) << program;
  }
  EXPECT_EQ(sharded.plans_built(), 2);
}

TEST(ShardedFusions, LayerNormAndReductionsOverAShardedAxis) {
  expect_sharded_matches_unsharded(with_sizes(example("sharded_layer_norm")), {});
  std::string m = world_mesh_text();
  expect_sharded_matches_unsharded("fusion f(x: f32[8, 12] " + m + R"( shard(axis=1)) {
    a = mean(x, dims=[1], keepdim=true)
    v, u = var_mean(x, dims=[1], correction=1, keepdim=false)
    s = softmax(x, dim=1)
    lo = min(x, dims=[0, 1])
    return a, v, u, s, lo
  })", {});
}

TEST(ShardedFusions, EveryReshard) {
  std::string m = world_mesh_text();
  std::string a0 = std::to_string(2 * process().size), a1 = std::to_string(4 * process().size);  // 12 divides over 1 to 4
  expect_sharded_matches_unsharded("fusion f(x: f32[" + a0 + ", " + a1 + ", 12] " + m + " shard(axis=1), w: f32[12, 12] " + m + R"( shard(axis=1)) {
    a = exp(x) )" + m + R"( shard(axis=2)
    b = neg(a) )" + m + R"( replicated
    c = tanh(b) )" + m + R"( shard(axis=0)
    d = linear(c, w) )" + m + R"( shard(axis=1)
    e = linear(b, w)
    return a, b, c, d, e
  })", {});
}

TEST(ShardedFusions, Bf16TensorParallelMlp_WithinBf16Rounding) {
  std::string text = with_sizes(example("tp_mlp"));
  for (size_t at = text.find("f32"); at != std::string::npos; at = text.find("f32", at + 1)) text.replace(at, 3, "bf16");
  expect_sharded_matches_unsharded(text, {}, 5, 4.0);
}

// ---- pipelined collectives (issue 13) --------------------------------------------------------

// The sequence-parallel MLP (all-gather + GEMM, GEMM + reduce-scatter) and a backward-shaped
// chain, in 1 to 5 chunks, with rows per device that the chunks divide and that they do not, and
// fewer rows than chunks: every pipelined program equals the unsharded run.
TEST(PipelinedFusions, ChunkedGatherGemmAndGemmScatter_EqualTheUnshardedRun) {
  std::string sp = example("tp_mlp_sequence_parallel");
  int n = process().size;
  for (int rows_per_device : {1, 3, 4, 10}) {
    std::string text = sp;
    std::string t = std::to_string(rows_per_device * n);
    for (size_t at = text.find("[T,"); at != std::string::npos; at = text.find("[T,", at + 1)) text.replace(at, 2, "[" + t);
    for (const char* pipeline : {"off", "chunks=1", "chunks=2", "chunks=3", "chunks=5"}) {
      SCOPED_TRACE(std::string(pipeline) + ", rows per device " + std::to_string(rows_per_device));
      expect_sharded_matches_unsharded(text, {}, 7, kDeepF32GemmScale, pipeline);
    }
  }
  std::string m = world_mesh_text();
  // a bias-free GEMM pair with a GELU between, bf16, and a gathered value also used after the GEMM
  // (16 hidden features a device)
  std::string hidden = std::to_string(16 * n);
  std::string chain = "fusion f(x: bf16[" + std::to_string(8 * n) + ", 16] " + m + " shard(axis=0), w1: bf16[" + hidden + ", 16] " + m +
                      " shard(axis=0), w2: bf16[16, " + hidden + "] " + m + R"( shard(axis=1)) {
    h = linear(x, w1) )" + m + R"( shard(axis=1)
    g = gelu(h, approximate="tanh")
    y = linear(g, w2) )" + m + R"( shard(axis=0)
    x_all = neg(x) )" + m + R"( replicated
    return y, x_all
  })";
  for (const char* pipeline : {"off", "chunks=3", "ring"}) {
    SCOPED_TRACE(pipeline);
    expect_sharded_matches_unsharded(chain, {}, 11, 4.0, pipeline);
  }
  // the same pairs of matmuls of a 3-D activation by matrices (rows along axis 0), 3 rows a device
  std::string batch = "fusion f(x: f32[" + std::to_string(3 * n) + ", 5, 16] " + m + " shard(axis=0), w1: f32[16, " + hidden + "] " + m +
                      " shard(axis=1), w2: f32[" + hidden + ", 16] " + m + R"( shard(axis=0)) {
    h = matmul(x, w1) )" + m + R"( shard(axis=2)
    g = relu(h)
    y = matmul(g, w2) )" + m + R"( shard(axis=0)
    return y
  })";
  for (const char* pipeline : {"off", "chunks=2", "chunks=4"}) {
    SCOPED_TRACE(std::string("3-D matmuls, ") + pipeline);
    expect_sharded_matches_unsharded(batch, {}, 13, kDeepF32GemmScale, pipeline);
  }
}

// The ring (send/recv between neighbours, one step a rank): the sequence-parallel MLP with 1 to
// 10 rows a device, and the bf16 chain with a GELU between the GEMMs, equal the unsharded run.
TEST(PipelinedFusions, RingGatherGemmAndGemmScatter_EqualTheUnshardedRun) {
  std::string sp = example("tp_mlp_sequence_parallel");
  int n = process().size;
  for (int rows_per_device : {1, 3, 10}) {
    std::string text = sp;
    std::string t = std::to_string(rows_per_device * n);
    for (size_t at = text.find("[T,"); at != std::string::npos; at = text.find("[T,", at + 1)) text.replace(at, 2, "[" + t);
    SCOPED_TRACE("ring, rows per device " + std::to_string(rows_per_device));
    expect_sharded_matches_unsharded(text, {}, 7, kDeepF32GemmScale, "ring");
  }
}

// Integer-valued inputs: every partial sum is exact in f32 whatever its order, so the ring's
// reduce-scatter (a running sum passed around) equals the collective's to the bit.
TEST(PipelinedFusions, Ring_OnIntegerValuedInputs_IsExact) {
  int n = process().size;
  std::string m = world_mesh_text();
  std::string text = "fusion f(x: f32[" + std::to_string(4 * n) + ", 8] " + m + " shard(axis=0), w1: f32[" + std::to_string(4 * n) +
                     ", 8] " + m + " shard(axis=0), w2: f32[8, " + std::to_string(4 * n) + "] " + m + R"( shard(axis=1)) {
    h = linear(x, w1) )" + m + R"( shard(axis=1)
    y = linear(h, w2) )" + m + R"( shard(axis=0)
    return y
  })";
  auto fusion = parse_fusion(text, "ring.fusion");
  std::vector<Tensor> inputs;
  for (const Value* in : fusion->inputs()) {
    std::vector<int64_t> sizes;
    for (const Extent& e : in->shape()) sizes.push_back(*e.constant_value());
    inputs.push_back(filled(DType::f32, sizes, [&](int64_t i) { return double((i * 7 + in->id) % 5) - 2; }));
  }
  std::vector<Tensor> results;
  for (const char* pipeline : {"off", "ring"}) {
    ExecutorOptions options{sharded_device()};
    options.pipeline = pipeline;
    FusionExecutor sharded(parse_fusion(text, "ring.fusion"), options);
    auto in_shardings = sharded.input_shardings();
    int team_rank = multidevice::team_rank_of(in_shardings[0]->mesh);
    std::vector<Tensor> local;
    for (size_t i = 0; i < inputs.size(); ++i) local.push_back(multidevice::local_part(inputs[i], *in_shardings[i], team_rank, "input"));
    results.push_back(to_cpu(sharded.run(local).at(0)));
  }
  ASSERT_EQ(results[0].sizes(), results[1].sizes());
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), size_t(results[0].numel()) * 4), 0);
}

// The Megatron MLP's row-parallel linear (GEMM -> all-reduce of its partial sums) and the
// backward's input gradient (dx = dh @ w_fc, all-reduced), chunked over the token rows: fewer
// tokens than chunks, token counts the chunks do not divide and divide; the forward in bf16 too.
// (Each case is a pair of executors: few cases, the CI's two cores run this at 4 ranks.) Every
// rank holds every token, so T need not divide by the mesh.
TEST(PipelinedFusions, ChunkedGemmAllReduce_MegatronMlpForwardAndBackward_EqualTheUnshardedRun) {
  const std::string forward = example("tp_mlp"), backward = example("tp_mlp_backward");
  for (auto [tokens, pipeline] : std::vector<std::pair<int, const char*>>{{1, "chunks=4"}, {7, "chunks=5"}, {12, "chunks=2"}}) {
    std::string t = "[" + std::to_string(tokens) + ",";
    std::string f = forward, b = backward;
    replace_all(f, "[T,", t);
    replace_all(b, "[T,", t);
    SCOPED_TRACE(std::string(pipeline) + ", " + std::to_string(tokens) + " tokens");
    expect_sharded_matches_unsharded(f, {}, 13, kDeepF32GemmScale, pipeline);
    if (tokens != 12) expect_sharded_matches_unsharded(b, {}, 17, kDeepF32GemmScale, pipeline);
  }
  std::string bf16 = with_sizes(example("tp_mlp"));
  replace_all(bf16, "f32", "bf16");
  expect_sharded_matches_unsharded(bf16, {}, 5, 4.0, "chunks=3");
}

// Runs `text` sharded with `pipeline` on the global `inputs` and returns the first output (a
// replicated one: every rank's whole value); `program` gets the program that ran.
Tensor run_sharded(const std::string& text, const std::vector<Tensor>& inputs, const std::string& pipeline, std::string& program) {
  ExecutorOptions options{sharded_device()};
  options.pipeline = pipeline;
  FusionExecutor sharded(parse_fusion(text, "pipelined.fusion"), options);
  auto in_shardings = sharded.input_shardings();
  int team_rank = multidevice::team_rank_of(in_shardings[0]->mesh);
  std::vector<Tensor> local;
  for (size_t i = 0; i < inputs.size(); ++i)
    local.push_back(in_shardings[i] ? multidevice::local_part(inputs[i], *in_shardings[i], team_rank, "input") : inputs[i]);
  Tensor out = to_cpu(sharded.run(local).at(0));
  program = sharded.dump("program");
  return out;
}

// Integer-valued inputs (the bias a multiple of 12, so bias / n is exact on 1 to 4 ranks): every
// partial sum is exact in f32 whatever its order, so each chunked program equals off to the bit;
// and the bias is added once (the output is the unsharded one exactly).
TEST(PipelinedFusions, ChunkedGemmAllReduce_OnIntegerValuedInputs_IsExactAndAddsTheBiasOnce) {
  int n = process().size;
  std::string m = world_mesh_text();
  std::string hidden = std::to_string(4 * n);
  std::string text = "fusion f(x: f32[9, 8] " + m + " replicated, w1: f32[" + hidden + ", 8] " + m + " shard(axis=0), w2: f32[8, " + hidden +
                     "] " + m + " shard(axis=1), b2: f32[8] " + m + R"( replicated) {
    h = linear(x, w1)
    y = linear(h, w2, b2)
    return y
  })";
  auto fusion = parse_fusion(text, "exact.fusion");
  std::vector<Tensor> inputs;
  for (const Value* in : fusion->inputs()) {
    std::vector<int64_t> sizes;
    for (const Extent& e : in->shape()) sizes.push_back(*e.constant_value());
    double scale = in->name == "b2" ? 12 : 1;
    inputs.push_back(filled(DType::f32, sizes, [&](int64_t i) { return scale * (double((i * 7 + in->id) % 5) - 2); }));
  }
  Tensor expected = FusionExecutor(without_shardings(*fusion), {DeviceChoice::cpu}).run(inputs).at(0);
  for (const char* pipeline : {"off", "chunks=2", "chunks=4", "chunks=16"}) {
    SCOPED_TRACE(pipeline);
    std::string program;
    Tensor y = run_sharded(text, inputs, pipeline, program);
    // (a team of one has no all-reduce to pipeline)
    // (fc1 leads the loop: chunk i's all-reduce beside chunk i + 1's fc1 and fc2)
    EXPECT_EQ(program.find("(linear h -> linear y__partial -> all_reduce: ") != std::string::npos, n > 1 && std::string(pipeline) != "off")
        << program;
    ASSERT_EQ(y.sizes(), expected.sizes());
    EXPECT_EQ(std::memcmp(y.data(), expected.data(), size_t(y.numel()) * 4), 0);
  }
}

// The all-gather -> GEMM pair over every rank whose gathered rows only the GEMM reads (a landed
// loop where pipelined): x of `rows` rows a device, w of 4 a device, both of 8 columns.
std::string landed_gather_text(int64_t rows) {
  int n = process().size;
  std::string m = world_mesh_text();
  return "fusion f(x: f32[" + std::to_string(rows * n) + ", 8] " + m + " shard(axis=0), w: f32[" + std::to_string(4 * n) + ", 8] " + m +
         R"( shard(axis=0)) {
    h = linear(x, w) )" + m + R"( shard(axis=1)
    return h
  })";
}

// An executor of `text` on the ranks' devices under `pipeline`.
std::unique_ptr<FusionExecutor> pipelined_executor(const std::string& text, const char* pipeline, bool poison_outputs) {
  ExecutorOptions options{sharded_device()};
  options.pipeline = pipeline;
  options.poison_outputs = poison_outputs;
  return std::make_unique<FusionExecutor>(parse_fusion(text, "pipelined.fusion"), options);
}

// Issue 25: an all-gather -> GEMM whose gathered rows only the GEMM reads runs its landed loop
// (where the team has the copy engines, the other blocks' GEMMs read the peers' chunks in their
// staging slots, each released after its GEMM; elsewhere the chunks are copied into the buffer).
// Run after run on one executor, with new inputs each time (a chunk read from a slot that a
// later call had overwritten would show), in 1 to 8 chunks of 5 rows a device (8: a chunk per
// row); integer-valued inputs, so every chunking equals off to the bit on every rank.
TEST(PipelinedFusions, LandedGatherGemm_RunAfterRun_EqualsOffExactly) {
  int n = process().size;
  const std::string text = landed_gather_text(5);
  auto executor = [&](const char* pipeline) { return pipelined_executor(text, pipeline, true); };
  std::unique_ptr<FusionExecutor> off = executor("off");
  auto in_shardings = off->input_shardings();
  int team_rank = multidevice::team_rank_of(in_shardings[0]->mesh);
  Tensor w = filled(DType::f32, {4 * n, 8}, [](int64_t i) { return double((i * 3) % 5) - 2; });
  for (const char* pipeline : {"chunks=1", "chunks=2", "chunks=3", "chunks=8"}) {
    SCOPED_TRACE(pipeline);
    std::unique_ptr<FusionExecutor> pipelined = executor(pipeline);
    for (int run = 0; run < 3; ++run) {
      Tensor x = filled(DType::f32, {5 * n, 8}, [&](int64_t i) { return double((i * 7 + run * 3) % 5) - 2; });
      std::vector<Tensor> local = {multidevice::local_part(x, *in_shardings[0], team_rank, "input"),
                                   multidevice::local_part(w, *in_shardings[1], team_rank, "input")};
      Tensor expected = to_cpu(off->run(local).at(0)), h = to_cpu(pipelined->run(local).at(0));
      ASSERT_EQ(h.sizes(), expected.sizes());
      EXPECT_EQ(std::memcmp(h.data(), expected.data(), size_t(h.numel()) * 4), 0) << "run " << run;
    }
    std::string program = pipelined->dump("program");
    EXPECT_NE(program.find("(all_gather -> linear h: "), std::string::npos) << program;
    EXPECT_NE(program.find("x__gathered (blocks of " + std::to_string(n) + ", each read where its chunk lands; its own block is x)"),
              std::string::npos)
        << program;
  }
}

// Issue 25: a GEMM -> reduce-scatter's own block adds the other ranks' partial sums where they
// land (the copy engines' slots where the team has them, as cuBLASLt's C on GPUs; elsewhere their
// sum, reduced into a scratch chunk with this rank's term zeroed), each landing released after
// that GEMM. Run after run on one executor with new inputs, in 1 to 8 chunks of 5 rows a device
// (8: a chunk per row); integer-valued inputs and a bias a multiple of 12 (bias / n exact on 1 to
// 4 ranks), so every chunking equals off to the bit on every rank, the bias added once.
TEST(PipelinedFusions, LandedGemmReduceScatter_RunAfterRun_EqualsOffExactly) {
  int n = process().size;
  std::string m = world_mesh_text();
  std::string text = "fusion f(x: f32[" + std::to_string(5 * n) + ", " + std::to_string(8 * n) + "] " + m + " shard(axis=1), w: f32[8, " +
                     std::to_string(8 * n) + "] " + m + " shard(axis=1), b: f32[8] " + m + R"( replicated) {
    y = linear(x, w, b) )" + m + R"( shard(axis=0)
    return y
  })";
  auto executor = [&](const char* pipeline) { return pipelined_executor(text, pipeline, true); };
  std::unique_ptr<FusionExecutor> off = executor("off");
  auto in_shardings = off->input_shardings();
  int team_rank = multidevice::team_rank_of(in_shardings[0]->mesh);
  Tensor w = filled(DType::f32, {8, 8 * n}, [](int64_t i) { return double((i * 3) % 5) - 2; });
  Tensor b = filled(DType::f32, {8}, [](int64_t i) { return 12.0 * (double(i % 5) - 2); });
  for (const char* pipeline : {"chunks=1", "chunks=2", "chunks=3", "chunks=8"}) {
    SCOPED_TRACE(pipeline);
    std::unique_ptr<FusionExecutor> pipelined = executor(pipeline);
    for (int run = 0; run < 3; ++run) {
      Tensor x = filled(DType::f32, {5 * n, 8 * n}, [&](int64_t i) { return double((i * 7 + run * 3) % 5) - 2; });
      std::vector<Tensor> global = {x, w, b}, local;
      for (size_t i = 0; i < global.size(); ++i)
        local.push_back(in_shardings[i] ? multidevice::local_part(global[i], *in_shardings[i], team_rank, "input") : global[i]);
      Tensor expected = to_cpu(off->run(local).at(0)), y = to_cpu(pipelined->run(local).at(0));
      ASSERT_EQ(y.sizes(), expected.sizes());
      EXPECT_EQ(std::memcmp(y.data(), expected.data(), size_t(y.numel()) * 4), 0) << "run " << run;
      // and the unsharded value: the bias once
      if (run == 0) {
        auto f = parse_fusion(text, "landed_sum.fusion");
        Tensor whole = FusionExecutor(without_shardings(*f), {DeviceChoice::cpu}).run(global).at(0);
        Tensor mine = multidevice::local_part(whole, *pipelined->output_shardings().at(0), team_rank, "output");
        ASSERT_EQ(mine.sizes(), y.sizes());
        EXPECT_TRUE(testing::tensors_close(y, mine));
      }
    }
    std::string program = pipelined->dump("program");
    EXPECT_NE(program.find("-> reduce_scatter: "), std::string::npos) << program;
    EXPECT_NE(program.find("on chunk i of its own block, adding the other ranks' parts of "), std::string::npos) << program;
  }
}

// Issue 25, on GPUs: where the team's parts land one by one (the copy engines), a traced landed
// all-gather -> GEMM loop shows each peer block's GEMM waiting for its own block ("wait for
// x__gathered chunk i block q", one a peer block and chunk) and no compute stream waiting for a
// whole chunk's event; where they land together (NCCL), no such wait and one chunk event a
// chunk. Either way the values are off's.
TEST(PipelinedFusions, TracedLandedGather_EachBlocksGemmWaitsForItsOwnBlockWhereTheyLandOneByOne) {
  if (!on_gpu()) GTEST_SKIP() << "the landings' waits are stream waits: run where ALLOY_MPI_TEST_DEVICE=cuda (scripts/gpu-check)";
#if ALLOY_HAVE_CUDA
  const host_ir::DeviceRuntime& gpu = backend::device_runtime(DeviceKind::cuda);
  ASSERT_TRUE(gpu.available()) << gpu.unavailable_reason();
  const bool by_part =
      multidevice::communicator_for(world_mesh(), Device{DeviceKind::cuda, process().local_rank % gpu.device_count()}, &gpu)->waits_by_part();
  int n = process().size;
  const std::string text = landed_gather_text(4);
  std::unique_ptr<FusionExecutor> off = pipelined_executor(text, "off", false), chunked = pipelined_executor(text, "chunks=2", false);
  auto in_shardings = off->input_shardings();
  int team_rank = multidevice::team_rank_of(in_shardings[0]->mesh);
  Tensor x = filled(DType::f32, {4 * n, 8}, [](int64_t i) { return double((i * 7) % 5) - 2; });
  Tensor w = filled(DType::f32, {4 * n, 8}, [](int64_t i) { return double((i * 3) % 5) - 2; });
  std::vector<Tensor> local = {multidevice::local_part(x, *in_shardings[0], team_rank, "input"),
                               multidevice::local_part(w, *in_shardings[1], team_rank, "input")};
  RunTrace trace;
  RunOptions options;
  options.trace = &trace;
  Tensor expected = to_cpu(off->run(local).at(0)), h = to_cpu(chunked->run(local, options).at(0));
  ASSERT_EQ(h.sizes(), expected.sizes());
  EXPECT_EQ(std::memcmp(h.data(), expected.data(), size_t(h.numel()) * 4), 0);
  ASSERT_EQ(int(trace.ranks.size()), n);
  int part_waits = 0, chunk_waits = 0;
  for (const host_ir::Span& span : trace.ranks[size_t(process().rank)].spans) {
    if (span.track == host_ir::kHostTrack || span.kind != host_ir::SpanKind::wait) continue;
    if (span.name.starts_with("wait for x__gathered chunk ")) {
      ++part_waits;
      EXPECT_EQ(span.name.find("block " + std::to_string(team_rank)), std::string::npos) << span.name << ": the own block waits for nothing";
    } else if (span.name.find(" chunk ") != std::string::npos) {
      ++chunk_waits;
    }
  }
  EXPECT_EQ(part_waits, by_part ? 2 * (n - 1) : 0) << "by part: " << by_part;
  EXPECT_EQ(chunk_waits, n > 1 && !by_part ? 2 : 0) << "by part: " << by_part << " (a mesh of one: no loop)";
#endif
}

// ---- the cost model of --pipeline auto: measured once, cached, the same on every rank --------

// A folder every rank names alike (rank 0 makes it and broadcasts its name).
void make_shared_temp_dir(multidevice::Communicator& team, char (&name)[256]) {
  if (team.rank() == 0) {
    std::string pattern = (std::filesystem::temp_directory_path() / "alloy_costs_XXXXXX").string();
    ASSERT_TRUE(mkdtemp(pattern.data()) != nullptr);
    std::snprintf(name, sizeof name, "%s", pattern.c_str());
  }
}
std::string shared_temp_dir(multidevice::Communicator& team) {
  char name[256] = {};
  make_shared_temp_dir(team, name);  // (a failed ASSERT there leaves the name empty: every rank still broadcasts)
  team.broadcast(Tensor::borrow(name, Device{}, DType::boolean, {int64_t(sizeof name)}, {1}), 0);
  return name;
}

// Every rank gets the numbers rank 0 got, so every rank takes the same choice: the choice and its
// numbers, as text, all-gathered and compared.
TEST(MachineCosts, MeasuredOnceCachedAndTheSameOnEveryRank) {
  auto host = multidevice::communicator_for(world_mesh(), Device{});
  std::string dir = shared_temp_dir(*host);
  testing::ScopedEnv cache("ALLOY_CACHE_DIR", dir.c_str());
  forget_machine_costs();
  host_ir::MachineCosts measured = machine_costs(*host, *host, Device{});
  EXPECT_EQ(measured.source.rfind("measured now", 0), 0u) << measured.source;
  EXPECT_GT(measured.gemm_flops_per_us, 0);
  EXPECT_GT(measured.hop_bytes_per_us, 0);
  forget_machine_costs();
  host_ir::MachineCosts cached = machine_costs(*host, *host, Device{});
  EXPECT_EQ(cached.source, "read from " + dir + "/machine_costs.json");
  EXPECT_EQ(cached.gemm_flops_per_us, measured.gemm_flops_per_us);
  host_ir::PairShape shape;
  shape.parts = host->size();
  shape.rows = 512, shape.k = 1024, shape.n = 1024, shape.block_bytes = 512 * 1024 * 2;
  cached.overlaps = true;  // as on a GPU: the choice depends on every number
  std::string mine = host_ir::choose_pipeline(cached, shape).why;
  mine.resize(1024, ' ');
  std::vector<char> all(mine.size() * size_t(host->size()));
  host->all_gather(Tensor::borrow(mine.data(), Device{}, DType::boolean, {int64_t(mine.size())}, {1}),
                   Tensor::borrow(all.data(), Device{}, DType::boolean, {int64_t(all.size())}, {1}));
  for (int r = 0; r < host->size(); ++r) EXPECT_EQ(std::string(all.data() + size_t(r) * mine.size(), mine.size()), mine) << "rank " << r;
  forget_machine_costs();
}

// A cache file that does not parse is measured again and rewritten, on every rank at once.
TEST(MachineCosts, ACorruptCacheFile_IsMeasuredAgainNotAnError) {
  auto host = multidevice::communicator_for(world_mesh(), Device{});
  std::string dir = shared_temp_dir(*host);
  testing::ScopedEnv cache("ALLOY_CACHE_DIR", dir.c_str());
  if (host->rank() == 0) std::ofstream(dir + "/machine_costs.json") << "{\"version\": 1, \"machines\": {\"cpu";
  forget_machine_costs();
  host_ir::MachineCosts c = machine_costs(*host, *host, Device{});
  EXPECT_EQ(c.source.rfind("measured now", 0), 0u) << c.source;
  forget_machine_costs();
  EXPECT_EQ(machine_costs(*host, *host, Device{}).source.rfind("read from", 0), 0u);
  forget_machine_costs();
}

// ---- a property: random fusions with random input shardings equal their unsharded runs ------

// A chain of ops over [R, 12] values, R = 4 a device (12 divides over 1 to 4 devices; R / 2, a
// reshape's outer axis, over the job's), with random input shardings and now and then a statement
// annotation that forces a reshard.
std::string random_fusion(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return int(rng() % uint64_t(n)); };
  std::string m = world_mesh_text();
  const int64_t rows = 4 * process().size;
  const std::string R = std::to_string(rows), half = std::to_string(rows / 2), twice = std::to_string(2 * rows);
  auto placement = [&](int rank) {
    int k = pick(rank + 1);
    return k == rank ? m + " replicated" : m + " shard(axis=" + std::to_string(k) + ")";
  };
  std::string text = "fusion random(a: f32[" + R + ", 12] " + placement(2) + ", b: f32[" + R + ", 12] " + placement(2) +
                     ", w: f32[12, 12] " + placement(2) + ", v: f32[12] " + placement(1) + ") {\n";
  std::string c = "a";
  int n = 0;
  // a statement may carry an annotation (a reshard); not one whose result has a size-1 axis,
  // which no mesh divides (that is a user error, tested elsewhere)
  auto next = [&](const std::string& rhs, bool may_annotate = true) {
    std::string name = "t" + std::to_string(n++);
    text += "  " + name + " = " + rhs;
    if (pick(6) == 0 && may_annotate) text += " " + placement(2);
    text += "\n";
    c = name;
  };
  int steps = 4 + pick(5);
  for (int s = 0; s < steps; ++s) {
    switch (pick(10)) {
      case 0: next("add(" + c + ", b)"); break;
      case 1: next("mul(" + c + ", " + (pick(2) ? "v" : "b") + ")"); break;
      case 2: next(std::string(pick(2) ? "tanh(" : "exp(") + c + ")"); break;
      case 3: next("linear(" + c + ", w" + (pick(2) ? ", v)" : ")")); break;
      case 4: next("softmax(" + c + ", dim=" + std::to_string(pick(2)) + ")"); break;
      case 5: next("layer_norm(" + c + ", v, v, normalized_ndim=1)"); break;
      case 6: {
        std::string keep = c;
        next("sum(" + c + ", dims=[" + std::to_string(pick(2)) + "], keepdim=true)", false);
        next("sub(" + keep + ", " + c + ")");
        break;
      }
      case 7: {
        next("permute(" + c + ", dims=[1, 0])");
        next("neg(" + c + ")");
        next("permute(" + c + ", dims=[1, 0])");
        break;
      }
      case 8: {
        next("reshape(" + c + ", shape=[" + half + ", 2, 12])", false);
        next("reshape(" + c + ", shape=[" + R + ", 12])");
        break;
      }
      default: {
        int dim = pick(2);
        next("cat(" + c + ", b, dim=" + std::to_string(dim) + ")");
        next(dim == 0 ? "slice(" + c + ", starts=[" + R + ", 0], ends=[" + twice + ", 12])"
                      : "slice(" + c + ", starts=[0, 12], ends=[" + R + ", 24])");
        break;
      }
    }
  }
  text += "  total = sum(" + c + ", dims=[0, 1])\n  return " + c + ", total\n}\n";
  return text;
}

TEST(ShardingProperty, RandomFusionsWithRandomShardings_EqualTheirUnshardedRuns) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_sharded_matches_unsharded(random_fusion(seed), {}, seed, 2.0);
  }
}

// ---- failures that must not hang ----------------------------------------------------------

// (In a job of one the bad rank is alone: its own error, and no peer.)
TEST(ShardedFailures, ABadInputOnOneRank_FailsEveryRankAndTheNextRunWorks) {
  int n = process().size;
  const int bad = std::min(1, n - 1);
  const int64_t rows = 4 * n;  // four a rank, whatever the job's size
  std::string text = "fusion f(x: f32[" + std::to_string(rows) + ", 4] " + world_mesh_text() +
                     " shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}";
  FusionExecutor executor(parse_fusion(text, "bad.fusion"), {DeviceChoice::cpu});
  Tensor good = filled(DType::f32, {4, 4}, [](int64_t) { return 1.0; });
  Tensor wrong = filled(DType::f32, {4, 5}, [](int64_t) { return 1.0; });
  bool peer = false, mine = false;
  try {
    executor.run({process().rank == bad ? wrong : good});
  } catch (const PeerError&) {
    peer = true;
  } catch (const UserError& e) {
    mine = true;
    EXPECT_NE(std::string(e.what()).find("input 'x', axis 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(mine, process().rank == bad);
  EXPECT_EQ(peer, process().rank != bad);
  std::vector<Tensor> out = executor.run({good});
  EXPECT_TRUE(testing::tensors_close(multidevice::gather_global(out.at(0), *executor.output_shardings()[0],
                                                                *multidevice::communicator_for(world_mesh(), Device{})),
                                     filled(DType::f32, {4}, [rows](int64_t) { return double(rows); })));
}

// A local step that throws on one rank (as a cost measurement's allocation or probe GEMM can):
// that rank gets its own error, every other one a PeerError naming it, and the team still
// communicates afterwards (no rank is left inside a collective).
TEST(ShardedFailures, AStepFailingOnOneRank_FailsEveryRankWithoutAHang) {
  auto team = multidevice::communicator_for(world_mesh(), Device{});
  const int failing = process().size - 1;
  bool peer = false, mine = false;
  try {
    multidevice::agree_on_step(*team, [&] {
      if (team->rank() == failing) throw UserError("the probe does not fit");
    }, "measuring");
  } catch (const PeerError& e) {
    peer = true;
    EXPECT_EQ(std::string(e.what()), "measuring: rank " + std::to_string(failing) + " of the team failed before communicating");
  } catch (const UserError& e) {
    mine = true;
    EXPECT_EQ(std::string(e.what()), "the probe does not fit");
  }
  EXPECT_EQ(mine, team->rank() == failing);
  EXPECT_EQ(peer, team->rank() != failing);
  bool ran = false;
  multidevice::agree_on_step(*team, [&] { ran = true; }, "measuring");
  EXPECT_TRUE(ran);
  int32_t one = 1, sum = 0;
  team->all_reduce(Tensor::borrow(&one, Device{}, DType::i32, {1}, {1}), Tensor::borrow(&sum, Device{}, DType::i32, {1}, {1}),
                   PartialReduce::sum);
  EXPECT_EQ(sum, team->size());
}

// A mesh of every rank but the last (one device in a job of two): the last runs nothing, and
// takes part in each run's agreement.
TEST(ShardedFailures, RanksOutsideTheMesh_RunNothing) {
  if (process().size < 2) GTEST_SKIP() << "a job of one process has no rank outside a mesh";
  const int devices = process().size - 1;
  std::string text = with_sizes(example("tp_mlp", devices));
  FusionExecutor executor(parse_fusion(text, "t"), {DeviceChoice::cpu});
  if (process().rank >= devices) {
    EXPECT_TRUE(executor.run({}).empty());
    return;
  }
  auto fusion = parse_fusion(text, "t");
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(5), {}, 1);
  std::vector<Tensor> local;
  auto shardings = executor.input_shardings();
  for (size_t i = 0; i < inputs.size(); ++i) local.push_back(multidevice::local_part(inputs[i], *shardings[i], process().rank, "in"));
  FusionExecutor reference(without_shardings(*fusion), {DeviceChoice::cpu});
  EXPECT_TRUE(testing::tensors_close(executor.run(local).at(0), reference.run(inputs).at(0)));
}

// ---- traced runs (runtime/trace_file.h) -------------------------------------------------------

// A traced run of a fusion with a mesh of two: every rank of the job gets every rank's spans, by
// rank (the mesh's ranks with the all-reduce, a rank outside the mesh none).
TEST(TracedRuns, EveryRanksSpansAreGathered_RanksOutsideTheMeshHaveNone) {
  if (process().size < 2) GTEST_SKIP() << "needs two ranks";
  std::string text = "fusion f(x: f32[T, 4] @mesh[0, 1] shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}";
  FusionExecutor executor(parse_fusion(text, "traced.fusion"), {sharded_device()});
  RunTrace trace;
  RunOptions options;
  options.trace = &trace;
  std::vector<Tensor> inputs;
  if (process().rank < 2) inputs = {filled(DType::f32, {2, 4}, [](int64_t) { return 1.0; })};
  executor.run(inputs, options);
  ASSERT_EQ(int(trace.ranks.size()), process().size);
  for (int r = 0; r < process().size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(trace.ranks[size_t(r)].rank, r);
    const auto& spans = trace.ranks[size_t(r)].spans;
    bool reduced = std::any_of(spans.begin(), spans.end(), [](const host_ir::Span& s) {
      return s.kind == host_ir::SpanKind::communication && s.name.starts_with("all_reduce");
    });
    EXPECT_EQ(reduced, r < 2);
    if (r >= 2) EXPECT_TRUE(spans.empty());
  }
}

// Every rank traces a run or none: a run traced on one rank only is refused on every rank before
// any collective (the gather at its end would wait for ranks that never reach it); the next works.
TEST(TracedRuns, TracedOnOneRankOnly_IsRefusedOnEveryRank) {
  if (process().size < 2) GTEST_SKIP() << "needs two ranks";
  std::string text = "fusion f(x: f32[T, 4] " + world_mesh_text() + " shard(axis=0)) {\n  y = neg(x)\n  return y\n}";
  FusionExecutor executor(parse_fusion(text, "traced_once.fusion"), {DeviceChoice::cpu});
  Tensor x = filled(DType::f32, {2, 4}, [](int64_t) { return 1.0; });
  RunTrace trace;
  RunOptions options;
  if (process().rank == 1) options.trace = &trace;
  try {
    executor.run({x}, options);
    ADD_FAILURE() << "a run traced on rank 1 only ran";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("trace"), std::string::npos) << e.what();
  }
  EXPECT_EQ(executor.run({x}).size(), 1u);
}

// ---- the job agreement (issue 26) ------------------------------------------------------------

// Uneven parts (rank r given r+1 rows more than its part): refused on every rank before any byte
// moves, naming the input and two ranks' shapes; the next even run works.
TEST(JobAgreement, UnevenPartsAreRefusedOnEveryRank_TheNextEvenRunWorks) {
  if (process().size < 2) GTEST_SKIP() << "needs two ranks: a job of one process agrees with no one";
  std::string text = "fusion f(x: f32[T, 4] " + world_mesh_text() + " shard(axis=0)) {\n  y = mean(x, dims=[0])\n  return y\n}";
  FusionExecutor executor(parse_fusion(text, "uneven.fusion"), {DeviceChoice::cpu});
  Tensor uneven = filled(DType::f32, {2 + process().rank, 4}, [](int64_t) { return 1.0; });
  try {
    executor.run({uneven});
    ADD_FAILURE() << "uneven parts ran";
  } catch (const UserError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("disagree"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
  }
  Tensor even = filled(DType::f32, {2, 4}, [](int64_t) { return 3.0; });
  std::vector<Tensor> out = executor.run({even});
  EXPECT_TRUE(testing::tensors_close(out.at(0), filled(DType::f32, {4}, [](int64_t) { return 3.0; })));
}

// A size error on the mesh's ranks reaches a rank outside the mesh too (a PeerError there): a
// mesh of every rank but the last.
TEST(JobAgreement, ABindingErrorReachesRanksOutsideTheMesh) {
  if (process().size < 2) GTEST_SKIP() << "a job of one process has no rank outside a mesh";
  std::string mesh = mesh_text(process().size - 1);
  FusionExecutor executor(parse_fusion("fusion f(x: f32[T, 4] " + mesh + " shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}", "o"),
                          {DeviceChoice::cpu});
  Tensor wrong = filled(DType::f32, {2, 5}, [](int64_t) { return 1.0; });
  bool failed = false;
  try {
    executor.run({wrong});
  } catch (const UserError&) {
    failed = true;
  }
  EXPECT_TRUE(failed);
}

// ExecutorOptions::Agreement::on_change: the same record again skips the collective (every rank
// alike); a new shape agrees again.
TEST(JobAgreement, OnChange_RepeatedShapesSkip_NewShapesAgree) {
  if (process().size < 2) GTEST_SKIP() << "needs two ranks: a job of one process agrees with no one";
  std::string text = "fusion f(x: f32[T, 4] " + world_mesh_text() + " shard(axis=0)) {\n  y = neg(x)\n  return y\n}";
  ExecutorOptions options{DeviceChoice::cpu};
  options.agreement = ExecutorOptions::Agreement::on_change;
  FusionExecutor executor(parse_fusion(text, "c.fusion"), options);
  for (int64_t rows : {2, 2, 4, 4, 2}) {
    Tensor x = filled(DType::f32, {rows, 4}, [](int64_t) { return 1.0; });
    std::vector<Tensor> out = executor.run({x});
    EXPECT_TRUE(testing::tensors_close(out.at(0), filled(DType::f32, {rows, 4}, [](int64_t) { return -1.0; })));
  }
}

// on_change with one rank's record changed, or one rank failing, while the others' are the ones
// last agreed: every rank learns it (one word each) and agrees, so each reports the difference
// or the failure, none waits for the others; the next run like the last agreed one goes on.
TEST(JobAgreement, OnChange_AChangeOrAFailureOnOneRank_IsAgreedOnByAll) {
  if (process().size < 2) GTEST_SKIP() << "needs two ranks: a job of one process agrees with no one";
  std::string text = "fusion f(x: f32[T, 4] " + world_mesh_text() + " shard(axis=0)) {\n  y = neg(x)\n  return y\n}";
  ExecutorOptions options{DeviceChoice::cpu};
  options.agreement = ExecutorOptions::Agreement::on_change;
  FusionExecutor executor(parse_fusion(text, "c.fusion"), options);
  const bool last = process().rank == process().size - 1;
  auto rows_of = [](int64_t rows) { return filled(DType::f32, {rows, 4}, [](int64_t) { return 1.0; }); };
  auto error_of = [&](const Tensor& x) -> std::string {
    try {
      executor.run({x});
    } catch (const UserError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(executor.run({rows_of(2)}).size(), 1u);
  EXPECT_NE(error_of(rows_of(last ? 3 : 2)).find("the ranks of the job disagree on the bound sizes"), std::string::npos);
  std::string failed = error_of(last ? filled(DType::f64, {2, 4}, [](int64_t) { return 1.0; }) : rows_of(2));
  EXPECT_NE(failed.find(last ? "expected dtype f32" : "of the mesh failed before communicating"), std::string::npos) << failed;
  EXPECT_TRUE(testing::tensors_close(executor.run({rows_of(2)}).at(0), filled(DType::f32, {2, 4}, [](int64_t) { return -1.0; })));
}

// The agreement's cost: one all-gather of a fixed-size record (printed; the issue's bar is 10 us
// a cached run on 2 GPUs), and a cached run of a small sharded fusion with every run agreeing and
// with on_change (one word's all-gather: whether any rank's record changed or any failed).
TEST(JobAgreement, Cost_IsPrinted) {
  if (process().size < 2) GTEST_SKIP() << "needs two ranks: a job of one process agrees with no one";
  std::vector<multidevice::JobFact> facts = {{"fusion", "'f' (printed text hash 1234567890)"}, {"device kind", "cpu"}, {"pipeline", "auto"},
                                             {"poison_outputs", "off"}, {"bound sizes", "T=8", true},
                                             {"local shape of input 'x'", "f32[4, 256] contiguous", true}};
  auto time_us = [](int runs, const std::function<void()>& f) {
    for (int i = 0; i < 100; ++i) f();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i) f();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / runs;
  };
  double agree = time_us(5000, [&] { multidevice::agree_with_job(facts, true, nullptr, "bench"); });
  double reduce = time_us(5000, [&] { multidevice::first_failing_rank(false); });
  std::string text = "fusion f(x: f32[T, 4] " + world_mesh_text() + " shard(axis=0)) {\n  y = neg(x)\n  return y\n}";
  Tensor x = filled(DType::f32, {2, 4}, [](int64_t) { return 1.0; });
  FusionExecutor every(parse_fusion(text, "e.fusion"), {DeviceChoice::cpu});
  ExecutorOptions cached{DeviceChoice::cpu};
  cached.agreement = ExecutorOptions::Agreement::on_change;
  FusionExecutor skip(parse_fusion(text, "s.fusion"), cached);
  double run_every = time_us(2000, [&] { every.run({x}); });
  double run_skip = time_us(2000, [&] { skip.run({x}); });
  if (process().rank == 0)
    std::printf("[ agreement cost, %d ranks ] agree_with_job %.2f us (an int all-reduce %.2f us); a cached run agreeing every "
                "run %.2f us, on_change %.2f us\n",
                process().size, agree, reduce, run_every, run_skip);
  SUCCEED();
}

}  // namespace
}  // namespace alloy

// Every rank runs the tests; only rank 0 prints the run, and any rank prints its failures.
class FailuresOnly : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::printf("[rank %d] %s:%d: %s\n", alloy::multidevice::process().rank, r.file_name() ? r.file_name() : "?", r.line_number(),
                  r.summary());
  }
};

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (alloy::multidevice::process().rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly);
  }
  int result = RUN_ALL_TESTS();
  int failed_anywhere = alloy::multidevice::first_failing_rank(result != 0);
  alloy::multidevice::finalize();
  return failed_anywhere >= 0 ? 1 : 0;
}
