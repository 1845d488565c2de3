"""CTest's entry to the pytest suites (python_tests): runs pytest on this folder against the
module on PYTHONPATH. Exits 77, which CTest reports as skipped, where pytest or NumPy is not
installed (saying which), or fails then where ALLOY_REQUIRE_GPU=1 (the GPU machine, where every
suite must run); a run that collects no test is a failure, not a pass."""
import os
import sys

MISSING = 1 if os.environ.get("ALLOY_REQUIRE_GPU") == "1" else 77

try:
    import pytest
except ImportError:
    print("python_tests: skipped: pytest is not installed for", sys.executable, "(pip install pytest numpy)")
    sys.exit(MISSING)
try:
    import numpy  # noqa: F401
except ImportError:
    print("python_tests: skipped: NumPy is not installed for", sys.executable, "(pip install numpy)")
    sys.exit(MISSING)

here = os.path.dirname(os.path.abspath(__file__))
# the files or folders named (e.g. multidevice/test_sharded.py under mpirun), else all of this one
named = [os.path.join(here, a) for a in sys.argv[1:] if not a.startswith("-")]
options = [a for a in sys.argv[1:] if a.startswith("-")]
code = int(pytest.main(["-q", "-p", "no:cacheprovider"] + (named or [here]) + options))
if code == pytest.ExitCode.NO_TESTS_COLLECTED:
    print("python_tests: no tests were collected from", here)
    sys.exit(1)
sys.exit(code)
