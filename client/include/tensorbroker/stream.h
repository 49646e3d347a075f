// Stream rings: one writer process publishes frames of a fixed shape and dtype, and reader
// processes follow them, with no daemon round trip and no copy per frame.
//
//   // Writer:
//   auto w = tensorbroker::StreamWriter::Open(*client, "camera/0", {480, 640, 3},
//                                             tensorbroker::dtypes::kUInt8);
//   DLTensor* frame = *(*w)->Loan();   ... fill frame->data ...;   (*w)->Publish();
//   // Reader (any process the stream's readers include):
//   auto r = tensorbroker::StreamReader::Open(*client, "camera/0");
//   auto next = (*r)->Next(std::chrono::seconds(1));   // the newest frame, or nullopt
//   if (next.ok() && next->has_value()) ... (*next)->tensor->dl_tensor ...;  // read-only
//
// How: the writer creates one broker tensor under the stream's name, the ring: a control page
// and `slots` frames. Readers Get it like any tensor (the daemon checks who may read it and
// hands a read-only descriptor: the kernel refuses them writes), and each reader creates a
// small seat tensor the writer reads (its claims: the frames it holds). Per frame, the writer
// fills a slot no reader holds and publishes it with a few stores and one futex wake; a reader
// wakes on that futex through its read-only mapping, claims the newest frame and reads it in
// place. The daemon is on the path only when a reader joins or leaves.
//
// Semantics: a reader gets the newest frame each time (it skips what it was too slow for:
// StreamFrame::skipped); a writer never waits for a reader unless readers hold every free slot
// (each reader holds at most `frames_per_reader` frames at once; with slots >= 2 +
// max_readers * frames_per_reader that never happens). A held frame never changes: the writer
// refills only slots no reader claims. For every version kept by the daemon, Get/Watch and
// keep=N on ordinary tensors remain the tool.
//
// Trust: readers cannot write the ring (read-only descriptor) nor another reader's seat (it is
// readable by the writer's uid alone). Only a process that may read the ring can take a seat:
// it copies the ring's random admission token into it, and the writer ignores seats without;
// the daemon lets only such a process create under the ring's seat prefix, and only ephemeral
// tensors, and seat names are random (a reader draws another when one is taken).
// Every value a reader reads from the ring is checked before use. The writer can always
// change its own frames, as the owner of any tensor can.
//
// Lifetimes: the Client must outlive its StreamWriter and StreamReader; frames (StreamFrame::
// tensor) may outlive both. A reader's seat is ephemeral: if the reader's process dies, the
// daemon deletes it and the writer forgets its claims. If the writer dies, the ring stays
// published until it is deleted or a new writer replaces it (StreamOptions::replace); readers
// then see no new frame. Threading: each object is for one thread at a time.
#ifndef TENSORBROKER_STREAM_H_
#define TENSORBROKER_STREAM_H_

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorbroker/client.h"
#include "tensorbroker/export.h"

namespace tensorbroker {

struct StreamOptions {
  uint32_t slots = 8;              // frames in the ring, 2-256
  uint32_t max_readers = 4;        // readers at once, 1-64
  uint32_t frames_per_reader = 2;  // frames one reader may hold at once, 1-16
  // Who may read the stream besides its owner: as CreateOptions::readers.
  std::vector<std::string> readers;
  // Take over the name if it is published already (a new writer after one that died).
  bool replace = false;
};

class TENSORBROKER_EXPORT StreamWriter {
 public:
  // Publishes the ring under `name` (ALREADY_EXISTS when the name is taken and !replace) and
  // starts accepting readers. INVALID_ARGUMENT for options out of range.
  static absl::StatusOr<std::unique_ptr<StreamWriter>> Open(Client& client, const std::string& name,
                                                            const std::vector<int64_t>& shape,
                                                            DLDataType dtype,
                                                            const StreamOptions& options = {});
  ~StreamWriter();  // Close()
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // The frame to fill next (compact C order, writable), valid until Publish or Close; the same
  // one again until it is published. Waits up to `timeout` while readers hold every other slot
  // (DEADLINE_EXCEEDED then). FAILED_PRECONDITION once closed.
  absl::StatusOr<DLTensor*> Loan(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Makes the loaned frame the stream's newest and wakes waiting readers. Returns its sequence
  // number (1, 2, ...). FAILED_PRECONDITION without a loan. Do not write through the loan
  // after this: readers may hold the frame (the kernel does not stop the writer).
  absl::StatusOr<uint64_t> Publish();
  // Ends the stream: readers get the frames already published, then OUT_OF_RANGE. Deletes the
  // name (readers keep their frames). Idempotent.
  absl::Status Close();
  // Readers accepted now.
  size_t readers() const;
  // The ring's name and the version the daemon published it as.
  const std::string& name() const;

  class Impl;

 private:
  explicit StreamWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct StreamFrame {
  TensorPtr tensor;       // read-only; its deleter lets the writer reuse the slot
  uint64_t sequence = 0;  // the writer's count: 1, 2, ...
  // Frames this reader missed since the previous Next (for the first: since it joined; the
  // newest frame then is its first).
  uint64_t skipped = 0;
};

class TENSORBROKER_EXPORT StreamReader {
 public:
  // Gets the ring (waiting up to `timeout` for it to be published) and waits, within the same
  // `timeout`, until its writer accepted this reader: DEADLINE_EXCEEDED naming which wait ran
  // out (the writer takes at most max_readers readers). FAILED_PRECONDITION when `name` is not
  // a stream ring.
  static absl::StatusOr<std::unique_ptr<StreamReader>> Open(
      Client& client, const std::string& name,
      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  // The newest frame after the last one returned, waiting up to `timeout` for one (nullopt when
  // none came; a negative timeout waits for ever). OUT_OF_RANGE once the writer closed the
  // stream and nothing newer remains; RESOURCE_EXHAUSTED while this reader holds
  // frames_per_reader frames; ABORTED when the writer no longer counts this reader.
  absl::StatusOr<std::optional<StreamFrame>> Next(std::chrono::milliseconds timeout);
  // The frame's shape and dtype (the writer's).
  const std::vector<int64_t>& shape() const;
  DLDataType dtype() const;

  class Impl;

 private:
  explicit StreamReader(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_STREAM_H_
