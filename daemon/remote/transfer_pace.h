// How slow a transfer between brokers may be: a fetch that receives less than
// kStallBytes (or what it still lacks, if less) within a whole stall timeout is cut (its gRPC
// call cancelled), so that a peer that drips its bytes holds a fetch slot and the memory it
// reserved for one stall timeout at most, not for the whole fetch timeout.
//
//   TransferPace pace(absl::Seconds(10));           // one per transfer source
//   auto watch = pace.Watch(&context);   // before the first Read
//   watch->Answered();                   // after it
//   watch->Expect(total_bytes);          // once the memory for them is ready
//   watch->Received(chunk.size());       // as bytes come
//   if (watch->Cut()) ...                            // the call ended because it was too slow
//   // the watch ends (and never touches `context` again) when its last owner drops it
//
// Threading: thread-safe; the checks run on one timer thread of the pace's own.
#ifndef TENSORBROKER_DAEMON_REMOTE_TRANSFER_PACE_H_
#define TENSORBROKER_DAEMON_REMOTE_TRANSFER_PACE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "daemon/base/deadline_timer.h"

namespace tensorbroker::daemon {

// What a stall timeout must bring at least (about 100 KiB/s with the default 10 s).
inline constexpr uint64_t kStallBytes = uint64_t{1} << 20;
inline constexpr absl::Duration kDefaultStallTimeout = absl::Seconds(10);

class TransferPace {
 public:
  class Watched;

  explicit TransferPace(absl::Duration stall_timeout) : stall_timeout_(stall_timeout) {}
  TransferPace(const TransferPace&) = delete;
  TransferPace& operator=(const TransferPace&) = delete;

  // Watches the call of `context` (which must outlive the returned watch), from now on: until
  // it says how many bytes it brings (Watched::Expect), each stall timeout must bring
  // kStallBytes (its first message must come within one). Destroy the watch before the context.
  std::unique_ptr<Watched> Watch(grpc::ClientContext* context);
  absl::Duration stall_timeout() const { return stall_timeout_; }

 private:
  struct Progress;
  // Checks `progress` now, cancels its call when too slow, else checks again later.
  void Check(const std::shared_ptr<Progress>& progress);
  void ScheduleCheck(const std::shared_ptr<Progress>& progress);

  const absl::Duration stall_timeout_;
  DeadlineTimer timer_;  // last: its thread stops before the rest goes
};

class TransferPace::Watched {
 public:
  Watched(TransferPace* pace, std::shared_ptr<Progress> progress);
  ~Watched();  // the call is never cancelled by the pace from then on
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

  // The first message came: until Expect, the time is this side's (its memory is made ready)
  // and not judged.
  void Answered();
  // The call brings `total` bytes in all; judged from now on.
  void Expect(uint64_t total);
  void Received(uint64_t bytes);
  // Whether the pace cut the call (then the call's end is "cancelled").
  bool Cut() const;
  // "12 bytes of 8589934592 in 10s": what the peer sent, for the error.
  std::string Describe() const;

 private:
  TransferPace* pace_;
  std::shared_ptr<Progress> progress_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_REMOTE_TRANSFER_PACE_H_
