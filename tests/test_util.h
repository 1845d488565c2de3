// Shared test helpers: source paths, random tensors, and comparison with a reference.
#pragma once

#include <string>

namespace alloy::testing {

std::string source_path(const std::string& relative);  // ALLOY_SOURCE_DIR + "/" + relative
std::string read_file(const std::string& path);

}  // namespace alloy::testing
