// Issue 13's pipelined pairs on one GPU: the sequence-parallel MLP on a mesh of one device with
// --pipeline ring, chunks and auto (whose cost model measures this GPU, into a temporary cache)
// against off, on the streams of a real device; the Megatron MLP's GEMM -> all-reduce (forward and
// backward) likewise; and the ring's accumulate kernel for every dtype.
// The rings of several ranks, and the copy engines' landed chunks, run on GPUs in alloy_mpi_tests
// (ALLOY_MPI_TEST_DEVICE=cuda).
#include <gtest/gtest.h>

#include "test_util.h"

#if !ALLOY_HAVE_CUDA
TEST(PipelinedGpu, NeedsTheCudaToolkit) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <iterator>
#include <regex>

#include "alloy/backend/cuda/accumulate.h"
#include "alloy/backend/cuda/nvrtc_compiler.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/tune/machine_costs.h"
#include "alloy/runtime/run_inputs.h"

namespace alloy {
namespace {

// How many times `what` occurs in `text`.
int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

std::string sequence_parallel_on_one_gpu() {
  std::string text = testing::read_file(testing::source_path("examples/tp_mlp_sequence_parallel.fusion"));
  const std::string two = "@mesh[0, 1]";
  for (size_t at = text.find(two); at != std::string::npos; at = text.find(two, at + 1)) text.replace(at, two.size(), "@mesh[0]");
  return text;
}

TEST(PipelinedGpu, RingChunksAndAuto_OnAMeshOfOne_EqualOff) {
  ALLOY_REQUIRE_GPU();
  std::string pattern = (std::filesystem::temp_directory_path() / "alloy_gpu_costs_XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  testing::ScopedEnv cache("ALLOY_CACHE_DIR", pattern.c_str());
  forget_machine_costs();
  std::string text = sequence_parallel_on_one_gpu();
  auto fusion = parse_fusion(text, "sp1.fusion");
  std::vector<SizeRequest> sizes{{"T", 64}};
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()),
                                               resolve_input_sizes(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes), 5);
  ExecutorOptions off_options{DeviceChoice::cuda};
  off_options.pipeline = "off";
  FusionExecutor off(parse_fusion(text, "sp1.fusion"), off_options);
  Tensor expected = to_cpu(off.run(inputs).at(0));
  for (const char* pipeline : {"ring", "chunks=3", "auto"}) {
    SCOPED_TRACE(pipeline);
    ExecutorOptions options{DeviceChoice::cuda};
    options.pipeline = pipeline;
    options.poison_outputs = true;
    FusionExecutor pipelined(parse_fusion(text, "sp1.fusion"), options);
    for (int run = 0; run < 2; ++run) EXPECT_TRUE(testing::tensors_close(to_cpu(pipelined.run(inputs).at(0)), expected));
    // The path that ran, from the program the executor ran (host_ir/program.cpp prints it): both
    // pairs of the block (all_gather -> linear h, linear y__computed -> reduce_scatter) as the loop
    // the option names, or, for auto, a Choose per pair that recorded the cost model's pick.
    std::string program = pipelined.dump("program");
    EXPECT_EQ(program.find("stays unpipelined"), std::string::npos) << program;
    EXPECT_EQ(program.find("nothing to pipeline"), std::string::npos) << program;
    const std::string mode = pipeline;
    if (mode == "ring") {
      EXPECT_EQ(count(program, "Ring s in 0.."), 2) << program;
      EXPECT_EQ(count(program, "For i in 0.."), 0) << program;
      EXPECT_NE(program.find("Ring s in 0..1 over the team (all_gather -> linear h: ring, --pipeline ring)"), std::string::npos) << program;
      EXPECT_NE(program.find("Ring s in 0..1 over the team (linear y__computed -> reduce_scatter: ring, --pipeline ring)"), std::string::npos)
          << program;
    } else if (mode == "chunks=3") {
      EXPECT_EQ(count(program, "For i in 0.."), 2) << program;
      EXPECT_EQ(count(program, "Ring s in 0.."), 0) << program;
      EXPECT_NE(program.find("For i in 0..3 (all_gather -> linear h: 3 chunks (--pipeline chunks=3))"), std::string::npos) << program;
      // only the GEMM reads the gathered rows: its loop takes each chunk where it lands (a team of
      // one copies it into the buffer) and releases it after the GEMM (issue 25)
      EXPECT_NE(program.find("x__gathered (blocks of 1, each read where its chunk lands; its own block is x)"), std::string::npos) << program;
      EXPECT_EQ(count(program, "Release chunk i of x__gathered"), 1) << program;
      EXPECT_NE(program.find("For i in 0..3 (linear y__computed -> reduce_scatter: 3 chunks (--pipeline chunks=3))"), std::string::npos)
          << program;
    } else {
      // one Choose per pair, each with its record of what the last run took: off or chunks=N (a
      // mesh of one has no ring), with the model's times; the chunked variant is there to be taken
      EXPECT_EQ(count(program, "Choose per run (--pipeline auto"), 2) << program;
      EXPECT_EQ(count(program, "last run: none yet"), 0) << program;
      std::regex choice(R"(; last run: (off|chunks=(1|2|4|8|16)) \(model: off [^\n]*; [0-9]+ rows a block, K [0-9]+, N [0-9]+, )"
                        R"([0-9]+ bytes a block, 1 ranks; machine: )");
      EXPECT_EQ(std::distance(std::sregex_iterator(program.begin(), program.end(), choice), std::sregex_iterator()), 2) << program;
      EXPECT_NE(program.find("For i in 0..16 (all_gather -> linear h: chunks chosen per run (--pipeline auto))"), std::string::npos) << program;
      EXPECT_NE(program.find("For i in 0..16 (linear y__computed -> reduce_scatter: chunks chosen per run (--pipeline auto))"), std::string::npos)
          << program;
    }
  }
  forget_machine_costs();
  std::error_code ec;
  std::filesystem::remove_all(pattern, ec);
}

// The loops' GEMMs sized for fewer SMs (ALLOY_OVERLAP_GEMM_SMS, cuBLASLt's SM count target) run
// on cuBLASLt (no refusal, no fallback) and give the unpipelined results.
TEST(PipelinedGpu, LoopGemmsOnFewerSms_EqualOff) {
  ALLOY_REQUIRE_GPU();
  std::string text = sequence_parallel_on_one_gpu();
  auto fusion = parse_fusion(text, "sp1.fusion");
  std::vector<SizeRequest> sizes{{"T", 64}};
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()),
                                               resolve_input_sizes(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes), 9);
  ExecutorOptions off_options{DeviceChoice::cuda};
  off_options.pipeline = "off";
  FusionExecutor off(parse_fusion(text, "sp1.fusion"), off_options);
  Tensor expected = to_cpu(off.run(inputs).at(0));
  testing::ScopedEnv sms("ALLOY_OVERLAP_GEMM_SMS", "32");
  ExecutorOptions options{DeviceChoice::cuda};
  options.pipeline = "chunks=3";
  options.poison_outputs = true;
  FusionExecutor pipelined(parse_fusion(text, "sp1.fusion"), options);
  for (int run = 0; run < 2; ++run) EXPECT_TRUE(testing::tensors_close(to_cpu(pipelined.run(inputs).at(0)), expected));
  std::string launched = pipelined.dump("cuda");
  EXPECT_EQ(launched.find("refused"), std::string::npos) << launched;
  EXPECT_EQ(count(pipelined.dump("program"), "For i in 0..3"), 2) << pipelined.dump("program");
}

// The Megatron MLP (GEMM -> all-reduce of the row-parallel linear's partial sums) and its
// backward (dx = dh @ w_fc, all-reduced) on a mesh of one GPU: chunks=3 and auto (which leaves the
// pair as lowered: its overlap measured too small to risk) equal off, in f32
// and bf16 (the forward), 61 tokens (which 3 chunks do not divide). Two GPUs under NCCL run the
// same pair in alloy_mpi_tests (ALLOY_MPI_TEST_DEVICE=cuda).
TEST(PipelinedGpu, GemmAllReduce_MegatronMlpChunksAndAuto_OnAMeshOfOne_EqualOff) {
  ALLOY_REQUIRE_GPU();
  std::string pattern = (std::filesystem::temp_directory_path() / "alloy_gpu_costs_XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  testing::ScopedEnv cache("ALLOY_CACHE_DIR", pattern.c_str());
  forget_machine_costs();
  auto on_one_gpu = [](const std::string& name, const char* dtype) {
    std::string text = testing::read_file(testing::source_path("examples/" + name + ".fusion"));
    for (auto [from, to] : {std::pair<std::string, std::string>{"@mesh[0, 1]", "@mesh[0]"}, {"f32", dtype}})
      for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) text.replace(at, from.size(), to);
    return text;
  };
  for (auto [name, dtype] : {std::pair<std::string, const char*>{"tp_mlp", "f32"}, {"tp_mlp", "bf16"}, {"tp_mlp_backward", "f32"}}) {
    std::string text = on_one_gpu(name, dtype);
    auto fusion = parse_fusion(text, "megatron1.fusion");
    std::vector<SizeRequest> sizes{{"T", 61}};
    std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()),
                                                 resolve_input_sizes(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes), 9);
    ExecutorOptions off_options{DeviceChoice::cuda};
    off_options.pipeline = "off";
    FusionExecutor off(parse_fusion(text, "megatron1.fusion"), off_options);
    std::vector<Tensor> expected = off.run(inputs);
    for (const char* pipeline : {"chunks=3", "auto"}) {
      SCOPED_TRACE(name + " " + dtype + " " + pipeline);
      ExecutorOptions options{DeviceChoice::cuda};
      options.pipeline = pipeline;
      options.poison_outputs = true;
      FusionExecutor pipelined(parse_fusion(text, "megatron1.fusion"), options);
      for (int run = 0; run < 2; ++run) {
        std::vector<Tensor> out = pipelined.run(inputs);
        ASSERT_EQ(out.size(), expected.size());
        // another chunking may take another cuBLASLt algorithm: four times the allowance (as alloy_mpi_tests)
        for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(testing::tensors_close(to_cpu(out[i]), to_cpu(expected[i]), 4.0)) << "output " << i;
      }
      std::string program = pipelined.dump("program");
      // bf16's fc1 (GELU in cuBLASLt's epilogue) leads the loop; f32's GELU is a generated kernel,
      // which ends the lead
      std::string pair = name == "tp_mlp_backward"              ? "matmul dx__partial -> all_reduce"
                         : std::string(dtype) == "bf16" ? "linear h -> linear y__partial -> all_reduce"
                                                        : "linear y__partial -> all_reduce";
      if (std::string(pipeline) == "chunks=3") {
        EXPECT_NE(program.find("For i in 0..3 (" + pair + ": 3 chunks (--pipeline chunks=3))"), std::string::npos) << program;
      } else {  // auto leaves this pair as lowered (its overlap measured too small to risk)
        EXPECT_EQ(count(program, "Choose per run (--pipeline auto"), 0) << program;
        EXPECT_NE(program.find(pair + " stays unpipelined under --pipeline auto (NCCL's all-reduce beside the GEMM chunks measured slower"), std::string::npos) << program;
      }
    }
  }
  forget_machine_costs();
  std::error_code ec;
  std::filesystem::remove_all(pattern, ec);
}

// Issue 25: a GEMM -> reduce-scatter's own block adds what landed as cuBLASLt's C (beta = 1), the
// bias after it. On a mesh of one the team reduces this rank's zeroed term into the scratch chunk,
// the one addend; f32 and bf16, in 1 and 3 chunks of 24 rows, run twice: equal off (integer
// values: exact in bf16 too) and the CPU reference, and the matmul's record says C was taken.
TEST(PipelinedGpu, GemmReduceScatter_OwnGemmAddsTheLandedSumAsItsC_OnAMeshOfOne_EqualsOff) {
  ALLOY_REQUIRE_GPU();
  for (const char* dtype : {"f32", "bf16"}) {
    std::string t = dtype;
    std::string text = "fusion f(x: " + t + "[24, 64] @mesh[0] shard(axis=1), w: " + t + "[32, 64] @mesh[0] shard(axis=1), b: " + t +
                       R"([32] @mesh[0] replicated) {
      y = linear(x, w, b) @mesh[0] shard(axis=0)
      return y
    })";
    DType type = t == "f32" ? DType::f32 : DType::bf16;
    auto integers = [&](std::vector<int64_t> sizes, int seed) {
      Tensor v = Tensor::empty(type, std::move(sizes));
      for (int64_t i = 0; i < v.numel(); ++i) store_double(v.data(), type, i, double((i * 7 + seed) % 5) - 2);
      return v;
    };
    std::vector<Tensor> inputs = {integers({24, 64}, 1), integers({32, 64}, 2), integers({32}, 3)};
    ExecutorOptions off_options{DeviceChoice::cuda};
    off_options.pipeline = "off";
    FusionExecutor off(parse_fusion(text, "landed_c.fusion"), off_options);
    Tensor expected = to_cpu(off.run(inputs).at(0));
    ExecutorOptions cpu_options{DeviceChoice::cpu};
    cpu_options.pipeline = "off";
    Tensor reference = FusionExecutor(parse_fusion(text, "landed_c.fusion"), cpu_options).run(inputs).at(0);
    EXPECT_TRUE(testing::tensors_close(expected, reference));
    for (const char* pipeline : {"chunks=1", "chunks=3"}) {
      SCOPED_TRACE(t + " " + pipeline);
      ExecutorOptions options{DeviceChoice::cuda};
      options.pipeline = pipeline;
      options.poison_outputs = true;
      FusionExecutor pipelined(parse_fusion(text, "landed_c.fusion"), options);
      for (int run = 0; run < 2; ++run) {
        Tensor y = to_cpu(pipelined.run(inputs).at(0));
        ASSERT_EQ(y.sizes(), expected.sizes());
        EXPECT_EQ(std::memcmp(y.data(), expected.data(), size_t(y.numel()) * size_t(dtype_size(type))), 0) << "run " << run;
      }
      std::string launched = pipelined.dump("cuda");
      EXPECT_NE(launched.find("cuBLASLt, epilogue bias, C = the landed addend (beta = 1)"), std::string::npos) << launched;
      std::string program = pipelined.dump("program");
      EXPECT_NE(program.find("on chunk i of its own block, adding the other ranks' parts of "), std::string::npos) << program;
    }
  }
}

TEST(PipelinedGpu, AccumulateKernel_CompilesWithoutAGpu) {
  cuda::CompileOptions no_disk;
  no_disk.use_disk_cache = false;
  for (int arch : {80, 90}) EXPECT_TRUE(cuda::compile_cuda(cuda::accumulate_source(), cuda::kAccumulateKernel, arch / 10, 0, no_disk)) << arch;
}

TEST(PipelinedGpu, AccumulateKernel_AddsEveryDtype) {
  ALLOY_REQUIRE_GPU();
  cuda::Stream stream = cuda::Stream::current(0);
  // 1, 3 and 9 addends (past the kernel's 8: two launches); 3 x 37 elements (whole vectors and
  // a tail), and the same one element in (no 16-byte alignment: the scalar path); sums in range
  // of every dtype, so every dtype's result is exact
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean})
    for (int count : {1, 3, 9})
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + ", " + std::to_string(count) + " addends, offset " + std::to_string(offset));
        const int64_t n = 3 * 37;
        auto value = [&](int a, int64_t i) { return t == DType::boolean ? double((i + a) % 7 == 0) : double((i * (a + 2)) % 9) - 4; };
        Tensor host_into = Tensor::empty(t, {n + offset}), want = Tensor::empty(t, {n});
        for (int64_t i = 0; i < n; ++i) {
          double sum = value(0, i);
          for (int a = 1; a <= count; ++a) sum += value(a, i);
          store_double(host_into.data(), t, i + offset, value(0, i));
          store_double(want.data(), t, i, t == DType::boolean ? double(sum != 0) : sum);
        }
        Tensor into = cuda::to_device(host_into, stream);
        std::vector<Tensor> addends;
        for (int a = 1; a <= count; ++a) {
          Tensor h = Tensor::empty(t, {n + offset});
          for (int64_t i = 0; i < n; ++i) store_double(h.data(), t, i + offset, value(a, i));
          addends.push_back(cuda::to_device(h, stream).as_strided({n}, {1}, offset));
        }
        cuda::accumulate(into.as_strided({n}, {1}, offset), addends, stream);
        EXPECT_TRUE(testing::tensors_close(cuda::to_host(into, stream).as_strided({n}, {1}, offset), want));
      }
}

}  // namespace
}  // namespace alloy

#endif  // ALLOY_HAVE_CUDA
