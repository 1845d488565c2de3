// The C++ half of the `alloy` Python module (`alloy._alloy`): dtypes, the op table (from which
// python/alloy/__init__.py makes fd.ops.*), definitions and their values, parse/load, and the
// errors. The Python half (FusionDefinition) is a thin layer over these.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "alloy/backend/backend.h"
#include "alloy/common/files.h"
#include "alloy/common/settings.h"
#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "definition.h"
#include "distributed.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace alloy::python {
namespace {

const char* attr_type_name(AttrSpec::Type t) {
  switch (t) {
    case AttrSpec::Type::integer: return "int";
    case AttrSpec::Type::real: return "float";
    case AttrSpec::Type::boolean: return "bool";
    case AttrSpec::Type::string: return "str";
    case AttrSpec::Type::dtype: return "dtype";
    case AttrSpec::Type::int_list: return "ints";
    case AttrSpec::Type::extent_list: return "sizes";
    case AttrSpec::Type::optional_int_list: return "ints?";
    case AttrSpec::Type::extent: return "size";
  }
  return "?";
}

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::unary: return "unary";
    case OpClass::binary: return "binary";
    case OpClass::pointwise: return "pointwise";
    case OpClass::bitmask: return "bitmask";
    case OpClass::reduction: return "reduction";
    case OpClass::shape: return "shape";
    case OpClass::matmul: return "matmul";
    case OpClass::composite: return "composite";
    case OpClass::control: return "control";
    case OpClass::communication: return "communication";
    case OpClass::indexing: return "indexing";
  }
  return "?";
}

nb::object attr_to_python(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::integer: return nb::int_(a.i);
    case Attr::Kind::real: return nb::float_(a.f);
    case Attr::Kind::boolean: return nb::bool_(a.b);
    case Attr::Kind::string:
    case Attr::Kind::symbol: return nb::str(a.s.c_str());
    case Attr::Kind::dtype: return nb::cast(a.dt);
    case Attr::Kind::list: {
      nb::list out;
      for (const Attr& item : a.list) out.append(attr_to_python(item));
      return out;
    }
  }
  return nb::none();
}

// Every op row: what fd.ops.* is generated from.
nb::list op_table() {
  nb::list rows;
  for (std::string_view name : all_op_names()) {
    const OpRow& row = *find_op(name);
    nb::list attrs;
    for (const AttrSpec& spec : row.attrs)
      attrs.append(nb::make_tuple(nb::str(spec.name.data(), spec.name.size()), attr_type_name(spec.type), spec.required,
                                  spec.default_value ? attr_to_python(*spec.default_value) : nb::none()));
    nb::dict d;
    d["name"] = nb::str(row.name.data(), row.name.size());
    d["op_class"] = op_class_name(row.op_class);
    d["min_inputs"] = row.min_inputs;
    d["max_inputs"] = row.max_inputs;
    d["num_outputs"] = row.num_outputs;
    d["attrs"] = attrs;
    rows.append(d);
  }
  return rows;
}

SourceLoc loc_of(const std::optional<std::string>& file, int line, int col) {
  return SourceLoc{file.value_or(""), file ? line : 0, col};
}

// A Python-facing shape entry: an int, -1 for an unnamed dynamic size, or the symbol's text.
nb::object dim_to_python(const Extent& e) {
  if (auto c = e.constant_value()) return nb::int_(*c);
  if (e.is_dynamic_symbol()) return nb::int_(-1);
  return nb::str(e.str(true).c_str());
}

std::shared_ptr<Definition> finished_definition(std::unique_ptr<Fusion> fusion) {
  auto d = std::make_shared<Definition>(std::move(fusion));
  d->finish();
  return d;
}

}  // namespace
}  // namespace alloy::python

NB_MODULE(_alloy, m) {
  using namespace alloy;
  using namespace alloy::python;

  nb::exception<UserError>(m, "Error", PyExc_ValueError);
  nb::exception<InternalError>(m, "InternalError", PyExc_RuntimeError);

  nb::enum_<DType>(m, "DataType", "Element types, named as PyTorch names them")
      .value("float64", DType::f64)
      .value("float32", DType::f32)
      .value("float16", DType::f16)
      .value("bfloat16", DType::bf16)
      .value("int64", DType::i64)
      .value("int32", DType::i32)
      .value("bool", DType::boolean);
  m.def("dtype_from_name", [](const std::string& name) { return parse_dtype(name); },
        "The dtype a .fusion name (f32, bf16, ...) stands for, or None.");
  m.def("dtype_text_name", [](DType t) { return std::string(dtype_name(t)); }, "The .fusion name of a dtype (f32, bf16, ...).");

  nb::class_<ValueHandle>(m, "Value", "A value of a fusion definition: an input, a literal, or an op's result.")
      .def_prop_ro("name", [](const ValueHandle& h) { return h.value->name; })
      .def_prop_ro("dtype", [](const ValueHandle& h) { return h.value->dtype(); })
      .def_prop_ro("ndim", [](const ValueHandle& h) { return h.value->rank(); })
      .def_prop_ro("is_scalar", [](const ValueHandle& h) { return h.value->is_scalar(); })
      .def_prop_ro("is_input", [](const ValueHandle& h) { return h.value->is_input; })
      .def_prop_ro("shape",
                   [](const ValueHandle& h) {
                     nb::list out;
                     for (const Extent& e : h.value->shape()) out.append(dim_to_python(e));
                     return out;
                   },
                   "The sizes: ints, -1 for an unnamed dynamic size, and symbol names such as 'B'.")
      .def_prop_ro("type", [](const ValueHandle& h) { return h.value->type_str(); }, "As the .fusion text writes it: bf16[B, 768].")
      .def_prop_ro("_definition", [](const ValueHandle& h) { return h.owner; })
      .def("_same", [](const ValueHandle& a, const ValueHandle& b) { return a.value == b.value; })
      .def("__repr__", [](const ValueHandle& h) { return "<alloy.Value " + h.value->name + ": " + h.value->type_str() + ">"; });

  nb::class_<Definition>(m, "_Definition")
      .def(nb::new_([](const std::string& name) {
             if (!is_value_name(name)) user_error_at("FusionDefinition", "'", name, "' cannot name a fusion (expected an identifier)");
             return std::make_shared<Definition>(std::make_unique<Fusion>(name));
           }),
           "name"_a)
      .def_prop_ro("name", [](const Definition& d) { return d.fusion->name(); })
      .def_prop_ro("finished", [](const Definition& d) { return d.finished; })
      .def_prop_ro("failure", [](const Definition& d) { return d.failure; })
      .def_prop_ro("inputs", [](Definition& d) {
        std::vector<ValueHandle> out;
        for (Value* v : d.fusion->inputs()) out.push_back({d.shared_from_this(), v});
        return out;
      })
      .def_prop_ro("outputs", [](Definition& d) {
        std::vector<ValueHandle> out;
        for (Value* v : d.fusion->outputs()) out.push_back({d.shared_from_this(), v});
        return out;
      })
      .def("add_input",
           [](Definition& d, std::optional<std::string> name, DType dtype, std::optional<std::vector<nb::object>> shape,
              std::optional<std::string> file, int line, int col, std::optional<std::vector<int64_t>> mesh, std::optional<int> shard_axis) {
             return d.add_input(name, dtype, shape, loc_of(file, line, col), std::move(mesh), shard_axis);
           },
           "name"_a.none(), "dtype"_a, "shape"_a.none(), "file"_a.none() = nb::none(), "line"_a = 0, "col"_a = 0,
           "mesh"_a.none() = nb::none(), "shard_axis"_a.none() = nb::none())
      .def("add_literal",
           [](Definition& d, nb::handle value, std::optional<DType> dtype, std::optional<std::string> file, int line, int col) {
             return d.add_literal(value, dtype, loc_of(file, line, col));
           },
           "value"_a, "dtype"_a.none() = nb::none(), "file"_a.none() = nb::none(), "line"_a = 0, "col"_a = 0)
      .def("add_op",
           [](Definition& d, const std::string& op, const std::vector<nb::object>& inputs, const nb::dict& attrs,
              std::optional<std::string> file, int line, int col) { return d.add_op(op, inputs, attrs, loc_of(file, line, col)); },
           "op"_a, "inputs"_a, "attrs"_a, "file"_a.none() = nb::none(), "line"_a = 0, "col"_a = 0)
      .def("add_output",
           [](Definition& d, const ValueHandle& value, std::optional<ValueHandle> alias_input, std::optional<std::string> file,
              int line, int col) { d.add_output(value, alias_input, loc_of(file, line, col)); },
           "value"_a, "alias_input"_a.none() = nb::none(), "file"_a.none() = nb::none(), "line"_a = 0, "col"_a = 0)
      .def("finish", &Definition::finish)
      .def("fail", &Definition::fail, "message"_a)
      .def("execute", &Definition::execute, "inputs"_a, "device"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
           "trace"_a.none() = nb::none())
      .def("dump", &Definition::dump, "stage"_a, "inputs"_a.none() = nb::none(), "device"_a.none() = nb::none())
      .def("validate", &Definition::validate, "inputs"_a, "reference"_a.none() = nb::none(), "device"_a.none() = nb::none())
      .def_prop_ro("plans_built", &Definition::plans_built)
      .def("set_options", &Definition::set_options, "options"_a)
      .def_prop_ro("options", &Definition::options)
      .def("shardings", &Definition::shardings)
      .def("join_outside_mesh", &Definition::join_outside_mesh, "trace"_a.none() = nb::none())
      .def("fail_job", &Definition::fail_job, "message"_a)
      .def("text", [](const Definition& d) { return print_fusion(*d.fusion); });

  bind_distributed(m);
  m.def("why_unwritable", &why_unwritable, "path"_a,
        "Why a file a run will write (a trace) cannot be: '' where it can (checked before a run).");
  m.def("set_setting", &settings::set, "name"_a, "value"_a, "Sets one of Alloy's settings (alloy --help lists them).");
  m.def("settings", [] {
    nb::dict out;
    for (const settings::Setting& s : settings::all()) out[s.name] = settings::current(s.name);
    return out;
  });
  m.def("op_table", &op_table, "One dict per op of the .fusion format: name, op_class, min/max_inputs, num_outputs, attrs.");
  m.def("parse",
        [](const std::string& text, std::optional<std::string> name, const std::string& file) {
          return finished_definition(parse_fusion(text, file, name));
        },
        "text"_a, "name"_a.none() = nb::none(), "file"_a = "<string>");
  m.def("load", [](const std::string& path, std::optional<std::string> name) { return finished_definition(parse_fusion_file(path, name)); },
        "path"_a, "name"_a.none() = nb::none());
  m.def("cuda_available", [] { return backend::device_runtime(DeviceKind::cuda).available(); });
  m.def("cuda_unavailable_reason", [] { return backend::device_runtime(DeviceKind::cuda).unavailable_reason(); });
  m.def("device_count", [] { return backend::device_runtime(DeviceKind::cuda).device_count(); });
}
