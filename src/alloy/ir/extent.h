// Symbolic sizes. An Extent is a monomial: a rational coefficient times a product of named
// symbols with integer powers (B, B*S, B*S*768/64, ?3). That is enough for reshape with -1 and
// for sharding (a size divided by the mesh size), and it keeps equality a structural compare.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace alloy {

// Sizes bound at run time, by symbol name.
using Bindings = std::unordered_map<std::string, int64_t>;

class Extent {
 public:
  Extent() = default;  // the constant 1
  static Extent constant(int64_t value);
  static Extent symbol(std::string name);
  // An unnamed dynamic size (`?` in the text format) gets a unique internal name "?N".
  static Extent dynamic(int id);

  bool is_constant() const { return powers_.empty() && den_ == 1; }
  std::optional<int64_t> constant_value() const;
  bool is_one() const { return is_constant() && num_ == 1; }
  // A single symbol to the first power with coefficient 1 (what a parameter declares).
  std::optional<std::string> as_symbol() const;
  bool is_dynamic_symbol() const;  // a `?`

  Extent operator*(const Extent& other) const;
  Extent operator/(const Extent& other) const;
  bool operator==(const Extent& other) const = default;
  bool operator<(const Extent& other) const;  // arbitrary total order, for maps

  // The concrete value; nullopt when a symbol is unbound or the result is not a whole number.
  std::optional<int64_t> evaluate(const Bindings& bindings) const;  // nullopt too when the size passes 2^62

  // "768", "B", "B*S", "B*S/2", "3*?1/2"; a `?` prints as "?" when `dynamic_as_question` is set.
  std::string str(bool dynamic_as_question = false) const;

  const std::map<std::string, int>& powers() const { return powers_; }
  int64_t numerator() const { return num_; }    // the coefficient is numerator() / denominator()
  int64_t denominator() const { return den_; }

 private:
  int64_t num_ = 1;
  int64_t den_ = 1;
  std::map<std::string, int> powers_;
  void normalize();
};

std::ostream& operator<<(std::ostream& os, const Extent& e);

}  // namespace alloy
