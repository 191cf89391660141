#include "podlet/env.h"
#include <cctype>
#include <cstdlib>
#include <string>

namespace podlet {

bool env_flag(const char* name, bool unset) {
  const char* e = std::getenv(name);
  if (!e || !*e) return unset;
  std::string v(e);
  for (char& ch : v) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return !(v == "0" || v == "false" || v == "off" || v == "no");
}

}  // namespace podlet
