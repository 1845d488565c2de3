#include "alloy/host_ir/evaluator.h"

#include "alloy/common/error.h"

namespace alloy::host_ir {

const Tensor& RunState::at(const Value* v) const {
  const Tensor& t = values.at(v->id);
  if (!t.defined()) internal_error("value '", v->name, "' is read before it is computed");
  return t;
}

std::vector<int64_t> RunState::concrete_shape(const Value* v) const {
  std::vector<int64_t> sizes;
  sizes.reserve(v->shape().size());
  for (const Extent& e : v->shape()) {
    auto n = e.evaluate(bindings);
    if (!n) user_error_at("value '" + v->name + "'", "size ", e.str(true), " is not a whole number for the bound sizes");
    if (*n < 0) user_error_at("value '" + v->name + "'", "size ", e.str(true), " is negative (", *n, ")");
    sizes.push_back(*n);
  }
  return sizes;
}

void Executable::run(RunState& state) const {
  std::unique_ptr<RunStreams> streams;
  if (program.streams > 1) {
    ALLOY_CHECK(open_streams != nullptr, "a program with side streams without a stream opener");
    streams = open_streams(program, state);
  }
  try {
    for (const Node& node : program.nodes) {
      if (auto* a = std::get_if<Allocate>(&node)) {
        ALLOY_CHECK(allocate != nullptr, "Allocate node without an allocator");
        state.values[a->value->id] = allocate(a->value->dtype(), state.concrete_shape(a->value), state);
      } else if (auto* l = std::get_if<Launch>(&node)) {
        if (l->stream != 0) streams->use(l->stream);
        segments.at(l->segment)->run(state);
        if (l->stream != 0) streams->use(0);
      } else if (auto* r = std::get_if<Record>(&node)) {
        streams->record(r->stream, r->event);
      } else if (auto* w = std::get_if<Wait>(&node)) {
        streams->wait(w->stream, w->event);
      } else if (auto* c = std::get_if<Communicate>(&node)) {
        segments.at(c->segment)->run(state);
      }
    }
  } catch (...) {
    if (streams) {
      streams->use(0);
      streams->join();
    }
    throw;
  }
}

}  // namespace alloy::host_ir
