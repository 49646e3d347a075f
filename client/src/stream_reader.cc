// StreamReader (tensorbroker/stream.h): follows a stream ring through a read-only mapping.
//
// Ownership: the Impl holds the reader's lease on the ring (read-only mapping) and its seat
// (the claims it writes). Every frame it returns holds the Impl, so both outlive the reader
// object while frames are alive. Threading: Next runs on one thread at a time; a frame's
// deleter (any thread) clears its own claim word and nothing else.
#include <dlpack/dlpack.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/src/stream_layout.h"
#include "common/tensor_layout.h"
#include "tensorbroker/stream.h"

namespace tensorbroker {

using namespace client_internal;  // NOLINT: the ring's layout names

class TENSORBROKER_HIDDEN StreamReader::Impl {  // not exported (export.h)
 public:
  explicit Impl(Client& client) : client_(client) {}

  ~Impl() {
    // The last frame is gone: nothing is claimed, and nothing will be.
    if (seat_page_ != nullptr) StoreRelease(&seat_page_->closed, 1);
  }

  absl::Status Open(const std::string& name, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto ring = client_.Get(name, timeout);
    if (!ring.ok()) return ring.status();
    ring_.reset(*ring);
    auto info = client_.Describe(*ring_);
    if (!info.ok()) return info.status();
    const DLTensor& t = ring_->dl_tensor;
    if (t.device.device_type != kDLCPU || t.ndim != 1 || t.dtype.code != kDLUInt ||
        t.dtype.bits != 8 || info->nbytes < kDataOffset) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", name,
                       "' is not a stream ring (StreamWriter): it is not a 1-D "
                       "uint8 CPU tensor of at least ",
                       kDataOffset, " bytes"));
    }
    const auto* base = static_cast<const uint8_t*>(t.data) + t.byte_offset;
    control_ = reinterpret_cast<const RingControl*>(base);
    data_ = base + kDataOffset;
    // A private copy, checked once: the writer may change the shared one at any time.
    std::memcpy(&geometry_, &control_->geometry, sizeof(geometry_));
    if (absl::Status s = CheckGeometry(geometry_, info->nbytes); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("'", name, "': ", s.message()));
    }
    shape_.assign(geometry_.shape, geometry_.shape + geometry_.ndim);
    strides_ = CompactStrides(shape_);
    if (absl::Status s = TakeSeat(name, info->owner_uid); !s.ok()) return s;
    return AwaitAcceptance(name, deadline);
  }

  absl::StatusOr<std::optional<StreamFrame>> Next(std::chrono::milliseconds timeout,
                                                  const std::shared_ptr<Impl>& self) {
    const bool forever = timeout.count() < 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (LoadAcquire(&control_->accepted[index_]) != seat_version_) {
      return NotCounted();
    }
    uint64_t missed_head = 0;  // a head whose frame was refilled before the claim landed
    while (true) {
      const uint32_t gen = LoadAcquire(&control_->gen);
      // The state before the head: a writer closes after its last publication.
      const bool closed = LoadAcquire(&control_->state) != kStreamOpen;
      const uint64_t head = LoadAcquire(&control_->head);
      const uint64_t sequence = HeadSequence(head);
      if (sequence > last_sequence_ && head != missed_head) {
        auto frame = Claim(sequence, HeadSlot(head), self);
        if (!frame.ok()) return frame.status();
        if (frame->has_value()) return frame;
        // The slot moved on, so a newer head is out: read it again. A head that stays the
        // same (only a broken or hostile writer leaves one) is waited out like no news; and
        // a writer that moves the head on every store holds no reader past its deadline.
        missed_head = head;
        if (!forever && std::chrono::steady_clock::now() >= deadline) {
          return std::optional<StreamFrame>();
        }
        continue;
      }
      if (closed) {
        return absl::OutOfRangeError(absl::StrCat(
            "stream '", ring_name_, "' was closed by its writer after frame ", sequence));
      }
      int64_t wait_ns = -1;
      if (!forever) {
        wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
        if (wait_ns <= 0) return std::optional<StreamFrame>();
      }
      FutexWait(&control_->gen, gen, wait_ns);
    }
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  DLDataType dtype() const {
    return DLDataType{geometry_.dtype_code, geometry_.dtype_bits, geometry_.dtype_lanes};
  }

  // Called by ~StreamReader while the Client is alive: with no frame left, the seat goes now.
  void LetGo(bool frames_alive) {
    if (frames_alive || seat_page_ == nullptr) return;
    StoreRelease(&seat_page_->closed, 1);
    (void)client_.Delete(seat_name_);
  }

 private:
  absl::Status NotCounted() const {
    return absl::AbortedError(absl::StrCat(
        "stream '", ring_name_, "': the writer no longer counts this reader; open a new one"));
  }

  struct FrameContext {
    std::shared_ptr<Impl> reader;
    uint32_t claim = 0;
  };

  // Creates this reader's seat: mutable (only this reader and the writer's uid hold it, and
  // its segment is never reused), ephemeral (gone with this process's session), under a name
  // drawn at random (another is drawn if it is taken).
  absl::Status TakeSeat(const std::string& name, uint32_t writer_uid) {
    ring_name_ = name;
    CreateOptions create;
    create.is_mutable = true;
    create.ephemeral = true;
    create.readers = {absl::StrCat("uid:", writer_uid)};
    absl::StatusOr<DLManagedTensorVersioned*> seat = absl::UnknownError("no seat drawn");
    for (int draw = 0; draw < kSeatDraws; ++draw) {
      auto drawn = RandomSeatName(name);
      if (!drawn.ok()) return drawn.status();
      seat_name_ = *std::move(drawn);
      seat = client_.Create(seat_name_, {static_cast<int64_t>(kSeatBytes)}, dtypes::kUInt8, create);
      if (!absl::IsAlreadyExists(seat.status())) break;
    }
    if (!seat.ok()) return seat.status();
    seat_.reset(*seat);
    seat_page_ = reinterpret_cast<SeatPage*>(static_cast<uint8_t*>(seat_->dl_tensor.data) +
                                             seat_->dl_tensor.byte_offset);
    std::memset(seat_page_, 0, sizeof(SeatPage));
    seat_page_->admission = geometry_.admission;
    StoreRelease(&seat_page_->magic, kSeatMagic);
    auto sealed = client_.Seal(seat_name_);
    if (!sealed.ok()) return sealed.status();
    seat_version_ = sealed->version;
    return absl::OkStatus();
  }

  absl::Status AwaitAcceptance(const std::string& name,
                               std::chrono::steady_clock::time_point deadline) {
    while (true) {
      const uint32_t gen = LoadAcquire(&control_->gen);
      for (uint32_t i = 0; i < geometry_.max_readers; ++i) {
        if (LoadAcquire(&control_->accepted[i]) == seat_version_) {
          index_ = i;
          // Skips are counted from the newest frame at joining (the first one this reader
          // may get), or from the start.
          const uint64_t newest = HeadSequence(LoadAcquire(&control_->head));
          skip_base_ = newest == 0 ? 0 : newest - 1;
          return absl::OkStatus();
        }
      }
      if (LoadAcquire(&control_->state) != kStreamOpen) {
        return absl::OutOfRangeError(absl::StrCat("stream '", name, "' is closed"));
      }
      const int64_t wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  deadline - std::chrono::steady_clock::now())
                                  .count();
      if (wait_ns <= 0) {
        return absl::DeadlineExceededError(absl::StrCat(
            "stream '", name,
            "': its writer did not accept this reader in time (it takes at "
            "most ",
            geometry_.max_readers, " readers at once, and a writer that died takes none)"));
      }
      FutexWait(&control_->gen, gen, wait_ns);
    }
  }

  // Claims frame `sequence` in `slot` and wraps it; nullopt when the writer refilled the slot
  // meanwhile (a newer frame is out).
  absl::StatusOr<std::optional<StreamFrame>> Claim(uint64_t sequence, uint32_t slot,
                                                   const std::shared_ptr<Impl>& self) {
    if (slot >= geometry_.slots) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stream '", ring_name_, "': its head names slot ", slot, " of ", geometry_.slots));
    }
    uint32_t claim = 0;
    while (claim < geometry_.frames_per_reader && LoadAcquire(&seat_page_->claims[claim]) != 0) {
      ++claim;
    }
    if (claim == geometry_.frames_per_reader) {
      return absl::ResourceExhaustedError(
          absl::StrCat("stream '", ring_name_, "': this reader holds ", geometry_.frames_per_reader,
                       " frames, the most the writer allows; release one first"));
    }
    // Sequentially consistent store, then loads: never reordered (the writer's side mirrors it).
    StoreSeqCst(&seat_page_->claims[claim], sequence);
    // Counted only while the writer counts this seat: checked after the claim is visible.
    if (LoadSeqCst(&control_->accepted[index_]) != seat_version_) {
      StoreRelease(&seat_page_->claims[claim], 0);
      return NotCounted();
    }
    if (LoadSeqCst(&control_->slot_seq[slot]) != sequence) {
      StoreRelease(&seat_page_->claims[claim], 0);
      return std::optional<StreamFrame>();
    }
    StreamFrame frame;
    frame.sequence = sequence;
    const uint64_t since = std::max(last_sequence_, skip_base_);
    frame.skipped = sequence > since ? sequence - since - 1 : 0;
    last_sequence_ = sequence;
    frame.tensor.reset(Wrap(slot, claim, self));
    return std::optional<StreamFrame>(std::move(frame));
  }

  DLManagedTensorVersioned* Wrap(uint32_t slot, uint32_t claim, const std::shared_ptr<Impl>& self) {
    auto* out = new DLManagedTensorVersioned{};
    out->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    out->manager_ctx = new FrameContext{self, claim};
    out->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    out->deleter = [](DLManagedTensorVersioned* t) {
      auto* context = static_cast<FrameContext*>(t->manager_ctx);
      StoreRelease(&context->reader->seat_page_->claims[context->claim], 0);
      delete context;
      delete t;
    };
    DLTensor& d = out->dl_tensor;
    d.data = const_cast<uint8_t*>(data_ + uint64_t{slot} * geometry_.slot_bytes);
    d.device = DLDevice{kDLCPU, 0};
    d.ndim = static_cast<int32_t>(shape_.size());
    d.dtype = dtype();
    d.shape = shape_.data();
    d.strides = strides_.data();
    return out;
  }

  // Names drawn for a seat before giving up (each taken one is another's 128 random bits).
  static constexpr int kSeatDraws = 4;

  static absl::StatusOr<std::string> RandomSeatName(const std::string& ring) {
    uint64_t bits[2];
    if (::getrandom(bits, sizeof(bits), 0) != static_cast<ssize_t>(sizeof(bits))) {
      return absl::InternalError("stream reader: no random bits for a seat name (getrandom)");
    }
    return absl::StrCat(SeatPrefix(ring), absl::Hex(bits[0], absl::kZeroPad16),
                        absl::Hex(bits[1], absl::kZeroPad16));
  }

  Client& client_;
  std::string ring_name_;
  TensorPtr ring_;  // read-only lease on the ring
  const RingControl* control_ = nullptr;
  const uint8_t* data_ = nullptr;
  RingGeometry geometry_{};  // private, checked copy
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  std::string seat_name_;
  TensorPtr seat_;  // this reader's seat (writable)
  SeatPage* seat_page_ = nullptr;
  uint64_t seat_version_ = 0;
  uint32_t index_ = 0;          // its entry in RingControl::accepted
  uint64_t last_sequence_ = 0;  // Next's thread only
  uint64_t skip_base_ = 0;      // the frame before the newest one at joining
};

absl::StatusOr<std::unique_ptr<StreamReader>> StreamReader::Open(
    Client& client, const std::string& name, std::chrono::milliseconds timeout) {
  auto impl = std::make_shared<Impl>(client);
  if (absl::Status s = impl->Open(name, timeout); !s.ok()) {
    impl->LetGo(/*frames_alive=*/false);
    return s;
  }
  return std::unique_ptr<StreamReader>(new StreamReader(std::move(impl)));
}

StreamReader::StreamReader(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

StreamReader::~StreamReader() { impl_->LetGo(/*frames_alive=*/impl_.use_count() > 1); }

absl::StatusOr<std::optional<StreamFrame>> StreamReader::Next(std::chrono::milliseconds timeout) {
  return impl_->Next(timeout, impl_);
}

const std::vector<int64_t>& StreamReader::shape() const { return impl_->shape(); }
DLDataType StreamReader::dtype() const { return impl_->dtype(); }

}  // namespace tensorbroker
