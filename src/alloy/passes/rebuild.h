// Rebuilding a fusion op by op, so a pass can replace some ops with others while every value
// keeps its name and every other op is re-added (and re-checked) unchanged.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>

#include "alloy/ir/fusion.h"

namespace alloy {

struct Rebuilder {
  Fusion& target;
  std::unordered_map<const Value*, Value*> map;  // old value -> new value
  // The fusion rebuilt: a fresh name avoids its names too (a user's value named like a rewrite's
  // helper, `s__max`, defined after the op rewritten, would otherwise find its name taken).
  const Fusion* source = nullptr;

  Value* operator[](const Value* old) const { return map.at(old); }
  // Re-adds `op` with mapped inputs and the same output names.
  void copy(const Op& op);
  Value* literal(double v);
  // A fresh value name derived from an old one, for values a rewrite introduces.
  std::string name_for(const Value* old, const char* suffix) const;
};

// Calls `rewrite(op, rebuilder)` for every op; when it returns false the op is copied as is.
std::unique_ptr<Fusion> rebuild_fusion(const Fusion& fusion, const std::function<bool(const Op&, Rebuilder&)>& rewrite);

}  // namespace alloy
