// This connection's reads without a round trip (issue 34; docs/architecture.md, "Reads without
// a round trip: the protocol"): its principal's directory, mapped read-only, and its session's
// lease table, mapped read-write, both asked for once on the local channel (open_fast_reads).
//
// A Get with no message to the daemon: Find the name's record (a consistent snapshot under its
// seqlock), Take a slot naming the version's object, then StillCurrent (the record's sequence
// unchanged, loaded sequentially consistently after the slot's store): the daemon cannot free
// the version until the slot is given back (Give). Every value read from the directory is only
// data: the caller checks it against its mappings before use.
//
// Ownership: owns both mappings; shared by the Connection and each tensor holding a slot (the
// table must stay mapped until the slot is given back). Thread-safe (lock-free after Open).
#ifndef TENSORBROKER_CLIENT_SRC_FAST_READS_H_
#define TENSORBROKER_CLIENT_SRC_FAST_READS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/src/local_channel.h"
#include "client/src/segment_mapper.h"
#include "common/directory_records.h"
#include "common/lease_slots.h"

namespace tensorbroker::client_internal {

class FastReads {
 public:
  // Asks the daemon on `channel` for the directory and the lease table and maps them;
  // UNIMPLEMENTED-like codes as the daemon answers (an older daemon: INVALID_ARGUMENT).
  static absl::StatusOr<std::shared_ptr<FastReads>> Open(LocalChannel& channel);

  DirectoryReader::Found Find(const std::string& name) const { return directory_.Find(name); }
  DirectoryReader::Version VersionOf(const std::string& name) const {
    return directory_.VersionOf(name);
  }
  // Whether the record `found` was read from is still as it was (the protocol's step 4).
  bool StillCurrent(const DirectoryReader::Found& found) const {
    return directory_.SequenceOf(found.index) == found.sequence;
  }
  std::optional<uint32_t> Take(uint64_t object) { return slots_.Take(object); }
  void Give(uint32_t slot) { slots_.Give(slot); }
  // Slots taken now (for tests and figures).
  uint32_t taken() const;

 private:
  FastReads(std::shared_ptr<const MappedSegment> directory,
            std::shared_ptr<const MappedSegment> table);

  std::shared_ptr<const MappedSegment> directory_mapping_;
  std::shared_ptr<const MappedSegment> table_mapping_;
  DirectoryReader directory_;
  LeaseSlots slots_;
};

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_FAST_READS_H_
