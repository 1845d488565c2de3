#include "alloy/common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy {

namespace fs = std::filesystem;

RegularFile::RegularFile(const std::string& path, size_t max_bytes, std::string_view what) : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any non-file
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0)
    user_error(SourceLoc{path}, "cannot open the ", what, ": ", errno == ENOENT ? "no such file" : std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    user_error(SourceLoc{path}, "cannot read the ", what, ": not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    user_error(SourceLoc{path}, "the ", what, " is ", size_, " bytes; at most ", max_bytes, " bytes are read");
  }
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_at(size_t offset, size_t count) const {
  std::string bytes(count, '\0');
  read_into(offset, bytes.data(), count);
  return bytes;
}

void RegularFile::read_into(size_t offset, char* out, size_t count) const {
  while (count > 0) {
    ssize_t got = ::pread(fd_, out, std::min<size_t>(count, size_t(1) << 30), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) user_error(SourceLoc{path_}, "cannot read the ", what_, ": ", std::strerror(errno));
    if (got == 0) user_error(SourceLoc{path_}, "cannot read the ", what_, ": it changed while being read");
    out += got;
    offset += size_t(got);
    count -= size_t(got);
  }
}

std::string read_regular_file(const std::string& path, size_t max_bytes, std::string_view what) {
  RegularFile file(path, max_bytes, what);
  return file.read_at(0, file.size());
}

void write_file_replacing(const std::string& path, std::string_view bytes) {
  fs::path target(path);
  // A fresh temporary beside the target: O_EXCL | O_NOFOLLOW never opens an existing file or a
  // link planted under its name; a name taken is tried again with the next number.
  static std::atomic<unsigned> serial{0};
  fs::path temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    temporary = target;
    temporary += ".alloy-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) user_error(SourceLoc{path}, "cannot open for writing: ", std::strerror(errno));
  const char* data = bytes.data();
  size_t left = bytes.size();
  int error = 0;
  while (left > 0) {
    ssize_t put = ::write(fd, data, std::min<size_t>(left, size_t(1) << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      error = put < 0 ? errno : EIO;
      break;
    }
    data += put;
    left -= size_t(put);
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  std::error_code ec;
  if (error == 0) fs::rename(temporary, target, ec);  // replaces a symlink at `path` itself, never its target
  if (error != 0 || ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    user_error(SourceLoc{path}, "cannot write: ", error != 0 ? std::strerror(error) : ec.message());
  }
}

std::string why_unwritable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  if (existed && fs::is_directory(path, ec)) return "it is a directory";
  if (existed && !fs::is_regular_file(path, ec)) return "it is not a regular file";
  fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!existed && !fs::is_directory(parent, ec)) return "its directory " + parent.string() + " is missing";
  // asked of the file system, nothing created: every rank of a job checks the same names at once
  // (a probe file made and removed by one rank was "not a regular file" to another)
  if (existed) return ::access(path.c_str(), W_OK) == 0 ? "" : "it cannot be opened for writing";
  return ::access(parent.c_str(), W_OK | X_OK) == 0 ? "" : "its directory " + parent.string() + " is not writable";
}

std::string cache_dir() {
  if (std::string dir = settings::text("ALLOY_CACHE_DIR"); !dir.empty()) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/alloy";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/alloy";
  return "";
}

}  // namespace alloy
