#include "tests/support/service_manager_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace tensorbroker::testing {
namespace {

constexpr size_t kMaxMessage = 4096;
constexpr size_t kMaxFdsPerMessage = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<ServiceManagerHarness>> ServiceManagerHarness::Create(
    const std::string& directory) {
  // systemd keeps up to FileDescriptorStoreMax= descriptors per unit: as many as this process
  // may open (a message whose descriptors do not fit is truncated, and they are lost).
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
  }
  const std::string path = directory + "/notify";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("path too long: ", path));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket.valid() ||
      ::bind(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::InternalError(absl::StrCat("notify socket ", path, ": ", std::strerror(errno)));
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  return std::unique_ptr<ServiceManagerHarness>(
      new ServiceManagerHarness(path, std::move(socket), std::move(wake)));
}

absl::StatusOr<std::unique_ptr<ServiceManagerHarness>>
ServiceManagerHarness::CreateInTemporaryDirectory() {
  char pattern[] = "/tmp/tbservice.XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  auto harness = Create(pattern);
  if (!harness.ok()) {
    std::filesystem::remove_all(pattern);
    return harness.status();
  }
  (*harness)->owns_directory_ = true;
  return harness;
}

ServiceManagerHarness::ServiceManagerHarness(std::string path, UniqueFd socket, UniqueFd wake)
    : path_(std::move(path)), socket_(std::move(socket)), wake_(std::move(wake)) {
  reader_ = std::thread([this] { ReadLoop(); });
}

ServiceManagerHarness::~ServiceManagerHarness() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  reader_.join();
  if (owns_directory_) {
    std::error_code ignored;
    std::filesystem::remove_all(directory(), ignored);
  }
}

void ServiceManagerHarness::ReadLoop() {
  while (true) {
    pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    std::lock_guard<std::recursive_mutex> lock(mu_);
    while (ReadOneLocked()) {
    }
  }
}

bool ServiceManagerHarness::ReadOneLocked() {
  char text[kMaxMessage + 1];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  iovec iov{text, kMaxMessage};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(socket_.get(), &message, MSG_CMSG_CLOEXEC);
  if (n < 0) return false;
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  const std::string body(text, static_cast<size_t>(n));
  messages_.push_back(body);
  // Descriptors the kernel could not hand over (this process's limit): lost, as systemd logs.
  if ((message.msg_flags & MSG_CTRUNC) != 0) messages_.push_back("MSG_CTRUNC: descriptors lost");
  std::map<std::string, std::string> fields;
  for (absl::string_view line : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) continue;
    fields[std::string(line.substr(0, equals))] = std::string(line.substr(equals + 1));
  }
  // As systemd does: descriptors without FDSTORE=1 are closed; FDNAME defaults to "stored".
  const std::string name = fields.count("FDNAME") ? fields["FDNAME"] : "stored";
  if (fields["FDSTORE"] == "1") {
    for (UniqueFd& fd : fds) stored_.emplace(name, std::move(fd));
  }
  if (fields["FDSTOREREMOVE"] == "1") stored_.erase(name);
  if (fields["READY"] == "1") ready_ = true;
  return true;
}

void ServiceManagerHarness::Drain() {
  // The reader takes the lock for each batch; once it is ours and nothing is waiting, every
  // message sent before this call has been read.
  while (true) {
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      pollfd p{socket_.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) == 0) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool ServiceManagerHarness::WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    Drain();
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (done()) return true;
    }
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::Status ServiceManagerHarness::Listen(const std::string& path, int type) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return absl::InvalidArgumentError(path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd socket(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!socket.valid() ||
      ::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::chmod(path.c_str(), 0660) != 0 || ::listen(socket.get(), SOMAXCONN) != 0) {
    return absl::InternalError(absl::StrCat("listen on ", path, ": ", std::strerror(errno)));
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  sockets_.push_back(std::move(socket));
  return absl::OkStatus();
}

void ServiceManagerHarness::Keep(const std::string& name, UniqueFd fd) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  stored_.emplace(name, std::move(fd));
}

bool ServiceManagerHarness::ready() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return ready_;
}

std::vector<std::string> ServiceManagerHarness::messages() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return messages_;
}

std::vector<std::string> ServiceManagerHarness::StoredNames() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, fd] : stored_) names.push_back(name);
  return names;
}

std::vector<int> ServiceManagerHarness::StoredFds(const std::string& name) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::vector<int> fds;
  auto [first, last] = stored_.equal_range(name);
  for (auto it = first; it != last; ++it) fds.push_back(it->second.get());
  return fds;
}

absl::StatusOr<pid_t> ServiceManagerHarness::Start(
    const std::vector<std::string>& argv, const std::vector<std::pair<std::string, int>>& sockets,
    int stderr_fd) {
  std::lock_guard<std::recursive_mutex> lock(mu_);  // no descriptor goes while we fork
  std::vector<std::pair<std::string, int>> passed;
  for (const UniqueFd& socket : sockets_) passed.emplace_back("tensorbroker", socket.get());
  passed.insert(passed.end(), sockets.begin(), sockets.end());
  for (const auto& [name, fd] : stored_) passed.emplace_back(name, fd.get());
  std::vector<std::string> names;
  for (const auto& [name, fd] : passed) names.push_back(name);

  // Everything the child needs, made before fork(): LISTEN_PID's digits are written after it.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    if (absl::StartsWith(entry, "NOTIFY_SOCKET=") || absl::StartsWith(entry, "LISTEN_")) continue;
    env.emplace_back(entry);
  }
  env.push_back("NOTIFY_SOCKET=" + path_);
  char* listen_pid = nullptr;
  if (!passed.empty()) {  // as systemd: no variables when there is nothing to pass
    env.push_back(absl::StrCat("LISTEN_FDS=", passed.size()));
    env.push_back("LISTEN_FDNAMES=" + absl::StrJoin(names, ":"));
    env.push_back("LISTEN_PID=0000000000");  // filled in by the child
  }
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  if (!passed.empty()) listen_pid = env.back().data() + std::strlen("LISTEN_PID=");
  std::vector<std::string> args = argv;
  std::vector<char*> argvp;
  for (std::string& a : args) argvp.push_back(a.data());
  argvp.push_back(nullptr);
  std::vector<int> sources;
  for (const auto& [name, fd] : passed) sources.push_back(fd);

  ready_ = false;
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // As DaemonProcess does: a test process that dies takes its daemon with it.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0) ::_exit(126);
    // Move every source above the target range first, so no dup2 overwrites a later source.
    const int base = 3 + static_cast<int>(sources.size()) + 64;
    for (size_t i = 0; i < sources.size(); ++i) {
      sources[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, base);
      if (sources[i] < 0) ::_exit(126);
    }
    for (size_t i = 0; i < sources.size(); ++i) {
      if (::dup2(sources[i], 3 + static_cast<int>(i)) < 0) ::_exit(126);  // dup2 clears CLOEXEC
    }
    // Right-aligned digits, then shifted left over the leading padding.
    if (listen_pid != nullptr) {
      char digits[16];
      int n = 0;
      for (pid_t self = ::getpid(); self > 0; self /= 10) {
        digits[n++] = static_cast<char>('0' + self % 10);
      }
      for (int i = 0; i < n; ++i) listen_pid[i] = digits[n - 1 - i];
      listen_pid[n] = '\0';
    }
    ::execve(argvp[0], argvp.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace tensorbroker::testing
