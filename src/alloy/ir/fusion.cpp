#include "alloy/ir/fusion.h"

#include <algorithm>
#include <unordered_map>

#include "alloy/ir/op_table.h"
#include "alloy/ir/printer.h"

namespace alloy {

std::string Value::type_str() const {
  std::string out(dtype_name(type.dtype));
  if (type.is_scalar) return out;
  out += "[";
  for (size_t i = 0; i < type.shape.size(); ++i) out += (i ? ", " : "") + type.shape[i].str(true);
  return out + "]";
}

const Attr* Op::attr(std::string_view name) const {
  for (auto& a : attrs)
    if (a.name == name) return &a.value;
  return nullptr;
}

const Attr& Op::required_attr(std::string_view name) const {
  const Attr* a = attr(name);
  if (!a) internal_error("op ", op_name(kind), " has no attribute ", name);
  return *a;
}

int64_t Op::int_attr(std::string_view name) const { return required_attr(name).i; }

double Op::real_attr(std::string_view name) const {
  const Attr& a = required_attr(name);
  return a.kind == Attr::Kind::integer ? double(a.i) : a.f;
}

bool Op::bool_attr(std::string_view name) const { return required_attr(name).b; }

const std::string& Op::string_attr(std::string_view name) const { return required_attr(name).s; }

std::vector<int64_t> Op::ints_attr(std::string_view name) const {
  std::vector<int64_t> out;
  for (auto& a : required_attr(name).list) out.push_back(a.i);
  return out;
}

Value* Fusion::new_value(std::string name, ValueType type) {
  auto v = std::make_unique<Value>();
  v->id = int(values_.size());
  v->name = std::move(name);
  v->type = std::move(type);
  by_name_.try_emplace(v->name, v.get());  // the first value of a name wins, as a scan would find it
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Fusion::find_value(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return nullptr;
  ALLOY_CHECK(it->second->name == name, "value '", it->second->name, "' was renamed without Fusion::rename_value");
  return it->second;
}

void Fusion::rename_value(Value* value, std::string name) {
  ALLOY_CHECK(value != nullptr && value->id < int(values_.size()) && values_[value->id].get() == value,
              "rename_value: not a value of fusion '", name_, "'");
  if (value->name == name) return;
  Value* other = find_value(name);
  ALLOY_CHECK(other == nullptr, "rename_value: '", name, "' is already taken");
  auto it = by_name_.find(value->name);
  if (it != by_name_.end() && it->second == value) by_name_.erase(it);
  value->name = std::move(name);
  by_name_.emplace(value->name, value);
}

std::string Fusion::fresh_name(std::string_view prefix) {
  for (;;) {
    std::string candidate = std::string(prefix) + std::to_string(fresh_counter_++);
    if (!find_value(candidate)) return candidate;
  }
}

std::optional<int64_t> checked_elements(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s == 0) return 0;
  }
  for (int64_t s : sizes) {
    if (s < 0 || __builtin_mul_overflow(n, s, &n) || n > kMaxTensorElements) return std::nullopt;
  }
  return n;
}

namespace {

// What shape inference can already tell of a value's size: the constant axes, and the constant
// factor of each symbolic one (4294967296*B is at least 4294967296). Past kMaxTensorElements it
// is a user error at the value's statement, at check time.
void check_declared_size(const ValueType& type, const std::string& name, const SourceLoc& loc) {
  if (type.is_scalar) return;
  if (type.rank() > kMaxRank) user_error(loc, "'", name, "' has ", type.rank(), " axes; a tensor has at most ", kMaxRank);
  std::vector<int64_t> known;
  std::string product;
  for (const Extent& e : type.shape) {
    int64_t factor = 1;
    if (auto c = e.constant_value()) factor = *c;
    else if (e.denominator() == 1 && e.numerator() > 1) factor = e.numerator();
    if (factor == 0) return;
    if (factor > 1) {
      known.push_back(factor);
      product += (product.empty() ? "" : " * ") + std::to_string(factor);
    }
  }
  if (!checked_elements(known))
    user_error(loc, "'", name, "' would have at least ", product, " elements; a tensor has at most 2^48 (", kMaxTensorElements, ")");
}

}  // namespace

Value* Fusion::add_input(std::string name, ValueType type, std::optional<Sharding> sharding,
                         const SourceLoc& loc) {
  check_declared_size(type, name, loc);
  if (find_value(name)) user_error(loc, "parameter '", name, "' is declared twice");
  Value* v = new_value(std::move(name), std::move(type));
  v->is_input = true;
  if (sharding) v->sharding_source = {ShardingSource::Kind::user, "", loc};
  v->sharding = std::move(sharding);
  inputs_.push_back(v);
  return v;
}

Value* Fusion::add_literal(Literal literal) {
  ValueType type;
  type.is_scalar = true;
  type.dtype = literal.kind == Literal::Kind::real      ? DType::f64
               : literal.kind == Literal::Kind::integer ? DType::i64
                                                        : DType::boolean;
  Value* v = new_value(fresh_name("lit"), type);
  v->literal = literal;
  return v;
}

static void check_attr_type(const AttrSpec& spec, const Attr& value, const SourceLoc& loc,
                            std::string_view op) {
  using K = Attr::Kind;
  auto bad = [&](std::string_view expected) {
    user_error(loc, op, ": attribute '", spec.name, "' must be ", expected, ", found ", value.str());
  };
  auto list_of = [&](bool allow_symbols) {
    if (value.kind != K::list) return false;
    for (auto& item : value.list)
      if (!(item.kind == K::integer || (allow_symbols && item.kind == K::symbol))) return false;
    return true;
  };
  switch (spec.type) {
    case AttrSpec::Type::integer: if (value.kind != K::integer) bad("an integer"); break;
    case AttrSpec::Type::real: if (value.kind != K::real && value.kind != K::integer) bad("a number"); break;
    case AttrSpec::Type::boolean: if (value.kind != K::boolean) bad("true or false"); break;
    case AttrSpec::Type::string: if (value.kind != K::string) bad("a string in double quotes"); break;
    case AttrSpec::Type::dtype: if (value.kind != K::dtype) bad("a dtype (f64 f32 f16 bf16 i64 i32 bool)"); break;
    case AttrSpec::Type::int_list:
    case AttrSpec::Type::optional_int_list:
      if (value.kind == K::integer) break;  // a single int is accepted as a one-element list
      if (!list_of(false)) bad("a list of integers");
      break;
    case AttrSpec::Type::extent_list: if (!list_of(true)) bad("a list of sizes (integers or symbols)"); break;
    case AttrSpec::Type::extent:
      if (value.kind != K::integer && value.kind != K::symbol) bad("a size (an integer or a size symbol such as V)");
      break;
  }
}

namespace {

// PyTorch wraps a 0-dim tensor's dims as for rank 1, so `sum(s, dims=[0])` and `dims=[-1]` name
// the scalar's one "axis" and keep it; the canonical form of that names no axis (dims=[]), which
// every pass and backend already reads as "all the axes there are".
void canonicalize_scalar_dims(OpKind kind, const std::vector<Value*>& inputs, std::vector<NamedAttr>& attrs) {
  bool takes_dims = kind == OpKind::sum || kind == OpKind::max || kind == OpKind::min || kind == OpKind::mean ||
                    kind == OpKind::var_mean || kind == OpKind::squeeze;
  if (!takes_dims || inputs.empty() || !inputs[0] || inputs[0]->is_scalar() || inputs[0]->rank() != 0) return;
  for (NamedAttr& a : attrs)
    if (a.name == "dims" && a.value.kind == Attr::Kind::list && a.value.list.size() == 1 &&
        a.value.list[0].kind == Attr::Kind::integer && (a.value.list[0].i == 0 || a.value.list[0].i == -1))
      a.value = Attr::ints({});
}

}  // namespace

std::vector<Value*> Fusion::add_op(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs,
                                   const SourceLoc& loc, std::vector<std::string> output_names) {
  const OpRow& row = op_row(kind);
  int n = int(inputs.size());
  if (n < row.min_inputs || (row.max_inputs >= 0 && n > row.max_inputs)) {
    std::string expected = row.max_inputs < 0 ? "at least " + std::to_string(row.min_inputs)
                           : row.min_inputs == row.max_inputs
                               ? std::to_string(row.min_inputs)
                               : std::to_string(row.min_inputs) + " to " + std::to_string(row.max_inputs);
    user_error(loc, row.name, ": takes ", expected, " argument", (expected == "1" ? "" : "s"), ", found ", n);
  }
  for (Value* v : inputs) ALLOY_CHECK(v != nullptr, "null input to ", row.name);

  // Attributes: reject unknown and repeated ones, check types, fill defaults in table order.
  for (size_t i = 0; i < attrs.size(); ++i) {
    auto spec = std::find_if(row.attrs.begin(), row.attrs.end(), [&](auto& s) { return s.name == attrs[i].name; });
    if (spec == row.attrs.end()) {
      std::string known;
      for (auto& s : row.attrs) known += (known.empty() ? "" : ", ") + std::string(s.name);
      user_error(loc, row.name, ": unknown attribute '", attrs[i].name, "'",
                 known.empty() ? std::string("; it takes none") : "; expected one of: " + known);
    }
    for (size_t j = 0; j < i; ++j)
      if (attrs[j].name == attrs[i].name) user_error(loc, row.name, ": attribute '", attrs[i].name, "' given twice");
    check_attr_type(*spec, attrs[i].value, loc, row.name);
  }
  std::vector<NamedAttr> canonical;
  for (auto& spec : row.attrs) {
    auto given = std::find_if(attrs.begin(), attrs.end(), [&](auto& a) { return a.name == spec.name; });
    if (given != attrs.end()) {
      Attr value = given->value;
      bool list_type = spec.type == AttrSpec::Type::int_list || spec.type == AttrSpec::Type::optional_int_list;
      if (list_type && value.kind == Attr::Kind::integer) value = Attr::ints({value.i});
      if (spec.type == AttrSpec::Type::real && value.kind == Attr::Kind::integer) value = Attr::real(double(value.i));
      canonical.push_back({std::string(spec.name), value});
    } else if (spec.required) {
      user_error(loc, row.name, ": missing attribute '", spec.name, "'");
    } else if (spec.default_value) {
      canonical.push_back({std::string(spec.name), *spec.default_value});
    }
  }

  canonicalize_scalar_dims(kind, inputs, canonical);
  InferContext ctx{kind, inputs, canonical, loc, *this};
  std::vector<ValueType> types;
  try {
    types = row.infer(ctx);
  } catch (const SizeOverflow& e) {
    ctx.fail(e.what());  // at the op's place
  }
  ALLOY_CHECK(int(types.size()) == row.num_outputs, row.name, " inferred ", types.size(), " outputs");
  if (!output_names.empty() && int(output_names.size()) != row.num_outputs)
    user_error(loc, row.name, ": returns ", row.num_outputs, " value", row.num_outputs == 1 ? "" : "s",
               ", but ", output_names.size(), " name", output_names.size() == 1 ? " is" : "s are", " assigned");

  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->inputs = std::move(inputs);
  op->attrs = std::move(canonical);
  op->loc = loc;
  for (int i = 0; i < row.num_outputs; ++i) {
    std::string name = output_names.empty() ? fresh_name() : output_names[i];
    if (find_value(name)) user_error(loc, "'", name, "' is already defined");
    check_declared_size(types[i], name, loc);
    Value* out = new_value(name, types[i]);
    out->producer = op.get();
    op->outputs.push_back(out);
  }
  ops_.push_back(std::move(op));
  return ops_.back()->outputs;
}

std::vector<Value*> Fusion::add_op_typed(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs,
                                         std::vector<ValueType> types, std::vector<std::string> output_names,
                                         const SourceLoc& loc) {
  ALLOY_CHECK(types.size() == output_names.size(), op_name(kind), ": ", types.size(), " types for ", output_names.size(), " names");
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->inputs = std::move(inputs);
  op->attrs = std::move(attrs);
  op->loc = loc;
  for (size_t i = 0; i < types.size(); ++i) {
    ALLOY_CHECK(!find_value(output_names[i]), "'", output_names[i], "' is already defined");
    Value* out = new_value(output_names[i], std::move(types[i]));
    out->producer = op.get();
    op->outputs.push_back(out);
  }
  ops_.push_back(std::move(op));
  return ops_.back()->outputs;
}

Value* Fusion::add_op1(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs,
                       const SourceLoc& loc, std::string output_name) {
  std::vector<std::string> names;
  if (!output_name.empty()) names.push_back(std::move(output_name));
  auto outs = add_op(kind, std::move(inputs), std::move(attrs), loc, std::move(names));
  ALLOY_CHECK(outs.size() == 1, op_name(kind), " returns ", outs.size(), " values");
  return outs[0];
}

void Fusion::add_output(Value* value, const SourceLoc& loc, Value* alias_input) {
  ALLOY_CHECK(value != nullptr, "null output");
  if (value->literal) user_error(loc, "return: a literal cannot be an output; return a computed value");
  if (alias_input) {
    std::string what = "return " + value->name + " -> " + alias_input->name;
    if (!alias_input->is_input || alias_input->is_scalar())
      user_error(loc, what, ": '", alias_input->name, "' is not a tensor input; only a tensor input can be updated in place");
    for (Value* taken : output_aliases_)
      if (taken == alias_input) user_error(loc, what, ": input '", alias_input->name, "' is already updated by another output");
    if (value->dtype() != alias_input->dtype() || value->rank() != alias_input->rank())
      user_error(loc, what, ": the output is ", value->type_str(), " but the input is ", alias_input->type_str(),
                 "; expected the same dtype and shape");
    for (int axis = 0; axis < value->rank(); ++axis) {
      const Extent &out = value->shape()[size_t(axis)], &in = alias_input->shape()[size_t(axis)];
      if (out == in) continue;
      if (out.is_constant() && in.is_constant())
        user_error(loc, what, ": the output is ", value->type_str(), " but the input is ", alias_input->type_str(),
                   "; expected the same dtype and shape");
      add_constraint({out, in, what + ": axis " + std::to_string(axis)});
    }
  }
  outputs_.push_back(value);
  output_aliases_.push_back(alias_input);
  output_locs_.push_back(loc);
}

void Fusion::take_output_aliases_from(const Fusion& declared) {
  ALLOY_CHECK(declared.inputs().size() == inputs_.size() && declared.outputs().size() == outputs_.size(),
              "in-place outputs taken from a fusion of other inputs or outputs");
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Value* alias = declared.output_aliases()[i];
    if (!alias) {
      output_aliases_[i] = nullptr;
      continue;
    }
    size_t input = size_t(std::find(declared.inputs().begin(), declared.inputs().end(), alias) - declared.inputs().begin());
    ALLOY_CHECK(input < inputs_.size(), "in-place target '", alias->name, "' is not an input");
    output_aliases_[i] = inputs_[input];
  }
}

std::unique_ptr<Fusion> Fusion::clone() const {
  auto copy = std::make_unique<Fusion>(name_);
  std::unordered_map<const Value*, Value*> map;
  for (auto& v : values_) {
    Value* nv = copy->new_value(v->name, v->type);
    nv->literal = v->literal;
    nv->take_annotations_from(*v);
    nv->is_input = v->is_input;
    map[v.get()] = nv;
  }
  for (auto& op : ops_) {
    auto nop = std::make_unique<Op>(*op);
    for (auto& in : nop->inputs) in = map.at(in);
    for (auto& out : nop->outputs) {
      out = map.at(out);
      out->producer = nop.get();
    }
    copy->ops_.push_back(std::move(nop));
  }
  for (Value* in : inputs_) copy->inputs_.push_back(map.at(in));
  for (Value* out : outputs_) copy->outputs_.push_back(map.at(out));
  for (Value* alias : output_aliases_) copy->output_aliases_.push_back(alias ? map.at(alias) : nullptr);
  copy->output_locs_ = output_locs_;
  copy->constraints_ = constraints_;
  copy->derived_ = derived_;
  copy->dynamic_ids_ = dynamic_ids_;
  copy->fresh_counter_ = fresh_counter_;
  return copy;
}

Extent Fusion::define_sum(std::vector<Extent> terms) {
  std::string name = "?sum" + std::to_string(derived_.size());
  derived_.push_back({name, std::move(terms), 1, std::nullopt});
  return Extent::symbol(name);
}

Extent Fusion::define_ceil_div(const Extent& size, int64_t divisor) {
  std::string name = "?words" + std::to_string(derived_.size());
  derived_.push_back({name, {size}, divisor, std::nullopt});
  return Extent::symbol(name);
}

Extent Fusion::define_slice(const Extent& size, int64_t start, int64_t end, int64_t step) {
  std::string name = "?slice" + std::to_string(derived_.size());
  derived_.push_back({name, {size}, 1, DerivedSymbol::Slice{start, end, step}});
  return Extent::symbol(name);
}

void Fusion::complete_bindings(Bindings& bindings) const {
  for (const DerivedSymbol& d : derived_) {
    if (d.slice) {
      auto n = d.terms.at(0).evaluate(bindings);
      if (!n) internal_error("derived size ", d.name, " has an unbound term ", d.terms[0].str());
      bindings[d.name] = slice_length(*n, d.slice->start, d.slice->end, d.slice->step);
      continue;
    }
    int64_t total = 0;
    for (const Extent& t : d.terms) {
      auto v = t.evaluate(bindings);
      if (!v) internal_error("derived size ", d.name, " has an unbound term ", t.str());
      total += *v;
    }
    bindings[d.name] = (total + d.ceil_divisor - 1) / d.ceil_divisor;
  }
  for (const Constraint& c : constraints_) {
    auto a = c.a.evaluate(bindings), b = c.b.evaluate(bindings);
    if (!a || !b) {
      const Extent& bad = a ? c.b : c.a;
      user_error_at(c.what, "size ", bad.str(true), " is not a whole number for the bound sizes");
    }
    if (*a != *b) {
      auto said = [](const Extent& e, int64_t n) { return e.is_constant() ? std::to_string(n) : e.str(true) + " = " + std::to_string(n); };
      user_error_at(c.what, "sizes must match at run time: ", said(c.a, *a), " but ", said(c.b, *b));
    }
  }
}

std::vector<std::string> Fusion::input_symbols() const {
  std::vector<std::string> out;
  for (Value* in : inputs_)
    for (const Extent& e : in->shape())
      for (auto& [name, power] : e.powers())
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

double literal_half_exponent(const Op& pow) {
  if (pow.kind != OpKind::pow) return 0;
  const Value* e = pow.inputs[1];
  if (!e->literal || e->literal->kind != Literal::Kind::real || !is_floating(pow.outputs[0]->dtype()) ||
      pow.inputs[0]->dtype() != pow.outputs[0]->dtype())
    return 0;
  return e->literal->f == 0.5 || e->literal->f == -0.5 ? e->literal->f : 0;
}

std::optional<std::vector<int64_t>> fusion_mesh(const Fusion& fusion) {
  const Value* first = nullptr;
  for (auto& v : fusion.values()) {
    if (!v->sharding || v->sharding_source.kind != ShardingSource::Kind::user) continue;
    if (!first) {
      first = v.get();
      continue;
    }
    if (v->sharding->mesh != first->sharding->mesh)
      user_error(v->sharding_source.loc, "'", v->name, "' is on ", mesh_str(v->sharding->mesh), " but '", first->name,
                 "' is on ", mesh_str(first->sharding->mesh),
                 "; one fusion uses one mesh (meshes that differ are not supported yet)");
  }
  if (!first) return std::nullopt;
  return first->sharding->mesh;
}

}  // namespace alloy
