// Alloy's two error kinds: a UserError is bad input (always says where, what was expected and
// what was found); an InternalError is a bug in Alloy. Library code throws; only tools/ decide
// how to exit.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace alloy {

// A place in user input: a file position, or a free-form place such as "input 'x', axis 1".
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;

  bool known() const { return line > 0; }
  std::string str() const;  // "file:line:col" or "" when unknown
};

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Another rank of a multi-process job failed before the ranks communicated, so this one stops
// too (that rank reports the reason; a tool reports it once).
class PeerError : public UserError {
 public:
  using UserError::UserError;
};

// A size computed past 2^62 (Extent's arithmetic, which knows no place): the caller that knows
// the op or input the size belongs to reports it there.
class SizeOverflow : public UserError {
 public:
  using UserError::UserError;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

// user_error(loc, "linear: weight is ", t, "; expected 2 dims") -> "file:4:9: linear: weight is ..."
template <class... Parts>
[[noreturn]] void user_error(const SourceLoc& where, const Parts&... parts) {
  std::string place = where.str();
  throw UserError(place.empty() ? detail::concat(parts...) : place + ": " + detail::concat(parts...));
}

// For places that are not file positions ("input 'x'", "--bind B=4").
template <class... Parts>
[[noreturn]] void user_error_at(std::string_view where, const Parts&... parts) {
  throw UserError(std::string(where) + ": " + detail::concat(parts...));
}

template <class... Parts>
[[noreturn]] void internal_error(const Parts&... parts) {
  throw InternalError("internal error (a bug in Alloy): " + detail::concat(parts...));
}

#define ALLOY_CHECK(cond, ...)                                                          \
  do {                                                                                  \
    if (!(cond)) ::alloy::internal_error(__FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__); \
  } while (0)

}  // namespace alloy
