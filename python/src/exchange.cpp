#include "exchange.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "alloy/common/error.h"
#include "alloy/tensor/dtype.h"
#include "alloy/runtime/executor.h"
#include "alloy/tensor/npy.h"

namespace alloy::python {
namespace {

namespace dl = nb::dlpack;

// ---- Python objects looked up once and kept for the process -----------------------------
// (leaked on purpose: releasing them after the interpreter is gone would crash at exit)

PyObject* loaded_module(const char* name) {
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  return PyDict_GetItemString(modules, name);    // borrowed; nullptr when not imported
}

// `module.attr` of a module already imported (nullptr otherwise, or when it has no such attribute).
PyObject* attribute_of_loaded(const char* module, const char* dotted_attr) {
  PyObject* object = loaded_module(module);
  if (!object) return nullptr;
  Py_INCREF(object);
  std::string path(dotted_attr);
  size_t start = 0;
  while (object && start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    PyObject* next = PyObject_GetAttrString(object, name.c_str());
    Py_DECREF(object);
    object = next;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (!object) PyErr_Clear();
  return object;
}

// A cached attribute of a module, found once the caller has imported the module (this never
// imports torch or NumPy itself).
struct LoadedAttr {
  const char* module;
  const char* path;
  const char* fallback;  // another path to try, or nullptr
  PyObject* value = nullptr;
  PyObject* get() {
    if (!value) value = attribute_of_loaded(module, path);
    if (!value && fallback) value = attribute_of_loaded(module, fallback);
    return value;
  }
};

LoadedAttr torch_tensor_type{"torch", "Tensor", nullptr};
LoadedAttr torch_to_dlpack_versioned{"torch", "_C._to_dlpack_versioned", nullptr};  // DLPack 1.x (torch >= 2.7)
LoadedAttr torch_to_dlpack{"torch", "_C._to_dlpack", "utils.dlpack.to_dlpack"};
LoadedAttr torch_from_dlpack{"torch", "_C._from_dlpack", "utils.dlpack.from_dlpack"};
LoadedAttr torch_raw_stream{"torch", "_C._cuda_getCurrentRawStream", nullptr};
LoadedAttr torch_current_stream_fn{"torch", "cuda.current_stream", nullptr};
LoadedAttr numpy_array_type{"numpy", "ndarray", nullptr};
LoadedAttr numpy_scalar_type{"numpy", "generic", nullptr};

nb::object call(PyObject* fn, nb::handle arg) {
  PyObject* result = PyObject_CallOneArg(fn, arg.ptr());
  if (!result) nb::raise_python_error();
  return nb::steal(result);
}

// ---- dtypes and devices -------------------------------------------------------------------

std::optional<DType> dtype_of(dl::dtype t) {
  if (t.lanes != 1) return std::nullopt;
  switch (dl::dtype_code(t.code)) {
    case dl::dtype_code::Float:
      if (t.bits == 64) return DType::f64;
      if (t.bits == 32) return DType::f32;
      if (t.bits == 16) return DType::f16;
      return std::nullopt;
    case dl::dtype_code::Bfloat: return t.bits == 16 ? std::optional(DType::bf16) : std::nullopt;
    case dl::dtype_code::Int:
      if (t.bits == 64) return DType::i64;
      if (t.bits == 32) return DType::i32;
      return std::nullopt;
    case dl::dtype_code::Bool: return t.bits == 8 ? std::optional(DType::boolean) : std::nullopt;
    default: return std::nullopt;
  }
}

std::string describe(dl::dtype t) {
  const char* code = "?";
  switch (dl::dtype_code(t.code)) {
    case dl::dtype_code::Int: code = "int"; break;
    case dl::dtype_code::UInt: code = "uint"; break;
    case dl::dtype_code::Float: code = "float"; break;
    case dl::dtype_code::Bfloat: code = "bfloat"; break;
    case dl::dtype_code::Complex: code = "complex"; break;
    case dl::dtype_code::Bool: code = "bool"; break;
    default: code = "float8/other"; break;
  }
  return std::string(code) + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

dl::dtype dl_dtype(DType t) {
  switch (t) {
    case DType::f64: return {uint8_t(dl::dtype_code::Float), 64, 1};
    case DType::f32: return {uint8_t(dl::dtype_code::Float), 32, 1};
    case DType::f16: return {uint8_t(dl::dtype_code::Float), 16, 1};
    case DType::bf16: return {uint8_t(dl::dtype_code::Bfloat), 16, 1};
    case DType::i64: return {uint8_t(dl::dtype_code::Int), 64, 1};
    case DType::i32: return {uint8_t(dl::dtype_code::Int), 32, 1};
    case DType::boolean: return {uint8_t(dl::dtype_code::Bool), 8, 1};
  }
  internal_error("bad dtype");
}

std::string input_place(const Value& declared, size_t position) {
  return "input '" + declared.name + "' (argument " + std::to_string(position) + ")";
}

std::string expected_str(const Value& declared) {
  return (declared.is_scalar() ? "a scalar " : "a tensor ") + declared.type_str();
}

std::string python_type_name(nb::handle object) {
  nb::str name = nb::type_name(object.type());
  return name.c_str();
}

// ---- imports -------------------------------------------------------------------------------

// Keeps the imported array, and the object it came from, alive as long as any Alloy view of it
// (a capsule's tensor is owned by its DLPack deleter; the object is kept too, so that nothing the
// caller made for the call goes before the outputs that view it). Its last release needs the GIL
// (it may drop Python references), which a run on another thread does not hold.
template <class Array>
Tensor wrap_array(Array array, nb::object source, DType dtype, Device device) {
  size_t rank = array.ndim();
  std::vector<int64_t> sizes(rank), strides(rank);
  int64_t reach = 0;
  bool empty = false;
  for (size_t i = 0; i < rank; ++i) {
    sizes[i] = int64_t(array.shape(i));
    strides[i] = array.stride(i);
    empty |= sizes[i] == 0;
    reach += (sizes[i] - 1) * std::abs(strides[i]);
  }
  auto buffer = std::make_shared<Buffer>();
  buffer->device = device;
  buffer->data = const_cast<void*>(static_cast<const void*>(array.data()));
  buffer->bytes = empty ? 0 : size_t(reach + 1) * size_t(dtype_size(dtype));
  auto* holder = new std::pair<Array, nb::object>(std::move(array), std::move(source));
  buffer->deleter = [holder](void*) {
    if (!nb::is_alive()) return;  // the interpreter is gone: nothing may be released any more
    nb::gil_scoped_acquire gil;
    delete holder;
  };
  return Tensor(std::move(buffer), dtype, std::move(sizes), std::move(strides), 0);
}

// ---- scalars -------------------------------------------------------------------------------
// A scalar input is given as a number (a Python or NumPy one) or a 0-dim tensor, and is copied
// into a 0-dim tensor of its declared dtype by value. What the dtype cannot hold is refused, as
// PyTorch refuses it: a float for an integer or a bool, an integer outside the dtype's range (it
// would wrap), an integer other than 0 or 1 for a bool.

[[noreturn]] void integer_out_of_range(const std::string& integer, const Value& declared, const std::string& place) {
  DType dtype = declared.dtype();
  if (dtype == DType::boolean)
    user_error_at(place, "expected ", expected_str(declared), " (True, False, 0 or 1), found the integer ", integer);
  const bool i32 = dtype == DType::i32;
  user_error_at(place, "expected ", expected_str(declared), ", found the integer ", integer, ", which does not fit ",
                dtype_name(dtype), " (", i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min(), " to ",
                i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max(), ")");
}

// A float as Python writes it (2.0, 0.1, 1e+100, inf, nan).
std::string python_float_text(double value) {
  char text[32];
  auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  std::string out(text, end);
  if (out.find_first_of(".en") == std::string::npos) out += ".0";
  return out;
}

Tensor scalar_of(const Literal& number, const Value& declared, const std::string& place) {
  DType dtype = declared.dtype();
  Tensor t = Tensor::empty(dtype, {});
  if (is_floating(dtype)) {
    store_double(t.data(), dtype, 0, number.as_double());
    return t;
  }
  if (number.kind == Literal::Kind::real)
    user_error_at(place, "expected ", expected_str(declared), ", found the float ", python_float_text(number.f));
  int64_t value = number.kind == Literal::Kind::boolean ? int64_t(number.b) : number.i;
  bool fits = dtype == DType::boolean ? (number.kind == Literal::Kind::boolean || value == 0 || value == 1)
              : dtype == DType::i32   ? value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()
                                      : true;
  if (!fits) integer_out_of_range(std::to_string(value), declared, place);
  store_int(t.data(), dtype, 0, value);
  return t;
}

// A Python bool, int or float as the declared scalar (or 0-dim tensor).
Tensor from_number(nb::handle object, const Value& declared, const std::string& place) {
  PyObject* o = object.ptr();
  if (PyBool_Check(o)) return scalar_of(Literal{Literal::Kind::boolean, 0, 0, o == Py_True}, declared, place);
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow) return scalar_of(Literal{Literal::Kind::integer, value, 0, false}, declared, place);
    if (!is_floating(declared.dtype())) integer_out_of_range(nb::cast<std::string>(nb::str(object)), declared, place);
    double real = PyLong_AsDouble(o);  // past 64 bits, for a float input: rounded, as torch.tensor(2**70.) is
    if (real == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      user_error_at(place, "the integer ", nb::cast<std::string>(nb::str(object)), " is too large for a float");
    }
    return scalar_of(Literal{Literal::Kind::real, 0, real, false}, declared, place);
  }
  double value = PyFloat_AsDouble(o);
  if (value == -1.0 && PyErr_Occurred()) nb::raise_python_error();
  return scalar_of(Literal{Literal::Kind::real, 0, value, false}, declared, place);
}

// A 0-dim tensor as the declared scalar, by the value it holds (read on the host).
Tensor from_zero_dim(const Tensor& tensor, const Value& declared, const std::string& place) {
  Tensor host = to_cpu(tensor);
  DType dtype = host.dtype();
  Literal number;
  if (dtype == DType::boolean) number = Literal{Literal::Kind::boolean, 0, 0, load_as_int(host.data(), dtype, 0) != 0};
  else if (is_floating(dtype)) number = Literal{Literal::Kind::real, 0, load_as_double(host.data(), dtype, 0), false};
  else number = Literal{Literal::Kind::integer, load_as_int(host.data(), dtype, 0), 0, false};
  return scalar_of(number, declared, place);
}

bool is_number(nb::handle object) {
  return PyBool_Check(object.ptr()) || PyLong_Check(object.ptr()) || PyFloat_Check(object.ptr());
}

// NumPy scalars (np.float32(2.0), np.int64(3), np.bool_) and other numbers with __index__ or
// __float__. NumPy's complex scalars are no numbers: their __float__ would drop the imaginary
// part (with a warning only), as would a NumPy str or datetime scalar's conversion.
std::optional<nb::object> as_python_number(nb::handle object) {
  PyObject* numpy_generic = numpy_scalar_type.get();
  if (numpy_generic && PyObject_TypeCheck(object.ptr(), reinterpret_cast<PyTypeObject*>(numpy_generic)))
    return numpy_scalar_value(object);
  if (PyIndex_Check(object.ptr())) {
    PyObject* index = PyNumber_Index(object.ptr());
    if (index) return nb::steal(index);
    throw nb::python_error();  // raised by the user's __index__: theirs, unchanged
  }
  if (PyFloat_Check(object.ptr()) || (Py_TYPE(object.ptr())->tp_as_number && Py_TYPE(object.ptr())->tp_as_number->nb_float)) {
    PyObject* real = PyNumber_Float(object.ptr());
    if (real) return nb::steal(real);
    throw nb::python_error();  // raised by the user's __float__
  }
  return std::nullopt;
}

Kind kind_of(nb::handle object, CallerKind& caller) {
  if (is_torch_tensor(object)) return Kind::torch;
  PyObject* numpy_type = numpy_array_type.get();
  if (numpy_type && PyObject_TypeCheck(object.ptr(), reinterpret_cast<PyTypeObject*>(numpy_type))) return Kind::numpy;
  if (caller.kind == Kind::none) {
    // results go back through this framework's from_dlpack where it has one
    nb::object module_name = nb::getattr(object.type(), "__module__", nb::none());
    if (nb::isinstance<nb::str>(module_name)) {
      std::string root = nb::cast<std::string>(module_name);
      root = root.substr(0, root.find('.'));
      if (PyObject* module = loaded_module(root.c_str()); module && PyObject_HasAttrString(module, "from_dlpack"))
        caller.module = nb::borrow(module);
    }
  }
  return Kind::other;
}

}  // namespace

bool is_torch_tensor(nb::handle object) {
  PyObject* type = torch_tensor_type.get();
  return type && PyObject_TypeCheck(object.ptr(), reinterpret_cast<PyTypeObject*>(type));
}

std::optional<nb::object> numpy_scalar_value(nb::handle object) {
  PyObject* generic = numpy_scalar_type.get();
  if (!generic || !PyObject_TypeCheck(object.ptr(), reinterpret_cast<PyTypeObject*>(generic))) return std::nullopt;
  PyObject* item = PyObject_CallMethod(object.ptr(), "item", nullptr);
  if (!item) {
    PyErr_Clear();
    return std::nullopt;
  }
  nb::object value = nb::steal(item);
  if (!PyBool_Check(item) && !PyLong_Check(item) && !PyFloat_Check(item)) return std::nullopt;  // complex, str, datetime
  return value;
}

namespace {

// `source` as an array, writable where the producer allows it: a writable import first (a DLPack
// 1.x tensor flagged read-only, or a read-only buffer, refuses it), then a read-only one.
bool import_array(nb::handle source, nb::ndarray<nb::ro>& array, bool& read_only) {
  nb::ndarray<> writable;
  if (nb::try_cast(source, writable, false)) {
    array = nb::ndarray<nb::ro>(writable);
    read_only = false;
    return true;
  }
  if (PyErr_Occurred()) PyErr_Clear();
  read_only = true;
  return nb::try_cast(source, array, false);
}

// The DLPack capsule that `source` hands over: itself when it is one, else what its __dlpack__
// returns (a versioned capsule asked for first, as nanobind asks); an invalid object when it has
// no __dlpack__ or that fails (nanobind then tries the buffer protocol). Alloy takes the capsule
// itself, rather than letting nanobind call __dlpack__, so that one consumed before is refused:
// by its name ("used_dltensor", which an importer gives the capsules it consumes) or because this
// call took the same one for another input (an object may hand back a capsule it keeps). The
// tensor of a capsule is freed by whoever consumed it: taking it twice frees it twice.
nb::object dlpack_capsule(nb::handle source, CallerKind& caller, const std::string& place) {
  nb::object capsule;
  if (PyCapsule_CheckExact(source.ptr())) {
    capsule = nb::borrow(source);
  } else {
    nb::object dlpack = nb::steal(PyObject_GetAttrString(source.ptr(), "__dlpack__"));
    if (!dlpack.is_valid()) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();  // raised by a property of the user's
      PyErr_Clear();
      return {};
    }
    // made once and kept for the process (leaked on purpose, as the looked-up attributes above are)
    static PyObject* no_args = PyTuple_New(0);
    static PyObject* versioned = [] {
      nb::dict kwargs;
      kwargs["max_version"] = nb::make_tuple(1, 0);
      return kwargs.release().ptr();
    }();
    PyObject* result = PyObject_Call(dlpack.ptr(), no_args, versioned);
    // producers before DLPack 1.0 take no max_version; some refuse an unversioned read-only export
    if (!result && (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError))) {
      PyErr_Clear();
      result = PyObject_CallNoArgs(dlpack.ptr());
    }
    // An exception raised by the user's __dlpack__ is theirs and propagates unchanged (so do
    // KeyboardInterrupt and SystemExit from anywhere); only an object that also offers the buffer
    // protocol falls back to it (NumPy before 2.1 refuses an unversioned read-only export).
    if (!result) {
      if (!PyErr_ExceptionMatches(PyExc_Exception) || !PyObject_CheckBuffer(source.ptr())) throw nb::python_error();
      PyErr_Clear();
      return {};
    }
    capsule = nb::steal(result);
    if (!PyCapsule_CheckExact(result))
      user_error_at(place, "its __dlpack__() returned ", python_type_name(capsule), ", not a DLPack capsule");
  }
  for (const auto& [seen, seen_place] : caller.capsules)
    if (seen.is(capsule))
      user_error_at(place, "its DLPack capsule is the one ", seen_place, " consumed in this call; a capsule can be consumed once "
                    "(hand out a new capsule from each __dlpack__() call)");
  const char* name = PyCapsule_GetName(capsule.ptr());
  if (!name) PyErr_Clear();
  if (name && std::string_view(name).starts_with("used_"))
    user_error_at(place, "its DLPack capsule was already consumed (it is named '", name, "'); a capsule can be consumed once: "
                  "pass the tensor itself, or a new capsule from its __dlpack__()");
  return capsule;
}

}  // namespace

Tensor import_input(nb::handle object, const Value& declared, size_t position, CallerKind& caller, bool* read_only,
                    const std::string* place_given, bool updated_in_place) {
  const std::string place = place_given ? *place_given : input_place(declared, position);
  if (read_only) *read_only = false;
  if (object.is_none()) user_error_at(place, "expected ", expected_str(declared), ", found None");
  if (is_number(object) || (declared.is_scalar() && !nb::hasattr(object, "__dlpack__"))) {
    if (declared.rank() > 0)
      user_error_at(place, "expected ", expected_str(declared), ", found the number ", nb::cast<std::string>(nb::repr(object)));
    if (is_number(object)) return from_number(object, declared, place);
    if (auto number = as_python_number(object)) return from_number(*number, declared, place);
    user_error_at(place, "expected ", expected_str(declared), ", found ", python_type_name(object));
  }
  Kind kind = kind_of(object, caller);
  nb::ndarray<nb::ro> array;
  bool imported = false, array_read_only = false;
  nb::object source = nb::borrow(object);
  if (kind == Kind::torch) {
    // torch's own exporters, called directly: Tensor.__dlpack__ refuses tensors that require grad
    // (parameters) and synchronizes streams for a consumer that named none.
    for (LoadedAttr* exporter : {&torch_to_dlpack_versioned, &torch_to_dlpack}) {
      PyObject* to_dlpack = exporter->get();
      if (!to_dlpack || imported) continue;
      PyObject* capsule = PyObject_CallOneArg(to_dlpack, object.ptr());
      if (!capsule) {
        PyErr_Clear();  // an exporter this torch does not have in that form: try the next
        continue;
      }
      imported = import_array(nb::steal(capsule), array, array_read_only);
    }
    if (!imported) source = object.attr("detach")();  // then through __dlpack__
  }
  if (!imported) {
    nb::object capsule = dlpack_capsule(source, caller, place);
    imported = import_array(capsule.is_valid() ? capsule : source, array, array_read_only);
    if (imported && capsule.is_valid()) caller.capsules.emplace_back(capsule, place);  // kept: its address stays its own
  }
  if (!imported) {
    if (PyErr_Occurred()) PyErr_Clear();
    if (nb::hasattr(object, "dtype")) {  // an array (NumPy's) whose dtype no view describes: say which
      nb::object dtype = object.attr("dtype");
      std::string text = nb::str(dtype).c_str();
      nb::object order = nb::getattr(dtype, "byteorder", nb::none());
      if (nb::isinstance<nb::str>(order) && std::string(nb::str(order).c_str()) == ">")
        user_error_at(place, "expected ", expected_str(declared), ", found ", python_type_name(object), " of dtype ", text,
                      " in big-endian byte order; give it in this machine's (a.astype(a.dtype.newbyteorder('=')))");
      nb::object kind = nb::getattr(dtype, "kind", nb::none());  // NumPy's: objects, records, strings, dates
      if (nb::isinstance<nb::str>(kind) && std::string("OVSUMm").find(nb::str(kind).c_str()) != std::string::npos)
        user_error_at(place, "expected ", expected_str(declared), ", found ", python_type_name(object), " of dtype ", text,
                      ", which is not supported");
    }
    user_error_at(place, "expected ", expected_str(declared), ", found ", python_type_name(object),
                  " (not a tensor: no __dlpack__ or buffer protocol, or a layout DLPack cannot describe)");
  }
  std::optional<DType> dtype = dtype_of(array.dtype());
  if (!dtype)
    user_error_at(place, "dtype ", describe(array.dtype()), " is not supported; expected ",
                  expected_str(declared));
  Device device;
  switch (array.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: device = Device{DeviceKind::cpu, 0}; break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: device = Device{DeviceKind::cuda, array.device_id()}; break;
    default:
      user_error_at(place, "is on a device of DLPack type ", array.device_type(),
                    "; expected a CPU or CUDA tensor");
  }
  if (declared.is_scalar() && array.ndim() != 0) {
    std::string found = std::string(dtype_name(*dtype)) + "[";
    for (size_t i = 0; i < array.ndim(); ++i) found += (i ? ", " : "") + std::to_string(array.shape(i));
    user_error_at(place, "expected ", expected_str(declared), ", found a tensor ", found,
                  "] (a scalar input takes a number or a 0-dim tensor)");
  }
  if (caller.kind == Kind::none) caller.kind = kind;
  Tensor t = wrap_array(std::move(array), nb::borrow(object), *dtype, device);
  // a scalar is the value it holds, in its declared dtype (a copy, so never read-only)
  if (declared.is_scalar()) return from_zero_dim(t, declared, place);
  if (read_only) *read_only = array_read_only;
  // NumPy has no bf16: an f32 or f64 array feeds a bf16 input, rounded (a copy)
  if (kind == Kind::numpy && declared.dtype() == DType::bf16 && (*dtype == DType::f32 || *dtype == DType::f64)) {
    if (updated_in_place)
      user_error_at(place, "is an ", dtype_name(*dtype), " array, but the fusion updates this bf16 input in place: a ",
                    "converted copy would be written and the array left unchanged; expected a bf16 tensor (torch.bfloat16, "
                    "or another DLPack producer's bf16)");
    return convert_for_input(t, DType::bf16, declared.name, "array");
  }
  return t;
}

nb::object export_output(const Tensor& result, const CallerKind& caller, bool read_only) {
  Tensor t = result;
  if (caller.kind == Kind::numpy || caller.kind == Kind::none) {
    t = to_cpu(t);
    if (t.dtype() == DType::bf16) {  // NumPy has no bf16; f32 holds every bf16 value exactly
      Tensor packed = packed_cpu(t), wide = Tensor::empty(DType::f32, t.sizes());
      for (int64_t i = 0; i < packed.numel(); ++i) store_double(wide.data(), DType::f32, i, load_as_double(packed.data(), DType::bf16, i));
      t = wide;
    }
  }
  std::vector<size_t> shape;
  for (int64_t s : t.sizes()) shape.push_back(size_t(s));
  const Device device = t.device();
  int device_type = device.kind == DeviceKind::cuda ? nb::device::cuda::value : nb::device::cpu::value;
  nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  void* data = t.data();
  switch (caller.kind) {
    case Kind::none:
    case Kind::numpy:
      if (read_only)
        return nb::cast(nb::ndarray<nb::numpy, nb::ro>(data, shape.size(), shape.data(), owner, t.strides().data(),
                                                       dl_dtype(t.dtype()), device_type, device.index));
      return nb::cast(nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, t.strides().data(), dl_dtype(t.dtype()),
                                             device_type, device.index));
    case Kind::torch: {
      // a plain DLPack capsule, handed to torch's C importer (no Python-level stream handshake)
      nb::object capsule = nb::cast(nb::ndarray<>(data, shape.size(), shape.data(), owner, t.strides().data(),
                                                  dl_dtype(t.dtype()), device_type, device.index));
      PyObject* from_dlpack = torch_from_dlpack.get();
      if (!from_dlpack) internal_error("torch is imported but has no from_dlpack");
      return call(from_dlpack, capsule);
    }
    case Kind::other: {
      nb::object array = read_only ? nb::cast(nb::ndarray<nb::array_api, nb::ro>(data, shape.size(), shape.data(), owner,
                                                                                 t.strides().data(), dl_dtype(t.dtype()),
                                                                                 device_type, device.index))
                                   : nb::cast(nb::ndarray<nb::array_api>(data, shape.size(), shape.data(), owner,
                                                                         t.strides().data(), dl_dtype(t.dtype()), device_type,
                                                                         device.index));
      if (caller.module.is_valid() && !caller.module.is_none()) return caller.module.attr("from_dlpack")(array);
      return array;
    }
  }
  internal_error("bad caller kind");
}

std::optional<uintptr_t> torch_current_stream(int device) {
  if (PyObject* raw = torch_raw_stream.get()) {
    nb::object handle = call(raw, nb::int_(device));
    return nb::cast<uintptr_t>(handle);
  }
  if (PyObject* current = torch_current_stream_fn.get()) return stream_handle(call(current, nb::int_(device)));
  return std::nullopt;
}

uintptr_t stream_handle(nb::handle stream) {
  if (PyLong_Check(stream.ptr())) return nb::cast<uintptr_t>(stream);
  for (const char* attribute : {"cuda_stream", "ptr"})
    if (nb::hasattr(stream, attribute)) return nb::cast<uintptr_t>(stream.attr(attribute));
  user_error_at("stream", "expected a CUDA stream handle (an int, a torch.cuda.Stream or a CuPy stream), found ", python_type_name(stream));
}

}  // namespace alloy::python
