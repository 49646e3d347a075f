// Feeds: datagrams of the local channel to a LocalConnection
// (daemon/frontend/local/local_connection.h) over a real SOCK_SEQPACKET socketpair, against a real
// TensorStore on a real CpuSegmentPool and an AccessPolicy with prefix rules and quotas, built as
// the daemon builds them. The input is a flags byte (bit 0: the peer is uid 1000 rather than the
// kernel's word), then frames (fuzz_support.h), each a flags byte (bit 0: a descriptor rides along,
// which the daemon must refuse) and the datagram's bytes. Each datagram is sent on the client's end
// and read by LocalConnection::ReadRequest, as the server's loop does on EPOLLIN; between datagrams
// the store's answers to waiting Gets and its segment events are handed to the connection as the
// loop hands them (FinishWait, SegmentRemoved); after the last, every wait times out.
// Asserts of every reply: it parses as a LocalReply; a gRPC code, with a message when not OK;
// as many descriptors arrived as it lists, each as large as it says and writable only when it
// says so; a grant lies inside its segment, 256-byte aligned, with a layout that checks out;
// and, while the connection stands, each request that asked for a reply (a request_id) got
// exactly one, except a Watch's id, which takes any number (registered, events, the end; and the
// replies to later requests that reuse its id, which the daemon answers with the id they gave).
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/fd_passing.h"
#include "common/tensor_layout.h"
#include "common/wire/proto_convert.h"
#include "daemon/frontend/local/local_connection.h"
#include "daemon/identity/peer_registry.h"
#include "daemon/memory/cpu_segment_pool.h"
#include "daemon/metrics/call_metrics.h"
#include "daemon/store/access_policy.h"
#include "daemon/store/tensor_store.h"
#include "tensorbroker/v1/local.pb.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/quiet_daemon_logs.h"

namespace tensorbroker::daemon {
namespace {

const AccessPolicy& Policy() {
  static const AccessPolicy* policy = [] {
    AccessConfig config;
    config.prefix_rules["locked/"].publishers = *PrincipalSet::ParseList("uid:0", "fuzz");
    config.prefix_rules["team/"].readers = *PrincipalSet::ParseList("uid:1000,gid:27", "fuzz");
    config.default_quota.tensors = 32;
    config.quota_bytes_by_uid[1000] = 256 << 10;
    return new AccessPolicy(config);
  }();
  return *policy;
}

// What LocalChannelServer does for its connections, on this one thread: the store's callbacks
// (wait answers, segment events) are queued, and Deliver hands them over between datagrams.
class Host final : public LocalConnectionHost, public SessionEventSink {
 public:
  explicit Host(TensorStore* store) : store_(store) {}

  std::string OpenOwnedSession(uint64_t, int32_t pid, const std::string& client_name,
                               const Principal& principal) override {
    session_id_ = store_->OpenSession(principal, pid, client_name, this);
    return session_id_;
  }
  std::optional<absl::StatusOr<TensorGrant>> StartWait(uint64_t, const std::string& session_id,
                                                       const std::string& name,
                                                       const VersionWanted& wanted,
                                                       absl::Time deadline,
                                                       uint64_t* waiter_id) override {
    auto cell = std::make_shared<uint64_t>(0);
    auto now = store_->GetOrWait(session_id, name, wanted, deadline, cell.get(),
                                 [this, cell](absl::StatusOr<TensorGrant> result) {
                                   answers_.emplace_back(*cell, std::move(result));
                                 });
    *waiter_id = *cell;
    return now;
  }
  void WaitEnded(uint64_t, uint64_t, absl::Time) override {}  // no deadlines kept here
  std::function<void()> WatchWaker(uint64_t) override {
    return [] {};
  }                                             // pumped by each input
  void AnswerOthersFirst(uint64_t) override {}  // one connection: nobody else to answer
  // A server without handover hooks.
  absl::StatusOr<std::vector<NamedFd>> PrepareHandover(const PeerCredentials&) override {
    return absl::UnimplementedError("takeover: not offered here");
  }
  void HandoverSent(const absl::Status&) override {}
  void ReclaimDescriptors(uid_t) override {}  // one connection: it reclaims its own
  void OnSegmentRemoved(const std::string& segment) override { removed_.push_back(segment); }

  // Hands what the store queued to `connection`; false when it must be dropped.
  bool Deliver(LocalConnection* connection) {
    while (!answers_.empty() || !removed_.empty()) {
      if (!answers_.empty()) {
        auto [waiter_id, result] = std::move(answers_.front());
        answers_.pop_front();
        if (!connection->FinishWait(waiter_id, std::move(result))) return false;
      } else {
        const std::string segment = std::move(removed_.front());
        removed_.pop_front();
        if (!connection->SegmentRemoved(segment)) return false;
      }
    }
    return connection->PumpWatches();  // what the loop does when a watch wakes
  }
  // After the connection went: answers that raced with it give their leases back.
  void ReleaseLeftovers() {
    for (auto& [waiter_id, result] : answers_) {
      if (result.ok()) (void)store_->Release(session_id_, result->lease_id);
    }
    answers_.clear();
    removed_.clear();
  }

 private:
  TensorStore* const store_;
  std::string session_id_;
  std::deque<std::pair<uint64_t, absl::StatusOr<TensorGrant>>> answers_;
  std::deque<std::string> removed_;
};

void CheckDescriptors(const v1::LocalReply& reply, const std::vector<UniqueFd>& fds) {
  FUZZ_CHECK(static_cast<size_t>(reply.descriptors_size()) == fds.size(),
             "%d descriptors listed, %zu sent", reply.descriptors_size(), fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    const v1::SegmentDescriptor& listed = reply.descriptors(static_cast<int>(i));
    struct stat st {};
    FUZZ_CHECK(
        ::fstat(fds[i].get(), &st) == 0 && static_cast<uint64_t>(st.st_size) == listed.size(),
        "descriptor of %s: %lld bytes, listed %llu", listed.segment().c_str(),
        static_cast<long long>(st.st_size), static_cast<unsigned long long>(listed.size()));
    const int mode = ::fcntl(fds[i].get(), F_GETFL) & O_ACCMODE;
    FUZZ_CHECK((mode == O_RDWR) == listed.writable(), "descriptor of %s: access mode %d",
               listed.segment().c_str(), mode);
  }
}

void CheckGrant(const v1::TensorGrant& grant) {
  const v1::MemoryRegion& region = grant.region();
  FUZZ_CHECK(region.offset() % kDataAlignment == 0 && region.offset() <= region.segment_size() &&
                 region.nbytes() <= region.segment_size() - region.offset(),
             "grant [%llu, +%llu) of a %llu-byte segment",
             static_cast<unsigned long long>(region.offset()),
             static_cast<unsigned long long>(region.nbytes()),
             static_cast<unsigned long long>(region.segment_size()));
  const v1::TensorInfo& info = grant.info();
  FUZZ_CHECK(region.nbytes() == info.nbytes(), "region and info disagree on nbytes");
  auto layout = ComputeLayout(ToVector(info.shape()), FromProto(info.dtype()),
                              ToVector(info.strides()), info.nbytes());
  FUZZ_CHECK(layout.ok(), "granted layout refused: %s",
             std::string(layout.status().message()).c_str());
  FUZZ_CHECK(ValidateName(info.name()).ok(), "granted name");
}

// `expected`'s count for the id of a Watch: from then on any number of replies.
constexpr int kStreaming = -1;

// Reads every reply waiting on the client's end; each one with a request_id is crossed off
// `expected`.
void DrainReplies(int client, std::map<uint64_t, int>* expected) {
  while (true) {
    auto received = ReceiveMessage(client, 1 << 20, kMaxFdsPerMessage);
    if (!received.ok() && absl::IsUnavailable(received.status())) return;
    FUZZ_CHECK(received.ok(), "client receive: %s",
               std::string(received.status().message()).c_str());
    if (received->closed) return;
    v1::LocalReply reply;
    FUZZ_CHECK(reply.ParseFromString(received->bytes), "a reply that does not parse");
    FUZZ_CHECK(reply.code() >= 0 && reply.code() <= 16, "code %d", reply.code());
    if (reply.code() != 0) {
      FUZZ_CHECK(!reply.message().empty(), "an error without a message");
      FUZZ_CHECK(reply.result_case() == v1::LocalReply::RESULT_NOT_SET, "an error with a result");
    }
    CheckDescriptors(reply, received->fds);
    if (reply.has_grant()) CheckGrant(reply.grant());
    if (reply.request_id() != 0) {
      int& left = (*expected)[reply.request_id()];
      if (left == kStreaming) continue;
      FUZZ_CHECK(left > 0, "a reply to request %llu, which asked for no more",
                 static_cast<unsigned long long>(reply.request_id()));
      --left;
    }
  }
}

void Run(const uint8_t* data, size_t size) {
  fuzz::FrameReader input(data, size);
  const bool other_user = (input.Byte() & 1) != 0;

  CpuSegmentPoolOptions pool;
  pool.capacity_bytes = 4 << 20;
  pool.name_prefix = "tb-fuzz-";
  pool.pooled_segment_bytes = 64 << 10;
  pool.dedicated_threshold = 32 << 10;
  StoreOptions options;
  options.quota_for = [](uint32_t uid) { return Policy().QuotaFor(uid); };
  TensorStore store(std::make_unique<CpuSegmentPool>(pool), options);
  Host host(&store);
  CallMetrics metrics;
  DescriptorLedger ledger;

  int pair[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0,
             "socketpair");
  UniqueFd client(pair[0]);
  UniqueFd daemon_end(pair[1]);
  std::optional<PeerCredentials> peer = PeerCredentialsOf(daemon_end.get(), "fuzz");
  FUZZ_CHECK(peer.has_value(), "no peer credentials");
  if (other_user) {
    peer->uid = 1000;
    peer->gid = 1000;
    peer->groups.clear();
  }
  auto connection = std::make_unique<LocalConnection>(1, std::move(daemon_end), *peer, &Policy(),
                                                      &store, &host, &metrics, &ledger);
  static const int attached_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

  std::map<uint64_t, int> expected;  // replies owed, by request_id
  bool dropped = false;
  while (!input.done() && !dropped) {
    const absl::string_view frame = input.Frame();
    const bool with_fd = !frame.empty() && (frame[0] & 1) != 0;
    const absl::string_view datagram = frame.empty() ? frame : frame.substr(1);
    v1::LocalRequest request;
    if (!with_fd && !datagram.empty() && request.ParseFromString(std::string(datagram)) &&
        request.request_id() != 0) {
      int& owed = expected[request.request_id()];
      if (request.has_watch() || owed == kStreaming) {
        owed = kStreaming;
      } else {
        ++owed;
      }
    }
    absl::Status sent = SendMessage(client.get(), datagram,
                                    with_fd ? std::vector<int>{attached_fd} : std::vector<int>{});
    FUZZ_CHECK(sent.ok(), "client send: %s", std::string(sent.message()).c_str());
    dropped = !connection->ReadRequest() || !host.Deliver(connection.get());
    DrainReplies(client.get(), &expected);
    // The client read everything: what waited for room (or for descriptors to be received)
    // goes now, as on the server's EPOLLOUT.
    if (!dropped) dropped = !connection->Flush() || !connection->PumpWatches();
    DrainReplies(client.get(), &expected);
  }
  if (!dropped) {
    // Every wait runs out, as the server's ExpireWaits does at its deadline.
    std::vector<uint64_t> waiting;
    for (const auto& [waiter_id, wait] : connection->waits()) waiting.push_back(waiter_id);
    for (uint64_t waiter_id : waiting) {
      if (!store.CancelWait(waiter_id)) continue;  // answered: its answer is queued
      if (!connection->FinishWait(waiter_id, absl::DeadlineExceededError("wait ran out"))) {
        dropped = true;
        break;
      }
    }
    if (!dropped) dropped = !host.Deliver(connection.get());
    DrainReplies(client.get(), &expected);
    if (!dropped) dropped = !connection->Flush() || !connection->PumpWatches();
    DrainReplies(client.get(), &expected);
  }
  if (!dropped) {
    for (const auto& [request_id, left] : expected) {
      FUZZ_CHECK(left == 0 || left == kStreaming, "request %llu is owed %d replies",
                 static_cast<unsigned long long>(request_id), left);
    }
  }
  connection.reset();  // closes the session it opened, cancels its waits
  host.ReleaseLeftovers();
}

}  // namespace
}  // namespace tensorbroker::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorbroker::daemon::Run(data, size);
  return 0;
}
