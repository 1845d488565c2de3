// Reading and writing the files a user names: only regular files are read (a device such as
// /dev/zero or a FIFO would be read forever or block), at most `max_bytes`, and writes go to a
// temporary file renamed into place, so an existing symlink is replaced rather than followed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace alloy {

// A regular file opened for reading: a user error (located at the path, `what` naming the kind
// of file) when it is missing, not a regular file (checked on the open file, which a FIFO does
// not block), or larger than `max_bytes`. Reads past what the file holds are user errors too (it
// changed while being read).
class RegularFile {
 public:
  RegularFile(const std::string& path, size_t max_bytes, std::string_view what);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  size_t size() const { return size_; }
  std::string read_at(size_t offset, size_t count) const;
  void read_into(size_t offset, char* out, size_t count) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  size_t size_ = 0;
};

// The whole contents of `path`; a user error (located at the path) when it is missing, not a
// regular file, or larger than `max_bytes` (`what` names the kind of file in the message).
std::string read_regular_file(const std::string& path, size_t max_bytes, std::string_view what);

// Where Alloy keeps what it measures and compiles (kernels, machine costs): ALLOY_CACHE_DIR, else
// $XDG_CACHE_HOME/alloy, else ~/.cache/alloy; empty when none of those is set.
std::string cache_dir();

// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
void write_file_replacing(const std::string& path, std::string_view bytes);

// Why a file a run will write (a trace, a saved output) cannot be, checked before the run: empty
// where `path` is a writable regular file, or none yet in a writable directory (asked of the file
// system: nothing is created, as every rank of a job may check the same name at once), else the
// reason in words ("it is a directory", "its directory D is missing", ...).
std::string why_unwritable(const std::string& path);

}  // namespace alloy
