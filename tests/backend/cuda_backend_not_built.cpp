// Stands in for tests/backend/cuda/ in a build without the CUDA toolkit, so the CUDA backend's
// tests report as skipped with the reason (a failure where ALLOY_REQUIRE_GPU=1) instead of
// dropping out of the list.
#include "test_util.h"

TEST(CudaBackend, NotBuilt) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
