// StreamWriter (tensorbroker/stream.h): the ring's only writer, and the keeper of its readers.
//
// Ownership: the writer holds the ring's Create tensor (its writable mapping and lease) and one
// lease per accepted reader seat (a mapping of the reader's claims). Threading: one thread
// calls Loan/Publish/Close; a membership thread follows the seats' Watch and accepts or drops
// readers. `mu_` guards the seats and the slot choice (the publication itself is stores into
// the ring that only this writer makes); `watcher_mu_` guards the watch, which Close ends.
#include <dlpack/dlpack.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/src/stream_layout.h"
#include "common/mutex.h"
#include "tensorbroker/stream.h"

namespace tensorbroker {

using namespace client_internal;  // NOLINT: the ring's layout names

namespace {

// A reader's seat the writer accepted: the reader's claims, mapped.
struct Seat {
  std::string name;
  uint64_t version = 0;  // the seat tensor's version: the reader's id in `accepted`
  uint32_t index = 0;    // its entry in RingControl::accepted
  TensorPtr tensor;      // the writer's lease on the seat
  const SeatPage* page = nullptr;
};

}  // namespace

class TENSORBROKER_HIDDEN StreamWriter::Impl {  // not exported (export.h)
 public:
  Impl(Client& client, std::string name, const RingGeometry& geometry)
      : client_(client), name_(std::move(name)), geometry_(geometry) {}

  ~Impl() { (void)Close(); }

  absl::Status Start(const StreamOptions& options) {
    // The watch comes first, so that no reader that finds the ring can join unseen.
    auto watcher = client_.Watch(SeatPrefix(name_));
    if (!watcher.ok()) return watcher.status();
    watcher_ = std::shared_ptr<Watcher>(*std::move(watcher));
    CreateOptions create;
    create.readers = options.readers;
    create.replace = options.replace;
    auto ring =
        client_.Create(name_, {static_cast<int64_t>(RingBytes(geometry_))}, dtypes::kUInt8, create);
    if (!ring.ok()) return ring.status();
    ring_.reset(*ring);
    auto* base = static_cast<uint8_t*>(ring_->dl_tensor.data) + ring_->dl_tensor.byte_offset;
    control_ = reinterpret_cast<RingControl*>(base);
    data_ = base + kDataOffset;
    std::memset(control_, 0, sizeof(RingControl));
    control_->geometry = geometry_;
    auto sealed = client_.Seal(name_);
    if (!sealed.ok()) return sealed.status();
    version_ = sealed->version;
    slot_seq_.assign(geometry_.slots, 0);
    order_.assign(geometry_.slots, 0);
    shape_.assign(geometry_.shape, geometry_.shape + geometry_.ndim);
    index_used_.assign(geometry_.max_readers, false);
    membership_ = std::thread([this] { FollowSeats(); });
    return absl::OkStatus();
  }

  absl::StatusOr<DLTensor*> Loan(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      {
        MutexLock lock(mu_);
        if (closed_) return absl::FailedPreconditionError("the stream is closed");
        if (!loan_.has_value()) loan_ = PickFreeSlotLocked();
        if (loan_.has_value()) return LoanViewLocked();
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("stream '", name_, "': readers hold every slot the writer could refill (",
                         geometry_.slots, " slots, ", geometry_.max_readers,
                         " readers holding up to ", geometry_.frames_per_reader, " frames each)"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  absl::StatusOr<uint64_t> Publish() {
    MutexLock lock(mu_);
    if (closed_) return absl::FailedPreconditionError("the stream is closed");
    if (!loan_.has_value()) {
      return absl::FailedPreconditionError("no frame is loaned: call Loan first");
    }
    const uint32_t slot = *loan_;
    loan_.reset();
    const uint64_t sequence = ++last_sequence_;
    slot_seq_[slot] = sequence;
    StoreRelease(&control_->slot_seq[slot], sequence);
    StoreRelease(&control_->head, PackHead(sequence, slot));
    WakeReaders();
    return sequence;
  }

  absl::Status Close() {
    {
      MutexLock lock(mu_);
      if (closed_) return absl::OkStatus();
      closed_ = true;
      if (control_ != nullptr) {
        StoreRelease(&control_->state, kStreamClosed);
        WakeReaders();
      }
    }
    {
      MutexLock lock(watcher_mu_);
      closing_ = true;
      if (watcher_ != nullptr) watcher_->Close();
    }
    if (membership_.joinable()) membership_.join();
    absl::Status deleted = absl::OkStatus();
    if (version_ != 0) {
      // Only our own ring: a writer that replaced it owns the name now.
      auto info = client_.Stat(name_);
      if (info.ok() && info->version == version_) deleted = client_.Delete(name_);
    }
    MutexLock lock(mu_);
    seats_.clear();
    return deleted;
  }

  size_t readers() const {
    MutexLock lock(mu_);
    return seats_.size();
  }

  const std::string& name() const { return name_; }

 private:
  void WakeReaders() {
    __atomic_fetch_add(&control_->gen, 1, __ATOMIC_RELEASE);
    FutexWakeAll(&control_->gen);
  }

  DLTensor* LoanViewLocked() {
    loan_view_ = DLTensor{};
    loan_view_.data = data_ + uint64_t{*loan_} * geometry_.slot_bytes;
    loan_view_.device = DLDevice{kDLCPU, 0};
    loan_view_.ndim = static_cast<int32_t>(shape_.size());
    loan_view_.dtype =
        DLDataType{geometry_.dtype_code, geometry_.dtype_bits, geometry_.dtype_lanes};
    loan_view_.shape = shape_.data();
    return &loan_view_;
  }

  // The least recently published slot that is not the newest frame and that no reader claims,
  // marked kBusy in the ring; nullopt when readers hold all of them.
  std::optional<uint32_t> PickFreeSlotLocked() {
    DropClosedSeatsLocked();
    const uint32_t newest = HeadSlot(LoadAcquire(&control_->head));
    std::iota(order_.begin(), order_.end(), 0);  // reused: no allocation per frame
    std::sort(order_.begin(), order_.end(),
              [&](uint32_t a, uint32_t b) { return slot_seq_[a] < slot_seq_[b]; });
    for (uint32_t slot : order_) {
      const uint64_t old = slot_seq_[slot];
      if (old != 0 && slot == newest) continue;  // new readers start from the newest frame
      // Sequentially consistent store, then the claims' loads: never reordered.
      StoreSeqCst(&control_->slot_seq[slot], kBusy);
      if (old == 0 || !ClaimedLocked(old)) return slot;
      StoreRelease(&control_->slot_seq[slot], old);  // a reader holds it: leave it be
    }
    return std::nullopt;
  }

  bool ClaimedLocked(uint64_t sequence) const {
    for (const Seat& seat : seats_) {
      for (uint32_t c = 0; c < geometry_.frames_per_reader; ++c) {
        if (LoadSeqCst(&seat.page->claims[c]) == sequence) return true;
      }
    }
    return false;
  }

  void DropClosedSeatsLocked() {
    for (auto it = seats_.begin(); it != seats_.end();) {
      if (LoadAcquire(&it->page->closed) != 0) {
        it = DropSeatLocked(it);
      } else {
        ++it;
      }
    }
  }

  std::vector<Seat>::iterator DropSeatLocked(std::vector<Seat>::iterator it) {
    StoreRelease(&control_->accepted[it->index], 0);
    index_used_[it->index] = false;
    return seats_.erase(it);
  }

  // The membership thread, until Close: every seat event under the prefix. Each tick (and
  // event) it also forgets seats their readers closed and retries seats refused while every
  // place was taken. A watch that fails for good (the daemon stayed away longer than the
  // client's reconnect_timeout) is opened again, from a listing.
  void FollowSeats() {
    constexpr auto kTick = std::chrono::milliseconds(100);
    while (true) {
      std::shared_ptr<Watcher> watcher;
      {
        MutexLock lock(watcher_mu_);
        if (closing_) return;
        watcher = watcher_;
      }
      auto event = watcher->Next(kTick);
      if (!event.ok()) {
        if (Closing()) return;  // Close ended the watch
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        auto again = client_.Watch(SeatPrefix(name_));
        MutexLock lock(watcher_mu_);
        if (closing_) return;
        if (again.ok()) {
          watcher_ = std::shared_ptr<Watcher>(*std::move(again));
          resync_ = true;
        }
        continue;
      }
      if (event->has_value()) Handle(**event);
      if (resync_) {
        resync_ = false;
        Resync();
      }
      Tick();
    }
  }

  bool Closing() {
    MutexLock lock(watcher_mu_);
    return closing_;
  }

  void Handle(const WatchEvent& e) {
    switch (e.kind) {
      case WatchEvent::Kind::kPublished:
      case WatchEvent::Kind::kReplaced:
        Accept(e.name, e.version);
        break;
      case WatchEvent::Kind::kDeleted:
        Forget(e.name);
        break;
      case WatchEvent::Kind::kLost:
        Resync();
        break;
      case WatchEvent::Kind::kExpired:
        break;
    }
  }

  void Tick() {
    std::vector<std::pair<std::string, uint64_t>> retry;
    {
      MutexLock lock(mu_);
      DropClosedSeatsLocked();
      if (seats_.size() < geometry_.max_readers) retry.swap(refused_);
    }
    for (const auto& [name, version] : retry) Accept(name, version);
  }

  // Maps the seat `name` at `version` and counts its claims from now on.
  void Accept(const std::string& name, uint64_t version) {
    GetOptions get;
    get.version = version;
    auto seat = client_.Get(name, get);
    if (!seat.ok()) return;  // gone again already
    TensorPtr tensor(*seat);
    // Only an ephemeral tensor is a seat: it goes with its reader's process, so whatever it
    // claims is forgotten then (the daemon creates no other kind under the seat prefix).
    auto info = client_.Describe(*tensor);
    if (!info.ok() || !info->ephemeral) return;
    const DLTensor& t = tensor->dl_tensor;
    const bool is_seat = t.device.device_type == kDLCPU && t.ndim == 1 &&
                         t.shape[0] == static_cast<int64_t>(kSeatBytes) &&
                         t.dtype.code == kDLUInt && t.dtype.bits == 8;
    if (!is_seat) return;  // not a reader of this library: ignored
    const auto* page =
        reinterpret_cast<const SeatPage*>(static_cast<const uint8_t*>(t.data) + t.byte_offset);
    // Only a process that could read the ring knows its admission token; a closed seat's
    // reader has let go already.
    if (LoadAcquire(&page->magic) != kSeatMagic ||
        LoadAcquire(&page->admission) != geometry_.admission || LoadAcquire(&page->closed) != 0) {
      return;
    }
    MutexLock lock(mu_);
    if (closed_) return;
    for (auto it = seats_.begin(); it != seats_.end(); ++it) {
      if (it->name == name) {
        if (it->version == version) return;  // a resync found it again
        DropSeatLocked(it);
        break;
      }
    }
    auto free = std::find(index_used_.begin(), index_used_.end(), false);
    if (free == index_used_.end()) {
      // Full: taken when a place frees (Tick), or the reader's Open runs out of time first.
      const std::pair<std::string, uint64_t> seat(name, version);
      if (std::find(refused_.begin(), refused_.end(), seat) == refused_.end()) {
        refused_.push_back(seat);
      }
      return;
    }
    Seat accepted;
    accepted.name = name;
    accepted.version = version;
    accepted.index = static_cast<uint32_t>(free - index_used_.begin());
    accepted.page = page;
    accepted.tensor = std::move(tensor);
    *free = true;
    StoreRelease(&control_->accepted[accepted.index], version);
    seats_.push_back(std::move(accepted));
    WakeReaders();
  }

  void Forget(const std::string& name) {
    MutexLock lock(mu_);
    refused_.erase(std::remove_if(refused_.begin(), refused_.end(),
                                  [&](const auto& seat) { return seat.first == name; }),
                   refused_.end());
    for (auto it = seats_.begin(); it != seats_.end(); ++it) {
      if (it->name == name) {
        DropSeatLocked(it);
        return;
      }
    }
  }

  // After events were lost (the daemon restarted, or this thread fell behind): accepts the
  // seats the daemon lists. Seats it no longer lists (a restart forgets ephemeral tensors) stay
  // counted until their reader marks them closed, since their claims may still be live.
  void Resync() {
    auto listed = client_.List(SeatPrefix(name_));
    if (!listed.ok()) return;
    {
      MutexLock lock(mu_);
      refused_.clear();  // what is still there is listed
    }
    for (const TensorInfo& info : *listed) Accept(info.name, info.version);
  }

  Client& client_;
  const std::string name_;
  const RingGeometry geometry_;
  TensorPtr ring_;
  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t version_ = 0;
  std::vector<int64_t> shape_;
  std::thread membership_;
  bool resync_ = false;  // membership thread only

  Mutex watcher_mu_;
  std::shared_ptr<Watcher> watcher_;  // guarded by watcher_mu_ (replaced if it fails)
  bool closing_ = false;              // guarded by watcher_mu_

  mutable Mutex mu_;
  bool closed_ = false;                                    // guarded by mu_
  std::vector<Seat> seats_;                                // guarded by mu_
  std::vector<std::pair<std::string, uint64_t>> refused_;  // guarded by mu_: while full
  std::vector<bool> index_used_;                           // guarded by mu_
  std::vector<uint64_t> slot_seq_;  // guarded by mu_: what each slot holds (ours to say)
  std::vector<uint32_t> order_;     // guarded by mu_: PickFreeSlotLocked's scratch
  std::optional<uint32_t> loan_;    // guarded by mu_
  uint64_t last_sequence_ = 0;      // guarded by mu_
  DLTensor loan_view_{};            // guarded by mu_
};

absl::StatusOr<std::unique_ptr<StreamWriter>> StreamWriter::Open(Client& client,
                                                                 const std::string& name,
                                                                 const std::vector<int64_t>& shape,
                                                                 DLDataType dtype,
                                                                 const StreamOptions& options) {
  RingGeometry geometry;
  if (absl::Status s = MakeGeometry(shape, dtype, options.slots, options.max_readers,
                                    options.frames_per_reader, &geometry);
      !s.ok()) {
    return s;
  }
  auto impl = std::make_unique<Impl>(client, name, geometry);
  if (absl::Status s = impl->Start(options); !s.ok()) return s;
  return std::unique_ptr<StreamWriter>(new StreamWriter(std::move(impl)));
}

StreamWriter::StreamWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamWriter::~StreamWriter() = default;

absl::StatusOr<DLTensor*> StreamWriter::Loan(std::chrono::milliseconds timeout) {
  return impl_->Loan(timeout);
}
absl::StatusOr<uint64_t> StreamWriter::Publish() { return impl_->Publish(); }
absl::Status StreamWriter::Close() { return impl_->Close(); }
size_t StreamWriter::readers() const { return impl_->readers(); }
const std::string& StreamWriter::name() const { return impl_->name(); }

}  // namespace tensorbroker
