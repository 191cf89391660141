// Typed exceptions; the bindings translate each into a Python podlet error class.
#pragma once
#include <stdexcept>
#include <string>
#include <sstream>
#include <vector>

namespace podlet {
struct Error : std::runtime_error { using std::runtime_error::runtime_error; };
struct ShapeError : Error { using Error::Error; };
struct DTypeError : Error { using Error::Error; };
struct ValueError : Error { using Error::Error; };

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o; o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  if (s.size() == 1) o << ",";
  o << ")"; return o.str();
}
// Builds a message from any streamable pieces: fmt("bad axis ", 3, " for rank ", 2).
template <class... A> std::string fmt(const A&... a) { std::ostringstream o; (o << ... << a); return o.str(); }
}  // namespace podlet

namespace podlet {
// Inside a catch block: re-throws the current podlet error with `prefix` prepended,
// keeping its type (so Python still sees ShapeError / DTypeError / ...).
[[noreturn]] inline void rethrow_prefixed(const std::string& prefix) {
  try { throw; }
  catch (const ShapeError& e) { throw ShapeError(prefix + e.what()); }
  catch (const DTypeError& e) { throw DTypeError(prefix + e.what()); }
  catch (const ValueError& e) { throw ValueError(prefix + e.what()); }
  catch (const Error& e) { throw Error(prefix + e.what()); }
}
}  // namespace podlet
