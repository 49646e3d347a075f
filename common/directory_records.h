// The layout of a principal's directory (issue 34; docs/architecture.md, "Reads without a round
// trip: the protocol") and the two sides' accesses to it: the daemon alone writes records, every
// process of the uid reads them through a read-only mapping. A directory is a memfd of
// DirectoryBytes(records) bytes:
//
//   [0, 4096)        DirectoryHeader: magic, the record count, changes (bumped at every
//                    record written), overflow (nonzero: some name the uid may read has no
//                    record, so a name not found may still exist: ask the daemon)
//   then `records` records of kRecordBytes, an open-addressing table keyed by the name's hash
//   (linear probing). A record once used never becomes empty again (probe chains stay
//   whole): a deleted name's record becomes a tombstone (version 0, no name, a hash no name
//   has), which the daemon may later give to another name.
//
// Each record is under its own seqlock: the daemon makes its sequence odd, writes the fields,
// makes it even; a reader reads the sequence (even), the fields, and the sequence again, and
// retries when it moved. Every word is read and written with __atomic builtins (sequentially
// consistent for the sequence, release and acquire for the fields between), so the two sides
// never race in the C++ sense, and every value read is only data: a reader checks what it read
// (lengths, ndim) before using it.
//
// Threading: plain functions over mappings. One writer per directory (the daemon's store lock);
// any number of readers in any processes.
#ifndef TENSORBROKER_COMMON_DIRECTORY_RECORDS_H_
#define TENSORBROKER_COMMON_DIRECTORY_RECORDS_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorbroker {

inline constexpr uint64_t kDirectoryMagic = 0x3130524944425454ull;  // "TTBDIR01"
inline constexpr size_t kDirectoryHeaderBytes = 4096;
inline constexpr size_t kRecordBytes = 512;
// Dimensions a record holds; a tensor of more is in the directory without a layout
// (DirectoryEntry::has_layout false): a Get of it takes the daemon's path.
inline constexpr uint32_t kRecordDims = 8;
// The longest segment name a record holds.
inline constexpr size_t kMaxSegmentNameBytes = 40;
// How many records a read looks at before it gives up ("not found, ask the daemon").
inline constexpr uint32_t kMaxProbes = 64;

// What a record says of one name.
struct DirectoryEntry {
  std::string name;
  uint64_t version = 0;  // 0: the name is not published (a tombstone)
  uint64_t object = 0;   // the daemon's id of the version's memory (what a lease table names)
  std::string segment;   // the segment it lies in (the client maps segments by this name);
                         // at most kMaxSegmentNameBytes, else the record has no layout
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  DLDataType dtype{};
  uint32_t owner_uid = 0;   // the uid the name belongs to (TensorInfo::owner_uid)
  bool ephemeral = false;   // TensorInfo::ephemeral
  bool has_layout = false;  // shape and strides below (ndim <= kRecordDims)
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
};

// The bytes of a directory of `records` records (a power of two).
size_t DirectoryBytes(uint32_t records);

// The daemon's side, over its read-write mapping of a directory it formatted. It keeps which
// name each record holds in its own memory and never reads the mapping back. One thread at a
// time (the owner's lock).
class DirectoryWriter {
 public:
  // Lays out an empty directory of `records` records (a power of two, >= 1) at `base`, a
  // mapping of `bytes` bytes; INVALID_ARGUMENT naming the value when they do not fit.
  static absl::Status Format(void* base, size_t bytes, uint32_t records);
  // `base` must stay mapped while the writer lives.
  DirectoryWriter(void* base, uint32_t records);

  // Writes `entry` (version != 0) into its name's record: the one the name has, else the first
  // unused or tombstoned record on its probe chain (a tombstone's name loses its record).
  // RESOURCE_EXHAUSTED when the chain has none within kMaxProbes: the caller sets the overflow.
  absl::Status Publish(const DirectoryEntry& entry);
  // Turns the name's record into a tombstone (version 0); nothing when it has none.
  void Unpublish(absl::string_view name);
  // Says whether some readable name has no record (readers then ask the daemon for a name they
  // do not find).
  void SetOverflow(bool overflow);

 private:
  struct Use {
    std::string name;  // "" while never used
    bool live = false;
  };
  void Write(uint32_t index, const DirectoryEntry& entry);

  uint8_t* base_;
  std::vector<Use> uses_;
  absl::flat_hash_map<std::string, uint32_t> index_;  // the names that have a record
};

// A process's side, over its read-only mapping. Every answer is a consistent snapshot of one
// record as the daemon last wrote it.
class DirectoryReader {
 public:
  // Checks the header of a mapping of `bytes` bytes; the reader uses none of it before.
  static absl::Status Check(const void* base, size_t bytes);
  explicit DirectoryReader(const void* base);  // after Check

  enum class Lookup { kFound, kAbsent, kUnknown };
  struct Found {
    Lookup lookup = Lookup::kUnknown;  // kUnknown: ask the daemon (overflow, a long chain)
    DirectoryEntry entry;              // when kFound
    uint64_t sequence = 0;             // the record's sequence it was read at
    uint32_t index = 0;                // which record
  };
  Found Find(absl::string_view name) const;
  // Only the name's version (0 unless kFound): the same lookup without copying the record out
  // (no allocation), for checks.
  struct Version {
    Lookup lookup = Lookup::kUnknown;
    uint64_t version = 0;
  };
  Version VersionOf(absl::string_view name) const;
  // The sequence of record `index` now (sequentially consistent): a lease taken after a
  // Find holds when this is still Found::sequence.
  uint64_t SequenceOf(uint32_t index) const;
  // Bumped at every record the daemon writes.
  uint64_t Changes() const;

 private:
  // Reads record `index` consistently into `found` (false: it kept changing); `name_hash` 0
  // means the record is unused.
  bool ReadRecord(uint32_t index, uint64_t* name_hash, Found* found) const;
  // Whether record `index` holds `name` (hash `hash`), and its version then, read consistently;
  // nullopt when it kept changing. `empty` is set for an unused record.
  std::optional<bool> Matches(uint32_t index, uint64_t hash, absl::string_view name, bool* empty,
                              uint64_t* version) const;

  const uint8_t* base_;
  uint32_t records_;
};

// The probe start of a name (FNV-1a 64; never 0, which marks an unused record).
uint64_t DirectoryHash(absl::string_view name);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_DIRECTORY_RECORDS_H_
