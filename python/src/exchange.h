// Tensors between Python and Alloy without copies: a caller's tensor (torch, NumPy, anything with
// __dlpack__ or the buffer protocol, through nanobind's nb::ndarray) becomes a runtime Tensor that
// keeps it alive, and a result goes back as the caller's kind of tensor viewing Alloy's buffer.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy::python {

namespace nb = nanobind;

// The kinds of tensor a caller hands in; results come back as the first tensor input's kind.
enum class Kind { none, numpy, torch, other };

struct CallerKind {
  Kind kind = Kind::none;
  nb::object module;  // Kind::other: the module whose from_dlpack makes results (may be None)
  // The DLPack capsules this call consumed, with the input that did (a capsule is consumed once).
  std::vector<std::pair<nb::object, std::string>> capsules;
};

// `object` as the input `declared` (the fusion's input at `position`), without a copy: a tensor on
// the CPU or a GPU, or a Python number for a scalar or 0-dim input. A scalar input takes a number
// (Python or NumPy) or a 0-dim tensor only, copied by value into its declared dtype, which must
// hold it (no float for an integer, no integer out of range, only 0 or 1 for a bool). A NumPy
// array of f32 or f64 may feed a bf16 input (NumPy has no bf16; it is rounded to nearest even, a
// copy). A DLPack capsule is consumed once: one already consumed, or one this call consumed for
// another input (recorded in `kind`), is a UserError. Records the kind of a tensor input in
// `kind` when none is recorded yet. A mismatch the run would report later is
// left to it (dtype, rank and sizes are checked against the declaration there); what only this
// layer sees (None, an unsupported dtype or device, an object that is no tensor) is a UserError
// naming the input. `place` names it in those errors (default: "input 'x' (argument 0)").
// `read_only` (when given) says whether the caller's memory is read-only (a NumPy array with
// writeable=False, np.frombuffer(bytes), a read-only np.memmap, a DLPack 1.x tensor flagged
// read-only): Alloy must not write into it. `updated_in_place`: the run writes into this input
// (`return y -> x`), so it must arrive in its declared dtype: a converted copy (an f32 NumPy
// array for a bf16 input) would be updated and the caller's array left as it was (a UserError).
Tensor import_input(nb::handle object, const Value& declared, size_t position, CallerKind& kind, bool* read_only = nullptr,
                    const std::string* place = nullptr, bool updated_in_place = false);

// `tensor` (a result) as the caller's kind of tensor, viewing the same memory. NumPy gets a CPU
// array (a device result is copied to the host, a bf16 result is widened to f32, exactly).
// `read_only`: the result views read-only memory (an input's), and comes back read-only where the
// kind can say so (NumPy: writeable=False; DLPack 1.x: the read-only flag; torch has no such tensors).
nb::object export_output(const Tensor& tensor, const CallerKind& kind, bool read_only = false);

// The Python bool, int or float a NumPy scalar holds (numpy.bool_, numpy.integer,
// numpy.floating, e.g. np.float32(2.0)); nullopt for anything else (complex scalars included).
// Never imports NumPy: without it loaded there are no NumPy scalars.
std::optional<nb::object> numpy_scalar_value(nb::handle object);

// torch.cuda.current_stream(device).cuda_stream, read without building a Stream object; nullopt
// when torch is not imported.
std::optional<uintptr_t> torch_current_stream(int device);

// The CUDA stream handle an argument names: an integer, or an object with `cuda_stream` (torch)
// or `ptr` (CuPy) holding one.
uintptr_t stream_handle(nb::handle stream);

// Whether `object` is a torch.Tensor (false when torch is not imported).
bool is_torch_tensor(nb::handle object);

}  // namespace alloy::python
