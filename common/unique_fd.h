// Owns one file descriptor and closes it on destruction (or reset). Move-only; one owner, not
// thread-safe itself.
#ifndef TENSORBROKER_COMMON_UNIQUE_FD_H_
#define TENSORBROKER_COMMON_UNIQUE_FD_H_

#include <unistd.h>

namespace tensorbroker {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_UNIQUE_FD_H_
