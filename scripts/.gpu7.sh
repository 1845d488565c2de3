set -u
O=${OUT:-/tmp/o}; mkdir -p $O
B=build-gpu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DALLOY_REQUIRE_CUDA=ON > $O/configure.log 2>&1 || { tail -20 $O/configure.log; exit 1; }
t0=$(date +%s); cmake --build $B -j16 > $O/build.log 2>&1 || { grep -E "error" -A3 $O/build.log | head -40; exit 1; }; echo "build $(( $(date +%s)-t0 )) s"
export ALLOY_REQUIRE_GPU=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); (cd $B && ctest -j6 --timeout 300 -E "Emulated|RandomFusions" > $O/ctest.log 2>&1); echo "ctest rc=$? $(( $(date +%s)-t0 )) s"
grep -E "tests passed|tests failed|\*\*\*Failed|\(Failed\)" $O/ctest.log | tail -8
grep -B2 -A25 "Failure" $O/ctest.log | head -40
ALLOY_NO_SPLIT_STAGES=1 $B/tests/alloy_tests --gtest_filter='GpuEndToEnd*' > $O/nosplit.log 2>&1; echo "GpuEndToEnd, ALLOY_NO_SPLIT_STAGES=1: rc=$? $(grep -aE '^\[  (PASSED|FAILED) ' $O/nosplit.log | tr '\n' ' ')"
ALLOY_MPI_TEST_DEVICE=cuda timeout 120 mpirun -n 2 --oversubscribe $B/tests/alloy_mpi_tests > $O/mpi-gpu-2.log 2>&1; echo "mpi 2 ranks on the GPU: rc=$? $(grep -aE 'PASSED|FAILED' $O/mpi-gpu-2.log | tail -2 | tr '\n' ' ')"
BENCH_CASES=qkv_rope,layer_norm_permuted,transpose_add,column_sum,layer_norm_nanogpt PYTHONUNBUFFERED=1 timeout 170 python3 bench/run_benchmarks.py $B 30 memory > $O/bench.log 2>&1; echo "bench rc=$?"
tail -10 $O/bench.log
PYTHONPATH=$B/python PYTHONUNBUFFERED=1 timeout 90 python3 bench/python_host_time.py --alloy $B/alloy --samples 10000 > $O/python-host-time.log 2>&1; echo "host time rc=$?"; tail -12 $O/python-host-time.log
