// One client's link to the daemon: the gRPC channel and stub, the Session stream that owns this
// client's leases (open for the Connection's life), a background thread reading the daemon's
// session events, and the local channel attached to that session (the hot calls, descriptors).
// Every local reference to one tensor version shares one lease (LeaseHold, exported_tensor.h).
//
// Ownership: shared. The Client holds one reference and every tensor it hands out holds another,
// so a tensor's deleter can still release its lease after the Client is gone; the session ends
// (and the daemon reclaims anything left) when the last reference goes.
// A Connection is tied to one daemon instance: when that daemon goes away (a restart, a crash,
// a takeover; every call then fails with UNAVAILABLE) it is dead for good, and Client::Impl
// opens a new one. A daemon that still answers also says UNAVAILABLE of a peer it could not
// fetch from (a name under a remote prefix): Answers() tells the two apart.
// Thread-safe.
#ifndef TENSORBROKER_CLIENT_SRC_CONNECTION_H_
#define TENSORBROKER_CLIENT_SRC_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "client/src/fast_reads.h"
#include "client/src/local_channel.h"
#include "client/src/segment_mapper.h"
#include "common/mutex.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::client_internal {

class Connection {
 public:
  // Sends nothing to a server whose uid it does not trust (common/server_identity.h): checked on
  // a plain connection before gRPC's own, and on the local channel's connection itself.
  // `client_id` names the Client it serves (tensors it exported keep it, for Retain and
  // Describe, across the Client's reconnections). While a daemon takes over from another (or
  // restarts), the session and the local channel may reach different daemons: the local one
  // then knows no such session, and the whole open is made again, until `timeout`.
  static absl::StatusOr<std::shared_ptr<Connection>> Open(const std::string& socket_path,
                                                          std::chrono::milliseconds timeout,
                                                          uint64_t client_id);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  v1::Broker::Stub& stub() { return *stub_; }
  LocalChannel& local() { return *local_; }
  const std::string& session_id() const { return session_id_; }
  const std::string& socket_path() const { return socket_path_; }
  uint64_t client_id() const { return client_id_; }
  // Whether the daemon ended this connection's session (it went away, or is going).
  bool session_ended() const { return session_ended_.load(); }
  // Whether this connection's daemon still serves (its health check says SERVING within a
  // second, and its session is open): not on its way out.
  bool Answers();
  SegmentMapper& mapper() { return ProcessSegmentMapper(); }

  // Records that a tensor of this connection lives in `segment`, so the cached mapping is
  // dropped when the daemon removes the segment or the session ends (daemon gone).
  void NoteSegment(const std::string& segment);

  // Maps the descriptors that came with a local reply (the process's SegmentMapper keeps them).
  absl::Status AdoptDescriptors(LocalAnswer* answer);
  // Asks for the descriptor of the segment `lease_id` is in again (this process dropped it).
  absl::Status FetchDescriptor(uint64_t lease_id);

  // Ends a lease soon (queued, batched). Never fails loudly: if the daemon is gone, so is the
  // lease.
  void ReleaseLease(uint64_t lease_id) noexcept;

  // Asks the daemon for this connection's reads without a round trip (fast_reads.h): one round
  // trip. Call once, before the connection is shared with other threads; when the daemon offers
  // none (an older one) or they cannot be mapped, the connection goes without.
  void OpenFastReads();
  // Null without them.
  const std::shared_ptr<FastReads>& fast_reads() const { return fast_reads_; }
  // A context with the default deadline for unary calls.
  static void SetDeadline(grpc::ClientContext* context, std::chrono::milliseconds extra = {});

 private:
  // One try of Open; `attach_refused` says the local channel's daemon knew no such session.
  static absl::StatusOr<std::shared_ptr<Connection>> OpenOnce(const std::string& socket_path,
                                                              std::chrono::milliseconds timeout,
                                                              uint64_t client_id,
                                                              bool* attach_refused);
  Connection() = default;
  void ReadEvents();

  std::string socket_path_;
  uint64_t client_id_ = 0;
  std::atomic<bool> session_ended_{false};  // set by the event reader
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Broker::Stub> stub_;
  grpc::ClientContext session_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> session_;
  std::string session_id_;
  std::unique_ptr<LocalChannel> local_;
  std::thread event_reader_;
  std::shared_ptr<FastReads> fast_reads_;  // set before the connection is shared
  Mutex segments_mu_;
  std::set<std::string> segments_;  // mapped through this connection, still alive
};

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_CONNECTION_H_
