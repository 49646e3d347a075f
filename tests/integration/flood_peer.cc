// tensorbroker_flood_peer: a hostile local user that asks the daemon for descriptors and does
// not read them (issue 30). Started by flood_test.cc as uid 65534 in the socket's group
// (UidProcess), it opens up to --connections local-channel connections; on each it opens a
// session, takes a lease on --name (a tensor anyone may read), then sends FetchSegment for that
// lease, without reading, until the socket takes no more (the daemon stopped reading: back-
// pressure) or --requests were sent. It reports on stderr, one line each:
//   "connected <N>"        connections that got a session
//   "refused <N>"          connections the daemon closed before they got one
//   "requests <N>"         FetchSegment requests the kernel took, over all connections
//   "flooding"             it now holds everything unread, until SIGUSR1
// On SIGUSR1 it reads every reply it is owed and reports
//   "drained replies=<R> ok=<K> fds=<F> dropped=<D>"   D: connections closed before all came
// then "done", and exits (closing every connection).
//   tensorbroker_flood_peer --socket S --name NAME --connections C --requests R
// With --tensors N instead, on one connection it creates and seals up to N mutable 16-byte
// tensors (each a segment of its own: descriptors the daemon keeps) named flood/t/<i>, and
// reports "created <K>" and, at the first refusal, "refused code=<CODE> <message>", then what
// open_fast_reads answers then: "fast_reads code=<CODE> <message>".
//   tensorbroker_flood_peer --socket S --tensors N
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "tensorbroker/v1/local.pb.h"
#include "tests/integration/stderr_report.h"

namespace {

namespace v1 = tensorbroker::v1;
using tensorbroker::UniqueFd;

volatile sig_atomic_t drain = 0;

constexpr auto& Say = tensorbroker::testing::SayOnStderr;
constexpr auto& Die = tensorbroker::testing::DieOnStderr;

// A blocking call on `fd`: its reply, or nullopt when the daemon closed the connection.
std::optional<v1::LocalReply> Call(int fd, v1::LocalRequest request) {
  request.set_request_id(1);
  if (!tensorbroker::SendMessage(fd, request.SerializeAsString()).ok()) return std::nullopt;
  auto received = tensorbroker::ReceiveMessage(fd, 1 << 16);
  v1::LocalReply reply;
  if (!received.ok() || received->closed || !reply.ParseFromString(received->bytes)) {
    return std::nullopt;
  }
  return reply;
}

// A connection with a session and a lease on `name`; invalid when the daemon refused it.
UniqueFd Connect(const std::string& socket_path, const std::string& name, uint64_t* lease) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = socket_path + ".fd";
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return UniqueFd();
  }
  v1::LocalRequest open;
  open.mutable_open()->mutable_hello()->set_pid(::getpid());
  auto opened = Call(fd.get(), open);
  if (!opened.has_value() || !opened->has_opened()) return UniqueFd();
  v1::LocalRequest get;
  get.mutable_get()->set_name(name);
  auto granted = Call(fd.get(), get);
  if (!granted.has_value() || !granted->has_grant()) Die("no grant on " + name);
  *lease = granted->grant().lease_id();
  return fd;
}

// Sends FetchSegment requests without reading until the socket is full or `most` went.
size_t Flood(int fd, uint64_t lease, size_t most) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  v1::LocalRequest fetch;
  fetch.mutable_fetch_segment()->set_lease_id(lease);
  size_t sent = 0;
  while (sent < most) {
    fetch.set_request_id(2 + sent);
    if (!tensorbroker::SendMessage(fd, fetch.SerializeAsString()).ok()) break;  // full
    ++sent;
  }
  return sent;
}

// Creates and seals mutable tensors until `most` or the first refusal (reported).
void MakeTensors(const std::string& socket_path, size_t most) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  (socket_path + ".fd").copy(address.sun_path, sizeof(address.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    Die("connect");
  }
  v1::LocalRequest open;
  open.mutable_open()->mutable_hello()->set_pid(::getpid());
  if (!Call(fd.get(), open).has_value()) Die("no session");
  size_t created = 0;
  for (; created < most; ++created) {
    const std::string name = absl::StrCat("flood/t/", created);
    v1::LocalRequest create;
    v1::CreateRequest* spec = create.mutable_create();
    spec->set_name(name);
    spec->mutable_dtype()->set_code(1);  // uint8
    spec->mutable_dtype()->set_bits(8);
    spec->mutable_dtype()->set_lanes(1);
    spec->add_shape(16);
    spec->set_mutable_(true);
    auto made = Call(fd.get(), create);  // its descriptor closes at once
    if (!made.has_value()) Die("no reply to a create");
    if (made->code() != 0) {
      Say(absl::StrCat("refused code=", made->code(), " ", made->message()));
      // Short of descriptors: a lease table (two more of the daemon's) is refused too.
      v1::LocalRequest fast;
      fast.mutable_open_fast_reads();
      auto table = Call(fd.get(), fast);
      if (!table.has_value()) Die("no reply to open_fast_reads");
      Say(absl::StrCat("fast_reads code=", table->code(), " ", table->message()));
      break;
    }
    v1::LocalRequest seal;
    seal.mutable_seal()->set_name(name);
    auto sealed = Call(fd.get(), seal);
    if (!sealed.has_value() || sealed->code() != 0) Die("seal " + name);
  }
  Say(absl::StrCat("created ", created));
}

struct Drained {
  size_t replies = 0, ok = 0, fds = 0, dropped = 0;
};

// Reads the `owed` replies of one connection (blocking, bounded by 60 s without a message).
void DrainOne(int fd, size_t owed, Drained* drained) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  for (size_t got = 0; got < owed; ++got) {
    pollfd readable{fd, POLLIN, 0};
    if (::poll(&readable, 1, 60000) != 1) Die("a reply never came");
    auto received = tensorbroker::ReceiveMessage(fd, 1 << 16);
    v1::LocalReply reply;
    if (!received.ok() || received->closed || !reply.ParseFromString(received->bytes)) {
      ++drained->dropped;
      return;
    }
    ++drained->replies;
    if (reply.code() == 0 && reply.descriptors_size() == 1) ++drained->ok;
    drained->fds += received->fds.size();  // closed as `received` goes
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path, name;
  size_t connections = 0, requests = 0, tensors = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") socket_path = argv[i + 1];
    if (flag == "--name") name = argv[i + 1];
    if (flag == "--connections") connections = std::strtoul(argv[i + 1], nullptr, 10);
    if (flag == "--requests") requests = std::strtoul(argv[i + 1], nullptr, 10);
    if (flag == "--tensors") tensors = std::strtoul(argv[i + 1], nullptr, 10);
  }
  Say(absl::StrCat("uid ", ::getuid()));
  if (!socket_path.empty() && tensors > 0) {
    MakeTensors(socket_path, tensors);
    Say("done");
    return 0;
  }
  if (socket_path.empty() || name.empty() || connections == 0 || requests == 0) {
    Die("usage: --socket S --name NAME --connections C --requests R | --socket S --tensors N");
  }
  signal(SIGUSR1, [](int) { drain = 1; });
  std::vector<UniqueFd> open;
  std::vector<size_t> owed;
  size_t refused = 0, sent = 0;
  for (size_t i = 0; i < connections; ++i) {
    uint64_t lease = 0;
    UniqueFd fd = Connect(socket_path, name, &lease);
    if (!fd.valid()) {
      ++refused;
      continue;
    }
    owed.push_back(Flood(fd.get(), lease, requests));
    sent += owed.back();
    open.push_back(std::move(fd));
  }
  Say(absl::StrCat("connected ", open.size()));
  Say(absl::StrCat("refused ", refused));
  Say(absl::StrCat("requests ", sent));
  Say("flooding");
  while (!drain) ::usleep(10000);  // no pause(): a signal before it would be missed
  Drained drained;
  for (size_t i = 0; i < open.size(); ++i) DrainOne(open[i].get(), owed[i], &drained);
  Say(absl::StrCat("drained replies=", drained.replies, " ok=", drained.ok, " fds=", drained.fds,
                   " dropped=", drained.dropped));
  Say("done");
  return 0;
}
