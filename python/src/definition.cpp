#include "definition.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "alloy/backend/backend.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/runtime/trace_file.h"
#include "alloy/runtime/validate.h"
#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "alloy/pipeline/pipeline.h"
#include "exchange.h"

namespace alloy::python {
namespace {

// ---- Python values as IR pieces -----------------------------------------------------------

Literal literal_of(nb::handle number, const std::string& place) {
  if (auto value = numpy_scalar_value(number)) return literal_of(*value, place);  // np.float32(2.0): a float
  PyObject* o = number.ptr();
  if (PyBool_Check(o)) return Literal{Literal::Kind::boolean, 0, 0, o == Py_True};
  if (PyLong_Check(o) || (!PyFloat_Check(o) && PyIndex_Check(o))) {
    nb::object index = nb::steal(PyNumber_Index(o));
    if (!index.is_valid()) nb::raise_python_error();
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow) user_error_at(place, "the integer ", nb::cast<std::string>(nb::str(number)), " does not fit in 64 bits");
    return Literal{Literal::Kind::integer, value, 0, false};
  }
  double value = PyFloat_AsDouble(o);
  if (value == -1.0 && PyErr_Occurred()) nb::raise_python_error();
  return Literal{Literal::Kind::real, 0, value, false};
}

// A Python bool, int or float, a NumPy scalar of those kinds (np.float32(2.0), np.int64(3),
// np.bool_), or another number-like object; not a tensor, which may also define
// __index__/__float__ for one element.
bool is_number(nb::handle o) {
  if (PyBool_Check(o.ptr()) || PyLong_Check(o.ptr()) || PyFloat_Check(o.ptr())) return true;
  if (numpy_scalar_value(o)) return true;
  return !nb::hasattr(o, "__dlpack__") && !nb::hasattr(o, "shape") && (PyIndex_Check(o.ptr()) || PyNumber_Check(o.ptr()));
}

std::string python_type_name(nb::handle o) { return nb::type_name(o.type()).c_str(); }

// An attribute value: bool, int, float, str (a dtype name for dtype attributes), DataType, or a
// list whose strings are size symbols.
Attr attr_of(nb::handle value, const AttrSpec* spec, const std::string& place, bool in_list = false) {
  PyObject* o = value.ptr();
  DType dtype;
  if (PyBool_Check(o)) return Attr::boolean(o == Py_True);
  if (nb::try_cast(value, dtype, false)) return Attr::dtype(dtype);
  if (PyLong_Check(o) || PyFloat_Check(o) || (is_number(value) && !PyUnicode_Check(o))) {
    Literal lit = literal_of(value, place);
    switch (lit.kind) {
      case Literal::Kind::boolean: return Attr::boolean(lit.b);  // np.bool_
      case Literal::Kind::integer: return Attr::integer(lit.i);
      default: return Attr::real(lit.f);
    }
  }
  if (PyUnicode_Check(o)) {
    std::string text = nb::cast<std::string>(value);
    if (in_list) {
      if (!is_symbol_name(text)) user_error_at(place, "'", text, "' is not a size symbol (a name such as B or seq)");
      return Attr::symbol(text);
    }
    if (spec && spec->type == AttrSpec::Type::dtype) {
      if (auto parsed = parse_dtype(text)) return Attr::dtype(*parsed);
    }
    if (spec && spec->type == AttrSpec::Type::extent) {  // iota(length="V"): a size symbol
      if (!is_symbol_name(text)) user_error_at(place, "'", text, "' is not a size symbol (a name such as B or seq)");
      return Attr::symbol(text);
    }
    return Attr::string(text);
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    Attr list;
    list.kind = Attr::Kind::list;
    for (nb::handle item : nb::borrow<nb::sequence>(value)) list.list.push_back(attr_of(item, spec, place, true));
    return list;
  }
  user_error_at(place, "expected a number, a bool, a string, a dtype or a list, found ", python_type_name(value));
}

Extent extent_of(nb::handle dim, Fusion& fusion, const std::string& place) {
  if (dim.is_none()) return Extent::dynamic(fusion.next_dynamic_id());
  if (PyUnicode_Check(dim.ptr())) {
    std::string name = nb::cast<std::string>(dim);
    if (name == "?") return Extent::dynamic(fusion.next_dynamic_id());
    if (!is_symbol_name(name)) user_error_at(place, "'", name, "' is not a size symbol (a name such as B or seq, not a dtype or keyword)");
    return Extent::symbol(name);
  }
  if (PyBool_Check(dim.ptr()) || !is_number(dim)) user_error_at(place, "a size must be an int, -1, None or a symbol name, found ", python_type_name(dim));
  Literal lit = literal_of(dim, place);
  if (lit.kind == Literal::Kind::boolean) user_error_at(place, "a size must be an int, -1, None or a symbol name, found a bool");
  if (lit.kind != Literal::Kind::integer) user_error_at(place, "a size must be an integer, found ", lit.f);
  if (lit.i == -1) return Extent::dynamic(fusion.next_dynamic_id());
  if (lit.i < 0) user_error_at(place, "a size must be >= 0 (or -1 for a dynamic size), found ", lit.i);
  return Extent::constant(lit.i);
}

// `sequence`'s items as a tuple: references the call owns, so that code the call runs while it
// reads them (an input's __dlpack__) cannot free an item by changing the caller's list.
nb::tuple owned_items(nb::handle sequence, const char* not_a_sequence) {
  if (!PySequence_Check(sequence.ptr()) || PyUnicode_Check(sequence.ptr())) throw nb::type_error(not_a_sequence);
  PyObject* items = PySequence_Tuple(sequence.ptr());
  if (!items) nb::raise_python_error();
  return nb::steal<nb::tuple>(items);
}

// ---- devices and comparisons ---------------------------------------------------------------

Device parse_device(nb::handle device, std::optional<Device> inputs_gpu) {
  if (device.is_none()) return inputs_gpu.value_or(Device{DeviceKind::cpu, 0});
  if (PyBool_Check(device.ptr())) user_error_at("device", "expected None, \"cpu\", \"cuda\", \"cuda:N\" or an int, found a bool");
  if (PyLong_Check(device.ptr())) {
    int overflow = 0;
    long long index = PyLong_AsLongLongAndOverflow(device.ptr(), &overflow);
    if (overflow || index < 0 || index > std::numeric_limits<int>::max())
      user_error_at("device", "expected a CUDA device index (an int from 0), found ", nb::cast<std::string>(nb::str(device)));
    return Device{DeviceKind::cuda, int(index)};
  }
  std::string text = nb::cast<std::string>(nb::str(device));  // also torch.device("cuda:1")
  if (text == "cpu") return Device{DeviceKind::cpu, 0};
  if (text == "cuda") return inputs_gpu.value_or(Device{DeviceKind::cuda, 0});
  if (text.starts_with("cuda:")) {
    try {
      size_t used = 0;
      int index = std::stoi(text.substr(5), &used);
      if (used == text.size() - 5 && index >= 0) return Device{DeviceKind::cuda, index};
    } catch (const std::exception&) {
    }
  }
  user_error_at("device", "expected None, \"cpu\", \"cuda\", \"cuda:N\" or an int, found '", text, "'");
}

// Empty when `actual` matches `expected` by runtime/validate.h's rule; else one line naming the
// output and what differs.
std::string compare(const Tensor& actual, const Tensor& expected, const std::string& name) {
  std::string difference = compare_to_reference(actual, expected);
  return difference.empty() ? difference : "output '" + name + "': " + difference;
}

}  // namespace

// ---- building ----------------------------------------------------------------------------

void Definition::check_usable(const char* what) const {
  if (!failure.empty())
    user_error_at(what, "fusion '", fusion->name(), "' cannot be used: an error ended its definition: ", failure);
}

void Definition::check_building(const char* what) const {
  check_usable(what);
  if (finished)
    user_error_at(what, "the definition of fusion '", fusion->name(),
                  "' is finished (its `with` block has ended); define ops inside the block");
}

void Definition::fail(const std::string& message) {
  if (failure.empty()) failure = message;
}

// Runs a step of the definition; a user error in it ends the definition (the IR may hold half of
// what the step made, such as a constraint recorded before a shape rule failed).
template <class Fn>
auto guarded(Definition& d, Fn&& fn) {
  try {
    return fn();
  } catch (const UserError& e) {
    d.fail(e.what());
    throw;
  }
}

ValueHandle Definition::add_input(std::optional<std::string> name, DType dtype, std::optional<std::vector<nb::object>> shape,
                                  const SourceLoc& loc, std::optional<std::vector<int64_t>> mesh, std::optional<int> shard_axis) {
  const char* what = shape ? "define_tensor" : "define_scalar";  // a scalar input is define_scalar(dtype=...)
  check_building(what);
  return guarded(*this, [&] {
    std::string place = loc.known() ? loc.str() + ": " + what : what;
    std::string value_name = name ? *name : fusion->fresh_name(shape ? "T" : "S");
    if (!is_value_name(value_name)) user_error_at(place, "'", value_name, "' cannot name a value (expected an identifier)");
    ValueType type;
    type.dtype = dtype;
    type.is_scalar = !shape.has_value();
    if (shape)
      for (nb::handle dim : *shape) type.shape.push_back(extent_of(dim, *fusion, place));
    std::optional<Sharding> sharding;
    if (mesh) {
      if (mesh->empty()) user_error_at(place, "a mesh needs at least one device");
      for (size_t i = 0; i < mesh->size(); ++i) {
        if ((*mesh)[i] < 0) user_error_at(place, "mesh device ids are ranks (>= 0), found ", (*mesh)[i]);
        for (size_t j = 0; j < i; ++j)
          if ((*mesh)[j] == (*mesh)[i]) user_error_at(place, "device ", (*mesh)[i], " appears twice in the mesh");
      }
      sharding = Sharding::replicated(*mesh);
      if (shard_axis) {
        if (type.rank() == 0) user_error_at(place, "a ", type.is_scalar ? "scalar" : "0-dim tensor", " has no axis to shard; use Replicate()");
        if (*shard_axis < 0 || *shard_axis >= type.rank())
          user_error_at(place, "shard axis ", *shard_axis, " is out of range for a tensor of rank ", type.rank(), "; expected 0 to ",
                        type.rank() - 1);
        sharding->shard_axis = *shard_axis;
      }
    } else if (shard_axis) {
      user_error_at(place, "a placement was given without a mesh");
    }
    return ValueHandle{shared_from_this(), fusion->add_input(value_name, std::move(type), std::move(sharding), loc)};
  });
}

// With a dtype, the literal cast to it (a scalar of that dtype, as nvFuser's define_scalar makes
// one): the cast truncates a float towards zero (2.7 -> 2) and rounds to a narrower float (0.1 in
// f32). A value an integer dtype cannot hold (past its range, NaN or inf) is refused rather than
// wrapped, as torch.tensor(value, dtype=...) refuses it.
ValueHandle Definition::add_literal(nb::handle number, std::optional<DType> dtype, const SourceLoc& loc) {
  check_building("define_scalar");
  return guarded(*this, [&] {
    const std::string place = loc.known() ? loc.str() + ": define_scalar" : "define_scalar";
    if (!is_number(number)) user_error_at(place, "expected a bool, int or float, found ", python_type_name(number));
    Literal literal = literal_of(number, place);
    Value* value = fusion->add_literal(literal);
    if (!dtype) return ValueHandle{shared_from_this(), value};
    if (*dtype == DType::i32 || *dtype == DType::i64) {
      const bool i32 = *dtype == DType::i32;
      const double low = i32 ? -2147483648.0 : -9223372036854775808.0, high = i32 ? 2147483648.0 : 9223372036854775808.0;
      bool fits = literal.kind == Literal::Kind::boolean ||
                  (literal.kind == Literal::Kind::integer && (!i32 || (literal.i >= -2147483648LL && literal.i <= 2147483647LL))) ||
                  (literal.kind == Literal::Kind::real && std::isfinite(literal.f) && std::trunc(literal.f) >= low &&
                   std::trunc(literal.f) < high);
      if (!fits)
        user_error_at(place, nb::cast<std::string>(nb::repr(number)), " does not fit ", dtype_name(*dtype), " (",
                      i32 ? "-2147483648 to 2147483647" : "-9223372036854775808 to 9223372036854775807", ")");
    }
    value = fusion->add_op1(OpKind::cast, {value}, {{"dtype", Attr::dtype(*dtype)}}, loc);
    return ValueHandle{shared_from_this(), value};
  });
}

Value* Definition::value_of(nb::handle object, const SourceLoc& loc, const std::string& what) {
  ValueHandle* handle = nullptr;
  if (nb::try_cast(object, handle, false) && handle) {
    if (handle->owner.get() != this)
      user_error(loc, what, ": value '", handle->value->name, "' belongs to another fusion definition");
    return handle->value;
  }
  if (object.is_none()) user_error(loc, what, ": an argument is None");
  if (is_number(object)) return fusion->add_literal(literal_of(object, loc.str()));
  user_error(loc, what, ": expected a value of this definition or a number, found ", python_type_name(object));
}

std::vector<ValueHandle> Definition::add_op(const std::string& op, const std::vector<nb::object>& inputs, const nb::dict& attrs,
                                            const SourceLoc& loc) {
  check_building(op.c_str());
  return guarded(*this, [&] {
    const OpRow* row = find_op(op);
    if (!row) user_error(loc, "unknown op '", op, "'");
    std::vector<Value*> values;
    for (const nb::object& in : inputs) values.push_back(value_of(in, loc, op));
    std::vector<NamedAttr> named;
    for (auto [key, value] : attrs) {
      if (value.is_none()) continue;  // an optional attribute left out
      std::string name = nb::cast<std::string>(key);
      auto spec = std::find_if(row->attrs.begin(), row->attrs.end(), [&](const AttrSpec& s) { return s.name == name; });
      named.push_back({name, attr_of(value, spec == row->attrs.end() ? nullptr : &*spec, loc.str() + ": " + op + ": " + name)});
    }
    std::vector<ValueHandle> out;
    for (Value* v : fusion->add_op(row->kind, std::move(values), std::move(named), loc)) out.push_back({shared_from_this(), v});
    return out;
  });
}

void Definition::add_output(const ValueHandle& value, const std::optional<ValueHandle>& alias_input, const SourceLoc& loc) {
  check_building("add_output");
  guarded(*this, [&] {
    for (const ValueHandle* h : {&value, alias_input ? &*alias_input : nullptr})
      if (h && h->owner.get() != this) user_error(loc, "add_output: value '", h->value->name, "' belongs to another fusion definition");
    fusion->add_output(value.value, loc, alias_input ? alias_input->value : nullptr);
    return 0;
  });
}

void Definition::finish() {
  check_usable("finish");
  if (finished) return;
  if (fusion->outputs().empty()) {
    fail("fusion '" + fusion->name() + "' has no outputs");
    user_error_at("FusionDefinition", "fusion '", fusion->name(), "' has no outputs: call fd.add_output(value) inside its `with` block");
  }
  finished = true;
}

// ---- running -----------------------------------------------------------------------------

struct Definition::Prepared {
  std::vector<Tensor> tensors;
  std::vector<char> read_only;  // per input: the caller's memory is read-only
  bool any_read_only = false;
  CallerKind kind;
  Device device;
};

Definition::Prepared Definition::prepare(const nb::sequence& inputs, nb::handle device) {
  check_usable("execute");
  if (!finished)
    user_error_at("execute", "fusion '", fusion->name(), "' is still being defined: execute it after its `with` block");
  const std::vector<Value*>& declared = fusion->inputs();
  nb::tuple items = owned_items(inputs, "execute: inputs must be a sequence (a list or tuple)");
  size_t n = items.size();
  if (n != declared.size()) {
    std::string names;
    for (const Value* v : declared) names += (names.empty() ? "" : ", ") + v->name;
    user_error_at("execute", "fusion '", fusion->name(), "' takes ", declared.size(), " input", declared.size() == 1 ? "" : "s", " (",
                  names, "), found ", n);
  }
  Prepared p;
  p.tensors.reserve(n);
  p.read_only.assign(n, 0);
  std::optional<Device> gpu;
  size_t gpu_input = 0;
  for (size_t i = 0; i < n; ++i) {
    bool read_only = false;
    const std::vector<Value*>& aliases = fusion->output_aliases();
    bool updated = std::find(aliases.begin(), aliases.end(), declared[i]) != aliases.end();
    Tensor t = import_input(items[i], *declared[i], i, p.kind, &read_only, nullptr, updated);
    if (read_only) {
      p.read_only[i] = 1;
      p.any_read_only = true;
      check_writable(i);
    }
    if (t.device().kind == DeviceKind::cuda) {
      if (gpu && *gpu != t.device())
        user_error_at("input '" + declared[i]->name + "'", "is on ", t.device().str(), " but input '", declared[gpu_input]->name,
                      "' is on ", gpu->str(), "; expected the tensors of one run on one device (or on the cpu)");
      gpu = t.device();
      gpu_input = i;
    }
    p.tensors.push_back(std::move(t));
  }
  p.device = parse_device(device, gpu);
  if (p.device.kind == DeviceKind::cuda && !backend::device_runtime(DeviceKind::cuda).available()) {
    if (gpu)
      user_error_at("input '" + declared[gpu_input]->name + "'", "is on ", p.device.str(), " but Alloy cannot use CUDA here: ",
                    backend::device_runtime(DeviceKind::cuda).unavailable_reason());
    user_error_at("device", p.device.str(), " was asked for, but Alloy cannot use CUDA here: ", backend::device_runtime(DeviceKind::cuda).unavailable_reason());
  }
  if (gpu && p.device != *gpu)
    user_error_at("input '" + declared[gpu_input]->name + "'", "is on ", gpu->str(), "; the run was asked for ", p.device.str());
  return p;
}

// An input the run writes into (an output's alias_input) must not be read-only memory: the
// write would change a buffer its owner promised no one changes (bytes, a read-only memmap,
// writeable=False), or fault.
void Definition::check_writable(size_t input) const {
  const std::vector<Value*>& aliases = fusion->output_aliases();
  for (size_t k = 0; k < aliases.size(); ++k) {
    if (aliases[k] != fusion->inputs()[input]) continue;
    const std::string& name = fusion->inputs()[input]->name;
    user_error_at("input '" + name + "' (argument " + std::to_string(input) + ")",
                  "is read-only memory (a NumPy array with writeable=False, np.frombuffer of bytes, a read-only memmap, "
                  "or a DLPack tensor flagged read-only), but fusion '", fusion->name(), "' updates it in place (output ", k,
                  ", '", fusion->outputs()[k]->name, "', is written into it: `return ", fusion->outputs()[k]->name, " -> ", name,
                  "`); expected writable memory, e.g. a copy");
  }
}

FusionExecutor& Definition::executor_for(Device device) {
  std::lock_guard<std::mutex> lock(executors_mutex_);
  auto& slot = executors_[{int(device.kind), device.index}];
  if (!slot) {
    ExecutorOptions options = options_;
    options.device = device.kind == DeviceKind::cpu ? DeviceChoice::cpu : DeviceChoice::cuda;
    options.device_index = device.index;
    slot = std::make_unique<FusionExecutor>(fusion->clone(), options);
  }
  return *slot;
}

void Definition::set_options(const nb::dict& options) {
  const char* place = "options";
  ExecutorOptions updated = options_;
  for (auto [key, value] : options) {
    if (!PyUnicode_Check(key.ptr())) user_error_at(place, "expected option names (str), found ", python_type_name(key));
    std::string name = nb::cast<std::string>(key);
    if (name == "pipeline") {
      if (!PyUnicode_Check(value.ptr()))
        user_error_at(place, "pipeline: expected \"off\", \"auto\", \"ring\" or \"chunks=N\", found ", python_type_name(value));
      std::string text = nb::cast<std::string>(value);
      try {
        parse_pipeline_option(text);
      } catch (const UserError& e) {
        user_error_at(place, "pipeline: ", std::string(e.what()).substr(std::string("--pipeline: ").size()));
      }
      updated.pipeline = text;
    } else if (name == "poison_outputs") {
      Literal flag = is_number(value) ? literal_of(value, place) : Literal{};
      if (!is_number(value) || flag.kind != Literal::Kind::boolean)
        user_error_at(place, "poison_outputs: expected True or False, found ", nb::cast<std::string>(nb::repr(value)));
      updated.poison_outputs = flag.b;
    } else if (name == "agreement") {
      std::string text = PyUnicode_Check(value.ptr()) ? nb::cast<std::string>(value) : std::string();
      if (text == "every_run") updated.agreement = ExecutorOptions::Agreement::every_run;
      else if (text == "on_change") updated.agreement = ExecutorOptions::Agreement::on_change;
      else
        user_error_at(place, "agreement: expected \"every_run\" or \"on_change\", found ", nb::cast<std::string>(nb::repr(value)));
    } else {
      user_error_at(place, "unknown option '", name, "'; expected pipeline (\"off\", \"auto\", \"ring\" or \"chunks=N\"), "
                    "poison_outputs (a bool) or agreement (\"every_run\" or \"on_change\")");
    }
  }
  std::lock_guard<std::mutex> lock(executors_mutex_);
  if (!executors_.empty())
    user_error_at(place, "fusion '", fusion->name(), "' has already run; options are set before its first run");
  options_ = updated;
}

nb::dict Definition::options() {
  std::lock_guard<std::mutex> lock(executors_mutex_);
  nb::dict out;
  out["pipeline"] = options_.pipeline;
  out["poison_outputs"] = options_.poison_outputs;
  out["agreement"] = options_.agreement == ExecutorOptions::Agreement::on_change ? "on_change" : "every_run";
  return out;
}

static std::vector<Tensor> run_released(FusionExecutor& executor, const std::vector<Tensor>& inputs, const RunOptions& options) {
  nb::gil_scoped_release release;  // other Python threads run meanwhile; the executor is thread-safe
  return executor.run(inputs, options);
}

static RunOptions run_options(const Device& device, const CallerKind& kind, nb::handle stream) {
  RunOptions options;
  if (device.kind != DeviceKind::cuda) {
    if (!stream.is_none())
      user_error_at("stream", "a CUDA stream was given, but the run is on the cpu (where the inputs are, or device=\"cpu\"); "
                    "expected stream=None for a CPU run");
    return options;
  }
  if (!stream.is_none()) options.stream = stream_handle(stream);
  else if (kind.kind == Kind::torch) options.stream = torch_current_stream(device.index);
  return options;
}

// A traced run's file: written by rank 0 of the job (with every rank's spans where the executor
// gathered them: a fusion with a mesh).
static void write_trace(const std::string& path, const RunTrace& trace) {
  if (multidevice::process().rank == 0) write_chrome_trace(path, trace.ranks);
}

nb::list Definition::execute(const nb::sequence& inputs, nb::handle device, nb::handle stream, const std::optional<std::string>& trace) {
  Prepared p;
  RunOptions options;
  try {
    p = prepare(inputs, device);
    options = run_options(p.device, p.kind, stream);
  } catch (const UserError&) {
    fail_with_job(std::current_exception());
  }
  FusionExecutor& executor = executor_for(p.device);
  RunTrace run_trace;
  if (trace) options.trace = &run_trace;
  std::vector<Tensor> outputs = run_released(executor, p.tensors, options);
  if (trace) write_trace(*trace, run_trace);
  nb::list result;
  for (const Tensor& t : outputs) result.append(export_output(t, p.kind, p.any_read_only && views_read_only_input(t, p)));
  return result;
}

// Whether `output` lies in the memory of an input that is read-only (a view of it).
bool Definition::views_read_only_input(const Tensor& output, const Prepared& p) {
  if (!output.defined() || !output.buffer()) return false;
  auto* data = static_cast<const char*>(output.data());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    if (!p.read_only[i]) continue;
    const Buffer& in = *p.tensors[i].buffer();
    if (output.buffer() == p.tensors[i].buffer()) return true;
    auto* begin = static_cast<const char*>(in.data);
    if (in.device == output.device() && data >= begin && data < begin + std::max<size_t>(in.bytes, 1)) return true;
  }
  return false;
}

// An error in what this rank was handed, found before its run: where the fusion has a mesh and
// the job several processes, the run agrees with the job as failed (the CPU executor's agreement,
// as a rank outside the mesh joins), so the other ranks' runs end with a PeerError rather than
// wait for this one; then the error is raised here.
void Definition::fail_with_job(std::exception_ptr failure) {
  if (finished && this->failure.empty() && fusion_mesh(*fusion)) {
    FusionExecutor& executor = executor_for(Device{DeviceKind::cpu, 0});
    nb::gil_scoped_release release;
    executor.fail_run(failure);
  }
  std::rethrow_exception(failure);
}

void Definition::fail_job(const std::string& message) { fail_with_job(std::make_exception_ptr(UserError(message))); }

nb::list Definition::join_outside_mesh(const std::optional<std::string>& trace) {
  check_usable("execute");
  if (!finished) user_error_at("execute", "fusion '", fusion->name(), "' is still being defined: execute it after its `with` block");
  RunOptions options;
  RunTrace run_trace;
  if (trace) options.trace = &run_trace;
  std::vector<Tensor> outputs = run_released(executor_for(Device{DeviceKind::cpu, 0}), {}, options);
  if (!outputs.empty()) internal_error("a rank outside the mesh got ", outputs.size(), " outputs");
  if (trace) write_trace(*trace, run_trace);
  return nb::list();
}

std::string Definition::dump(const std::string& stage, nb::handle inputs, nb::handle device) {
  check_usable("dump");
  if (stage == "ir") return print_fusion(*fusion);
  if (!finished) user_error_at("dump", "fusion '", fusion->name(), "' is still being defined");
  if (inputs.is_none()) {
    Device d = parse_device(device, backend::device_runtime(DeviceKind::cuda).available() ? std::optional(Device{DeviceKind::cuda, 0}) : std::nullopt);
    return executor_for(d).dump(stage);
  }
  Prepared p = prepare(nb::borrow<nb::sequence>(inputs), device);
  FusionExecutor& executor = executor_for(p.device);
  // a run compiles the kernels these inputs need, so the generated code is there to print
  if (stage == "cuda") {
    RunOptions options = run_options(p.device, p.kind, nb::none());
    options.purpose = "dump";
    run_released(executor, p.tensors, options);
  }
  std::vector<Tensor> tensors = p.tensors;
  return executor.dump(stage, &tensors);
}

std::vector<std::string> Definition::validate(const nb::sequence& inputs, nb::handle reference, nb::handle device) {
  Prepared p = prepare(inputs, device);
  // The reference reads the inputs as they are before the run, which may update some in place:
  // copies of its own where the fusion has in-place outputs.
  std::vector<Tensor> host;
  if (reference.is_none()) {
    const auto& aliases = fusion->output_aliases();
    bool updates = std::any_of(aliases.begin(), aliases.end(), [](const Value* v) { return v != nullptr; });
    for (const Tensor& t : p.tensors) host.push_back(updates && t.device().kind == DeviceKind::cpu ? cpu_copy(t) : to_cpu(t));
  }
  RunOptions options = run_options(p.device, p.kind, nb::none());
  options.purpose = "validate";
  std::vector<Tensor> actual = run_released(executor_for(p.device), p.tensors, options);
  std::vector<Tensor> expected;
  if (reference.is_none()) {
    RunOptions cpu;
    cpu.purpose = "validate (its reference)";
    expected = run_released(executor_for(Device{DeviceKind::cpu, 0}), host, cpu);
  } else {
    nb::tuple items = owned_items(reference, "validate: reference_outputs must be a sequence");
    size_t n = items.size();
    if (n != fusion->outputs().size())
      user_error_at("validate", "fusion '", fusion->name(), "' has ", fusion->outputs().size(), " outputs, but ", n,
                    " reference outputs were given");
    CallerKind kind;
    for (size_t i = 0; i < n; ++i) {
      std::string place = "reference output '" + fusion->outputs()[i]->name + "' (reference_outputs[" + std::to_string(i) + "])";
      expected.push_back(
          import_input(items[i], *fusion->outputs()[i], i, kind, nullptr, &place));
    }
  }
  std::vector<std::string> mismatches;
  for (size_t i = 0; i < actual.size(); ++i) {
    std::string m = compare(actual[i], expected[i], fusion->outputs()[i]->name);
    if (!m.empty()) mismatches.push_back(m);
  }
  return mismatches;
}

static nb::list sharding_list(const std::vector<std::optional<Sharding>>& shardings, size_t count) {
  nb::list out;
  for (size_t i = 0; i < count; ++i) {
    const std::optional<Sharding>& s = i < shardings.size() ? shardings[i] : std::nullopt;
    if (!s) {
      out.append(nb::none());
      continue;
    }
    nb::list mesh;
    for (int64_t d : s->mesh) mesh.append(d);
    std::string placement = s->shard_axis ? "shard(axis=" + std::to_string(*s->shard_axis) + ")"
                            : s->partial  ? std::string("partial(") +
                                               (*s->partial == PartialReduce::sum ? "sum" : *s->partial == PartialReduce::max ? "max" : "min") + ")"
                                          : "replicated";
    out.append(nb::make_tuple(mesh, placement));
  }
  return out;
}

std::pair<nb::list, nb::list> Definition::shardings() {
  check_usable("shardings");
  if (!finished) user_error_at("shardings", "fusion '", fusion->name(), "' is still being defined");
  std::vector<std::optional<Sharding>> in, out;
  if (fusion_mesh(*fusion)) {  // as the run lays them (propagated, then resharded), from the CPU plan
    FusionExecutor& executor = executor_for(Device{DeviceKind::cpu, 0});
    nb::gil_scoped_release release;
    in = executor.input_shardings();
    out = executor.output_shardings();
  }
  return {sharding_list(in, fusion->inputs().size()), sharding_list(out, fusion->outputs().size())};
}

int Definition::plans_built() {
  std::lock_guard<std::mutex> lock(executors_mutex_);
  int n = 0;
  for (auto& [device, executor] : executors_) n += executor->plans_built();
  return n;
}

}  // namespace alloy::python
