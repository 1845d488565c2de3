set -u
O=${OUT:-/tmp/o}; mkdir -p $O
B=build-gpu
nvidia-smi --query-gpu=name --format=csv,noheader | tr '\n' ' '; echo
export ALLOY_REQUIRE_GPU=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DALLOY_REQUIRE_CUDA=ON > $O/configure.log 2>&1 || { tail -20 $O/configure.log; exit 1; }
t0=$(date +%s); timeout 120 cmake --build $B -j32 > $O/build.log 2>&1 || { grep -E "error" -A3 $O/build.log | head -40; exit 1; }; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s); ALLOY_MPI_TEST_DEVICE=cuda timeout 60 mpirun -n 2 $B/tests/alloy_mpi_tests > $O/mpi-gpu-2.log 2>&1; echo "NCCL multi-device tests, 2 ranks on 2 GPUs: rc=$? $(( $(date +%s)-t0 )) s $(grep -aE 'PASSED|FAILED' $O/mpi-gpu-2.log | sed 's/\x1b\[[0-9;]*m//g' | tail -3 | tr '\n' ' ')"
grep -aE "Failure|exception" $O/mpi-gpu-2.log | head -5
t0=$(date +%s); PYTHONUNBUFFERED=1 timeout 130 python3 bench/tp_mlp_bench.py --alloy $B/alloy --ranks 2 --runs 20 --out $O > $O/tp-mlp.log 2>&1; echo "tp_mlp_bench rc=$? $(( $(date +%s)-t0 )) s"; grep '^{' $O/tp-mlp.log
t0=$(date +%s); (cd $B && timeout 100 ctest -j8 --timeout 90 -E "Emulated|RandomFusions" > $O/ctest.log 2>&1); echo "ctest rc=$? $(( $(date +%s)-t0 )) s"
grep -E "tests passed|tests failed|\*\*\*Failed|\(Failed\)|Skipped\)" $O/ctest.log | tail -8
grep -B2 -A20 "Failure" $O/ctest.log | head -30
