// Probe: every cuBLASLt configuration that can run the MLP backward's dGELU GEMM
// (dh = gelu_backward(dy @ w_proj, h), bf16, [8192, 1600] @ [1600, 6400]), timed, against the
// heuristic's candidates (and each with every CTA swizzle and custom option) and the plain GEMM;
// PROBE_ALL=1 also times every tile, stage count and cluster of every algorithm. Not part of the
// build; on the GPU machine:
//   g++ -O2 -std=c++20 bench/probe_cublaslt.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcublasLt -lcudart
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#define CHECK(x)                                                              \
  do {                                                                        \
    auto s_ = (x);                                                            \
    if (int(s_) != 0) { std::printf("%s failed: %d (line %d)\n", #x, int(s_), __LINE__); std::exit(1); } \
  } while (0)

struct Problem {
  const char* name;
  cublasLtEpilogue_t epilogue;
};

int main() {
  // column-major: D [m, n] = A [m, k] @ B [k, n]; our row-major dg [T, H] = dy [T, C] @ w_proj [C, H]
  const int64_t m = 6400, n = 8192, k = 1600;
  cublasLtHandle_t lt;
  CHECK(cublasLtCreate(&lt));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  auto fill = [&](int64_t count) {
    std::vector<uint16_t> host(static_cast<size_t>(count));
    for (auto& v : host) {
      float f = dist(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      v = uint16_t(u >> 16);
    }
    void* p;
    CHECK(cudaMalloc(&p, size_t(count) * 2));
    CHECK(cudaMemcpy(p, host.data(), size_t(count) * 2, cudaMemcpyHostToDevice));
    return p;
  };
  void* a = fill(m * k);
  void* b = fill(k * n);
  void* aux = fill(m * n);
  void* d;
  CHECK(cudaMalloc(&d, size_t(m * n) * 2));
  void* bias;
  CHECK(cudaMalloc(&bias, size_t(m) * 4));
  size_t ws_bytes = size_t(64) << 20;
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m));
  CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
  CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  float alpha = 1, beta = 0;

  for (Problem p : {Problem{"none", CUBLASLT_EPILOGUE_DEFAULT}, Problem{"dgelu", CUBLASLT_EPILOGUE_DGELU},
                    Problem{"dgelu_bgrad", CUBLASLT_EPILOGUE_DGELU_BGRAD}}) {
    cublasLtMatmulDesc_t op;
    CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof p.epilogue));
    if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      int64_t aux_ld = m;
      CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
      CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    if (p.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    auto time = [&](const cublasLtMatmulAlgo_t& algo) -> float {
      for (int i = 0; i < 2; ++i)
        if (cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &algo, ws, ws_bytes, stream) != 0) return -1;
      std::vector<float> t;
      for (int r = 0; r < 5; ++r) {
        cudaEventRecord(e0, stream);
        for (int i = 0; i < 4; ++i) cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &algo, ws, ws_bytes, stream);
        cudaEventRecord(e1, stream);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        t.push_back(ms * 1000 / 4);
      }
      std::sort(t.begin(), t.end());
      return t[2];
    };
    auto describe = [](const cublasLtMatmulAlgo_t& algo) {
      int32_t id = 0;
      uint32_t tile = 0, stages = 0, splitk = 0, swz = 0, custom = 0;
      uint16_t cluster = 0, inner = 0;
      size_t w;
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner, sizeof inner, &w);
      char buf[160];
      std::snprintf(buf, sizeof buf, "id %d tile %u stages %u splitk %u swizzle %u custom %u cluster %u inner %u", id, tile,
                    stages, splitk, swz, custom, cluster, inner);
      return std::string(buf);
    };

    // the heuristic's candidates
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    std::vector<cublasLtMatmulHeuristicResult_t> results(32);
    int found = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 32, results.data(), &found));
    std::printf("== %s: heuristic gives %d\n", p.name, found);
    for (int i = 0; i < found; ++i) std::printf("  heuristic %2d  %8.1f us  %s\n", i, time(results[i].algo), describe(results[i].algo).c_str());
    // the heuristic's candidates with every CTA swizzle and custom option their algorithm allows
    if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      struct Variant { float us; std::string what; };
      std::vector<Variant> variants;
      for (int i = 0; i < found; ++i) {
        int32_t custom_max = 0, swizzle_ok = 0;
        size_t w = 0;
        cublasLtMatmulAlgoCapGetAttribute(&results[i].algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max, &w);
        cublasLtMatmulAlgoCapGetAttribute(&results[i].algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_ok, sizeof swizzle_ok, &w);
        for (uint32_t swz = 0; swz <= (swizzle_ok ? 1u : 0u); ++swz)
          for (uint32_t custom = 0; custom <= uint32_t(std::max(0, custom_max)); ++custom) {
            cublasLtMatmulAlgo_t c = results[i].algo;
            cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz);
            cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom);
            cublasLtMatmulHeuristicResult_t check{};
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, ld, ld, &c, &check) != 0 || check.workspaceSize > ws_bytes) continue;
            float us = time(c);
            if (us > 0) variants.push_back({us, "from heuristic " + std::to_string(i) + ": " + describe(c)});
          }
      }
      std::sort(variants.begin(), variants.end(), [](const Variant& x, const Variant& y) { return x.us < y.us; });
      std::printf("== %s: %zu variants of the heuristic's candidates; the fastest:\n", p.name, variants.size());
      for (size_t i = 0; i < std::min<size_t>(variants.size(), 8); ++i) std::printf("  %8.1f us  %s\n", variants[i].us, variants[i].what.c_str());
    }

    if (!std::getenv("PROBE_ALL")) {
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatmulDescDestroy(op);
      continue;
    }
    // every algorithm id that has this epilogue, every tile and stage count it lists (PROBE_ALL=1)
    std::vector<int> ids(256);
    int id_count = 0;
    CHECK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, 256,
                                   ids.data(), &id_count));
    struct Timed { float us; std::string what; };
    std::vector<Timed> all;
    int tried = 0;
    for (int i = 0; i < id_count; ++i) {
      cublasLtMatmulAlgo_t algo;
      if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, ids[i],
                                 &algo) != 0)
        continue;
      uint32_t mask = 0;
      size_t w = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &mask, sizeof mask, &w);
      if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT && (mask & uint32_t(p.epilogue)) != uint32_t(p.epilogue)) continue;
      std::vector<uint32_t> tiles(200), stages(200);
      size_t tw = 0, sw = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data(), tiles.size() * 4, &tw);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages.data(), stages.size() * 4, &sw);
      tiles.resize(std::max<size_t>(tw / 4, 1));
      stages.resize(std::max<size_t>(sw / 4, 1));
      std::printf("  algo id %d: epilogue mask 0x%x, %zu tiles, %zu stage ids\n", ids[i], mask, tiles.size(), stages.size());
      for (uint32_t tile : tiles)
        for (uint32_t st : stages)
          for (uint16_t cluster : {uint16_t(0), uint16_t(2), uint16_t(3), uint16_t(5)}) {
            cublasLtMatmulAlgo_t c = algo;
            cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile);
            cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof st);
            cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster);
            uint32_t swz = 1;
            cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz);
            cublasLtMatmulHeuristicResult_t check{};
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, ld, ld, &c, &check) != 0 || check.workspaceSize > ws_bytes) continue;
            ++tried;
            float us = time(c);
            if (us > 0) all.push_back({us, describe(c)});
          }
    }
    std::sort(all.begin(), all.end(), [](const Timed& x, const Timed& y) { return x.us < y.us; });
    std::printf("== %s: %d configurations ran; the fastest:\n", p.name, tried);
    for (size_t i = 0; i < std::min<size_t>(all.size(), 12); ++i) std::printf("  %8.1f us  %s\n", all[i].us, all[i].what.c_str());
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
  }
  return 0;
}
