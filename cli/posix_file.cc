#include "cli/posix_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::cli {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  const std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case ENOTDIR:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace

absl::StatusOr<InputFile> InputFile::Open(const std::string& path) {
  UniqueFd owned;
  int fd = STDIN_FILENO;
  if (path != "-") {
    owned.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!owned.valid()) return ErrnoError("cannot open", path, errno);
    fd = owned.get();
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("cannot stat", path, errno);
  if (S_ISDIR(st.st_mode)) return ErrnoError("cannot read", path, EISDIR);

  InputFile file;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    const size_t size = static_cast<size_t>(st.st_size);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      file.data_ = static_cast<const char*>(map);
      file.size_ = size;
      file.mapped_ = true;
      return file;
    }
    // Fall through to read(): some file systems cannot be mapped.
  }
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path, errno);
    }
    if (n == 0) break;
    file.buffer_.append(chunk, static_cast<size_t>(n));
  }
  file.data_ = file.buffer_.data();
  file.size_ = file.buffer_.size();
  return file;
}

InputFile::InputFile(InputFile&& other) noexcept { *this = std::move(other); }

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this == &other) return *this;
  Unmap();
  mapped_ = std::exchange(other.mapped_, false);
  size_ = std::exchange(other.size_, 0);
  if (mapped_) {
    data_ = std::exchange(other.data_, nullptr);
  } else {
    buffer_ = std::move(other.buffer_);
    other.buffer_.clear();
    other.data_ = nullptr;
    data_ = buffer_.data();
  }
  return *this;
}

InputFile::~InputFile() { Unmap(); }

void InputFile::Unmap() {
  if (mapped_) ::munmap(const_cast<char*>(data_), size_);
  mapped_ = false;
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<OutputFile> OutputFile::Create(const std::string& path) {
  OutputFile out;
  out.path_ = path;
  if (path == "-") {
    out.is_stdout_ = true;
    out.fd_.reset(::dup(STDOUT_FILENO));
    if (!out.fd_.valid()) return ErrnoError("cannot write", "<stdout>", errno);
    return out;
  }
  out.fd_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (!out.fd_.valid()) return ErrnoError("cannot create", path, errno);
  struct stat st {};
  out.remove_on_failure_ = ::fstat(out.fd_.get(), &st) == 0 && S_ISREG(st.st_mode);
  return out;
}

OutputFile::~OutputFile() {
  if (fd_.valid() && remove_on_failure_) {
    fd_.reset();
    ::unlink(path_.c_str());
  }
}

absl::Status OutputFile::Write(absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", is_stdout_ ? "<stdout>" : path_, errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  const int fd = fd_.release();
  if (::close(fd) != 0) {
    const int err = errno;
    if (remove_on_failure_) ::unlink(path_.c_str());
    return ErrnoError("cannot write", is_stdout_ ? "<stdout>" : path_, err);
  }
  return absl::OkStatus();
}

}  // namespace tensorbroker::cli
