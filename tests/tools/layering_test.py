"""scripts/check-layering passes on the tree and fails, naming the file and line, on each kind of
planted violation: an upward include, a sibling include, a backend header other than
backend/backend.h above the backends, and a CUDA header outside backend/cuda/ and multidevice/."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-layering"


def check(root):
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def planted(file, line, expected):
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        shutil.copytree(ROOT / "src", copy / "src")
        shutil.copytree(ROOT / "tools", copy / "tools")
        shutil.copytree(ROOT / "bench", copy / "bench", ignore=shutil.ignore_patterns("results"))
        shutil.copytree(ROOT / "python" / "src", copy / "python" / "src")
        target = copy / file
        lines = target.read_text().splitlines()
        target.write_text("\n".join(lines + [line]) + "\n")
        result = check(copy)
        assert result.returncode == 1, f"{line} in {file} was not caught:\n{result.stdout}{result.stderr}"
        where = f"{file}:{len(lines) + 1}:"
        assert where in result.stdout and expected in result.stdout, f"expected '{where} ... {expected}', got:\n{result.stdout}"


def main():
    result = check(ROOT)
    assert result.returncode == 0, f"the tree breaks the layering:\n{result.stdout}{result.stderr}"
    planted("src/alloy/ir/extent.h", '#include "alloy/runtime/executor.h"', "from a higher layer (runtime/)")
    planted("src/alloy/tensor/tensor.h", '#include "alloy/ir/fusion.h"', "from a higher layer (ir/)")
    planted("src/alloy/multidevice/shards.cpp", '#include "alloy/backend/backend.h"', "from a sibling (backend/)")
    planted("src/alloy/runtime/executor.cpp", '#include "alloy/backend/cuda/cuda_api.h"', "the one backend header")
    planted("tools/alloy_main.cpp", "#include <cuda_runtime.h>", "the CUDA header <cuda_runtime.h>")
    planted("src/alloy/host_ir/evaluator.cpp", "#include <cublasLt.h>", "the CUDA header <cublasLt.h>")
    print("layering_test: the tree passes, and every planted violation is caught")


if __name__ == "__main__":
    main()
