#include "alloy/common/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "alloy/common/error.h"

namespace alloy {

namespace fs = std::filesystem;

std::string read_regular_file(const std::string& path, size_t max_bytes, std::string_view what) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) user_error(SourceLoc{path}, "cannot open the ", what, ": no such file");
  if (!fs::is_regular_file(status)) user_error(SourceLoc{path}, "cannot read the ", what, ": not a regular file");
  uintmax_t size = fs::file_size(path, ec);
  if (ec) user_error(SourceLoc{path}, "cannot read the ", what, ": ", ec.message());
  if (size > max_bytes)
    user_error(SourceLoc{path}, "the ", what, " is ", size, " bytes; at most ", max_bytes, " bytes are read");
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error(SourceLoc{path}, "cannot open the ", what, ": ", std::strerror(errno));
  std::string bytes(size_t(size), '\0');
  in.read(bytes.data(), std::streamsize(size));
  if (size_t(in.gcount()) != size_t(size)) user_error(SourceLoc{path}, "cannot read the ", what, ": it changed while being read");
  return bytes;
}

void write_file_replacing(const std::string& path, std::string_view bytes) {
  fs::path target(path);
  fs::path temporary = target;
  temporary += ".alloy-tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) user_error(SourceLoc{path}, "cannot open for writing: ", std::strerror(errno));
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      user_error(SourceLoc{path}, "cannot write: ", std::strerror(errno));
    }
  }
  std::error_code ec;
  fs::rename(temporary, target, ec);  // replaces a symlink at `path` itself, never its target
  if (ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    user_error(SourceLoc{path}, "cannot write: ", ec.message());
  }
}

}  // namespace alloy
