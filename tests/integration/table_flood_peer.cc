// tensorbroker_table_flood_peer: a hostile local user that multiplies lease tables (issue 44).
// Started by table_flood_test.cc as uid 65534 in the socket's group (UidProcess), it opens
// --sessions gRPC Session streams, at most 200 on each of its own connections (so that no
// connection limit stops it), and for each session a local-channel connection that attaches
// to it and asks for reads without a round trip (open_fast_reads: a directory and a lease table
// the daemon keeps as long as the session); it closes that connection and the descriptors it
// got at once, keeping only the sessions. Then it holds them; from SIGUSR2 on, with --stat
// NAME, it calls Stat NAME in a loop (each Stat counts table leases), until SIGUSR1 or its end.
// It reports on stderr, one line each:
//   "uid <U>"               who it runs as
//   "sessions <N>"          Session streams it opened
//   "tables <N>"            open_fast_reads answered OK
//   "refused <N>"           ... answered RESOURCE_EXHAUSTED, and the first such message in
//   "first_refusal <MSG>"
//   "holding"               it holds every session now (SIGUSR2: Stat from now on)
//   "stats <N>"             on SIGUSR1: the Stat calls it made, then "done"
//   tensorbroker_table_flood_peer --socket S --sessions N [--stat NAME]
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tensorbroker/v1/local.pb.h"
#include "tests/integration/stderr_report.h"

namespace {

namespace v1 = tensorbroker::v1;
using tensorbroker::UniqueFd;

constexpr int kSessionsPerConnection = 200;  // under the daemon's streams per connection

volatile sig_atomic_t stop = 0;
volatile sig_atomic_t spam = 0;

constexpr auto& Say = tensorbroker::testing::SayOnStderr;
constexpr auto& Die = tensorbroker::testing::DieOnStderr;

struct HeldSession {
  std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream;
  std::string id;
};

// A channel of its own (its own connection): channels with other arguments share none.
std::unique_ptr<v1::Broker::Stub> NewStub(const std::string& socket, int which) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("tensorbroker.test.connection", which);
  return v1::Broker::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args));
}

std::optional<HeldSession> OpenSession(v1::Broker::Stub& stub) {
  HeldSession held;
  held.stream = stub.Session(held.context.get());
  v1::SessionRequest hello;
  hello.mutable_hello()->set_pid(::getpid());
  hello.mutable_hello()->set_client_name("table-flood");
  v1::SessionEvent event;
  if (!held.stream->Write(hello) || !held.stream->Read(&event) || !event.has_opened()) {
    return std::nullopt;
  }
  held.id = event.opened().session_id();
  return held;
}

// A blocking local-channel call: its reply, or nullopt when the daemon closed the connection.
std::optional<v1::LocalReply> Call(int fd, v1::LocalRequest request) {
  request.set_request_id(1);
  if (!tensorbroker::SendMessage(fd, request.SerializeAsString()).ok()) return std::nullopt;
  auto received = tensorbroker::ReceiveMessage(fd, 1 << 16);  // its descriptors close with it
  v1::LocalReply reply;
  if (!received.ok() || received->closed || !reply.ParseFromString(received->bytes)) {
    return std::nullopt;
  }
  return reply;
}

// Attaches a local connection to `session` and asks for its lease table: the reply.
std::optional<v1::LocalReply> AskForTable(const std::string& socket, const std::string& session) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  (socket + ".fd").copy(address.sun_path, sizeof(address.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return std::nullopt;
  }
  v1::LocalRequest attach;
  attach.mutable_attach()->set_session_id(session);
  auto attached = Call(fd.get(), attach);
  if (!attached.has_value() || attached->code() != 0) return attached;
  v1::LocalRequest fast;
  fast.mutable_open_fast_reads();
  return Call(fd.get(), fast);
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket, stat_name;
  size_t sessions = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") socket = argv[i + 1];
    if (flag == "--sessions") sessions = std::strtoul(argv[i + 1], nullptr, 10);
    if (flag == "--stat") stat_name = argv[i + 1];
  }
  if (socket.empty() || sessions == 0) Die("usage: --socket S --sessions N [--stat NAME]");
  signal(SIGUSR1, [](int) { stop = 1; });
  signal(SIGUSR2, [](int) { spam = 1; });
  Say(absl::StrCat("uid ", ::getuid()));
  std::vector<std::unique_ptr<v1::Broker::Stub>> stubs;
  std::vector<HeldSession> held;
  size_t tables = 0, refused = 0;
  std::string first_refusal;
  for (size_t i = 0; i < sessions; ++i) {
    if (i % kSessionsPerConnection == 0) stubs.push_back(NewStub(socket, static_cast<int>(i)));
    std::optional<HeldSession> session = OpenSession(*stubs.back());
    if (!session.has_value()) Die(absl::StrCat("session ", i, " did not open"));
    std::optional<v1::LocalReply> reply = AskForTable(socket, session->id);
    if (!reply.has_value()) Die(absl::StrCat("no reply to open_fast_reads ", i));
    if (reply->code() == 0) {
      ++tables;
    } else if (reply->code() == 8) {  // RESOURCE_EXHAUSTED
      if (refused++ == 0) first_refusal = reply->message();
    } else {
      Die(absl::StrCat("open_fast_reads ", i, ": code ", reply->code(), " ", reply->message()));
    }
    held.push_back(*std::move(session));
  }
  Say(absl::StrCat("sessions ", held.size()));
  Say(absl::StrCat("tables ", tables));
  Say(absl::StrCat("refused ", refused));
  Say(absl::StrCat("first_refusal ", first_refusal));
  Say("holding");
  size_t stats = 0;
  while (!stop) {
    if (stat_name.empty() || !spam) {
      ::pause();
      continue;
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::StatRequest request;
    request.set_name(stat_name);
    v1::TensorInfo info;
    if (stubs.front()->Stat(&context, request, &info).ok()) ++stats;
  }
  Say(absl::StrCat("stats ", stats));
  for (HeldSession& session : held) {
    session.context->TryCancel();
    (void)session.stream->Finish();
  }
  Say("done");
  return 0;
}
