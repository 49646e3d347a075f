#include "tests/integration/squatter.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/socket_path.h"

namespace tensorbroker::testing {
namespace {

void Say(int fd, char c) { (void)!::write(fd, &c, 1); }

absl::Status PipeError() {
  return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
}

// Every connection queued on `listener`, and every byte sent on it (the clients are done).
void Drain(int listener, int* connections, long* bytes) {
  while (true) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    ++*connections;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) *bytes += n;
    ::close(fd);
  }
}

// The child, after fork: async-signal-safe calls only, and never returns.
[[noreturn]] void Squat(const char* directory, mode_t make_directory_mode,
                        const sockaddr_un& stream_address, const sockaddr_un& seqpacket_address,
                        int ready, int stop, int result) {
  auto fail = [ready](char step) {
    Say(ready, step);
    _exit(1);
  };
  if (::setgroups(0, nullptr) != 0 || ::setresgid(kSquatterUid, kSquatterUid, kSquatterUid) != 0 ||
      ::setresuid(kSquatterUid, kSquatterUid, kSquatterUid) != 0) {
    fail('u');
  }
  ::umask(0);
  if (make_directory_mode != 0 && ::mkdir(directory, make_directory_mode) != 0) fail('d');
  const int stream = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int seqpacket = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (::bind(stream, reinterpret_cast<const sockaddr*>(&stream_address), sizeof(stream_address)) !=
          0 ||
      ::bind(seqpacket, reinterpret_cast<const sockaddr*>(&seqpacket_address),
             sizeof(seqpacket_address)) != 0 ||
      ::listen(stream, 64) != 0 || ::listen(seqpacket, 64) != 0) {
    fail('l');
  }
  Say(ready, 'r');
  char ignored;
  ssize_t n;
  while ((n = ::read(stop, &ignored, 1)) != 0 && (n > 0 || errno == EINTR)) {
  }
  Catch caught;
  Drain(stream, &caught.stream_connections, &caught.stream_bytes);
  Drain(seqpacket, &caught.seqpacket_connections, &caught.seqpacket_bytes);
  _exit(::write(result, &caught, sizeof(caught)) == sizeof(caught) ? 0 : 1);
}

}  // namespace

absl::StatusOr<Squatter> Squatter::Start(const std::string& socket_path,
                                         mode_t make_directory_mode) {
  sockaddr_un stream_address{}, seqpacket_address{};
  stream_address.sun_family = seqpacket_address.sun_family = AF_UNIX;
  socket_path.copy(stream_address.sun_path, sizeof(stream_address.sun_path) - 1);
  LocalChannelPath(socket_path)
      .copy(seqpacket_address.sun_path, sizeof(seqpacket_address.sun_path) - 1);
  const std::string directory = std::filesystem::path(socket_path).parent_path().string();
  int ready[2], stop[2], result[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return PipeError();
  UniqueFd ready_read(ready[0]), ready_write(ready[1]);
  if (::pipe2(stop, O_CLOEXEC) != 0) return PipeError();
  UniqueFd stop_read(stop[0]), stop_write(stop[1]);
  if (::pipe2(result, O_CLOEXEC) != 0) return PipeError();
  UniqueFd result_read(result[0]), result_write(result[1]);
  auto child = Subprocess::Fork([&]() -> int {
    ::close(stop[1]);  // the parent's end: its close is the signal to stop
    Squat(directory.c_str(), make_directory_mode, stream_address, seqpacket_address, ready[1],
          stop[0], result[1]);
  });
  if (!child.ok()) return child.status();
  ready_write.reset();  // the child's ends: EOF once it is gone
  stop_read.reset();
  result_write.reset();
  Squatter squatter;
  squatter.process_ = *std::move(child);
  squatter.ready_ = std::move(ready_read);
  squatter.stop_ = std::move(stop_write);
  squatter.result_ = std::move(result_read);
  char said = 0;
  if (::read(squatter.ready_.get(), &said, 1) != 1 || said != 'r') {
    return absl::InternalError(absl::StrCat("the squatter failed at step '", std::string(1, said),
                                            "' (u: setresuid, d: mkdir, l: listen)"));
  }
  return squatter;
}

Squatter::Squatter(Squatter&& other) noexcept
    : process_(std::move(other.process_)),
      ready_(std::move(other.ready_)),
      stop_(std::move(other.stop_)),
      result_(std::move(other.result_)) {}

Squatter::~Squatter() {
  if (process_.pid() > 0) (void)Stop();
}

absl::StatusOr<Catch> Squatter::Stop() {
  stop_.reset();
  Catch caught;
  const ssize_t n = ::read(result_.get(), &caught, sizeof(caught));
  absl::StatusOr<int> status = process_.Wait();
  if (!status.ok()) return status.status();
  if (n != static_cast<ssize_t>(sizeof(caught))) {
    return absl::InternalError(
        absl::StrCat("the squatter said nothing; it ", DescribeWaitStatus(*status)));
  }
  return caught;
}

}  // namespace tensorbroker::testing
