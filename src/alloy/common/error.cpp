#include "alloy/common/error.h"

namespace alloy {

std::string SourceLoc::str() const {
  if (!known()) return file;
  return (file.empty() ? std::string("<input>") : file) + ":" + std::to_string(line) + ":" +
         std::to_string(col);
}

}  // namespace alloy
