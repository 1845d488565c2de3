// alloy._alloy's multi-device functions: this process's place in its job, and joining a job
// another launcher started with host teams written in Python (python/alloy/distributed.py).
#pragma once

#include <nanobind/nanobind.h>

namespace alloy::python {

namespace nb = nanobind;

void bind_distributed(nb::module_& m);

}  // namespace alloy::python
