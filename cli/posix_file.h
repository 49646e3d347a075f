// Small RAII wrappers over POSIX files for the CLI (descriptors always opened O_CLOEXEC, owned
// by UniqueFd): a whole input file in memory (mmap'ed read-only when it is a regular file, read
// otherwise, e.g. a pipe), and an output file written with full-write loops. Errors are
// absl::Status values whose message names the path and the errno text. Not thread-safe; one
// owner each.
#ifndef TENSORBROKER_CLI_POSIX_FILE_H_
#define TENSORBROKER_CLI_POSIX_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace tensorbroker::cli {

using ::tensorbroker::UniqueFd;

// The whole content of an input file. "-" reads standard input.
class InputFile {
 public:
  static absl::StatusOr<InputFile> Open(const std::string& path);

  InputFile() = default;  // empty
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // Valid while this object lives. For a mapping, data() is page-aligned.
  absl::string_view bytes() const { return {data_, size_}; }

 private:
  void Unmap();

  const char* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // data_ is an mmap of size_ bytes; otherwise it points into buffer_
  std::string buffer_;
};

// An output file opened for writing (created or truncated, mode 0666 & ~umask). "-" writes
// standard output. Unless Commit() is called, a regular file this created is removed again on
// destruction, so a failed write does not leave a half-written file behind.
class OutputFile {
 public:
  static absl::StatusOr<OutputFile> Create(const std::string& path);

  OutputFile(OutputFile&& other) noexcept = default;
  OutputFile& operator=(OutputFile&& other) noexcept = default;
  ~OutputFile();

  absl::Status Write(absl::string_view bytes);
  // Flushes to the kernel and closes; reports errors close() reports.
  absl::Status Commit();

 private:
  OutputFile() = default;

  std::string path_;
  UniqueFd fd_;
  bool is_stdout_ = false;
  bool remove_on_failure_ = false;
};

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_POSIX_FILE_H_
