#include "test_util.h"

#include <fstream>
#include <sstream>

namespace alloy::testing {

std::string source_path(const std::string& relative) { return std::string(ALLOY_SOURCE_DIR) + "/" + relative; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace alloy::testing
