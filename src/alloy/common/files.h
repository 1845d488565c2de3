// Reading and writing the files a user names: only regular files are read (a device such as
// /dev/zero or a FIFO would be read forever or block), at most `max_bytes`, and writes go to a
// temporary file renamed into place, so an existing symlink is replaced rather than followed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace alloy {

// The whole contents of `path`; a user error (located at the path) when it is missing, not a
// regular file, or larger than `max_bytes` (`what` names the kind of file in the message).
std::string read_regular_file(const std::string& path, size_t max_bytes, std::string_view what);

// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
void write_file_replacing(const std::string& path, std::string_view bytes);

}  // namespace alloy
