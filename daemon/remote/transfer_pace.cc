#include "daemon/remote/transfer_pace.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tensorbroker::daemon {

struct TransferPace::Progress {
  std::atomic<uint64_t> received{0};
  std::atomic<bool> cut{false};
  const absl::Time started = absl::Now();
  Mutex mu;
  grpc::ClientContext* context ABSL_GUARDED_BY(mu);  // null once the watch ended
  uint64_t total ABSL_GUARDED_BY(mu) = kUnknown;
  bool answered ABSL_GUARDED_BY(mu) = false;  // the first message came
  // The window being judged: from when, and what had come by then.
  absl::Time window_start ABSL_GUARDED_BY(mu) = absl::Now();
  uint64_t at_window_start ABSL_GUARDED_BY(mu) = 0;
  uint64_t timer_id ABSL_GUARDED_BY(mu) = 0;

  static constexpr uint64_t kUnknown = ~uint64_t{0};
  explicit Progress(grpc::ClientContext* c) : context(c) {}
};

std::unique_ptr<TransferPace::Watched> TransferPace::Watch(grpc::ClientContext* context) {
  auto progress = std::make_shared<Progress>(context);
  ScheduleCheck(progress);
  return std::make_unique<Watched>(this, std::move(progress));
}

void TransferPace::ScheduleCheck(const std::shared_ptr<Progress>& progress) {
  MutexLock lock(progress->mu);
  if (progress->context == nullptr) return;
  progress->timer_id = timer_.Schedule(progress->window_start + stall_timeout_,
                                       [this, progress] { Check(progress); });
}

void TransferPace::Check(const std::shared_ptr<Progress>& progress) {
  {
    MutexLock lock(progress->mu);
    if (progress->context == nullptr) return;
    const absl::Time now = absl::Now();
    const uint64_t received = progress->received.load(std::memory_order_relaxed);
    if (progress->total == Progress::kUnknown && progress->answered) {
      // The first message came and its memory is being made ready (the sink): not the
      // peer's time. Judging starts again at Expect.
      progress->window_start = now;
      progress->at_window_start = received;
    } else if (now - progress->window_start >= stall_timeout_) {
      const uint64_t total = progress->total == Progress::kUnknown ? kStallBytes : progress->total;
      const uint64_t lacking = total - std::min(total, progress->at_window_start);
      const uint64_t brought = received - progress->at_window_start;
      if (lacking > 0 && brought < std::min(kStallBytes, lacking)) {
        progress->cut.store(true, std::memory_order_relaxed);
        progress->context->TryCancel();
        return;
      }
      progress->window_start = now;
      progress->at_window_start = received;
    }
  }
  ScheduleCheck(progress);
}

TransferPace::Watched::Watched(TransferPace* pace, std::shared_ptr<Progress> progress)
    : pace_(pace), progress_(std::move(progress)) {}

TransferPace::Watched::~Watched() {
  uint64_t id = 0;
  {
    MutexLock lock(progress_->mu);
    progress_->context = nullptr;  // a check running now or later touches nothing
    id = progress_->timer_id;
  }
  pace_->timer_.Cancel(id);
}

void TransferPace::Watched::Answered() {
  MutexLock lock(progress_->mu);
  progress_->answered = true;
}

void TransferPace::Watched::Expect(uint64_t total) {
  MutexLock lock(progress_->mu);
  progress_->total = total;
  progress_->window_start = absl::Now();
  progress_->at_window_start = progress_->received.load(std::memory_order_relaxed);
}

void TransferPace::Watched::Received(uint64_t bytes) {
  progress_->received.fetch_add(bytes, std::memory_order_relaxed);
}

bool TransferPace::Watched::Cut() const { return progress_->cut.load(std::memory_order_relaxed); }

std::string TransferPace::Watched::Describe() const {
  uint64_t total = 0;
  {
    MutexLock lock(progress_->mu);
    total = progress_->total;
  }
  return absl::StrCat(
      progress_->received.load(std::memory_order_relaxed), " of ",
      total == Progress::kUnknown ? std::string("?") : absl::StrCat(total), " bytes in ",
      absl::FormatDuration(absl::Trunc(absl::Now() - progress_->started, absl::Milliseconds(100))));
}

}  // namespace tensorbroker::daemon
