#include "common/directory_records.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"

namespace tensorbroker {
namespace {

// Header words.
constexpr size_t kMagicWord = 0;
constexpr size_t kShapeWord = 1;  // records | kRecordBytes << 32
constexpr size_t kChangesWord = 2;
constexpr size_t kOverflowWord = 3;

// Record words (8 bytes each; kRecordBytes / 8 of them).
constexpr size_t kSeq = 0;
constexpr size_t kHash = 1;
constexpr size_t kVersion = 2;
constexpr size_t kObject = 3;
constexpr size_t kSegment = 4;  // the segment name's length; its bytes at kSegmentName
constexpr size_t kOffset = 5;
constexpr size_t kNbytes = 6;
constexpr size_t kTypeAndDims = 7;  // code | bits << 8 | lanes << 16 | ndim << 32 | layout << 48
constexpr size_t kNameLength = 8;
constexpr size_t kShape = 9;
constexpr size_t kStrides = kShape + kRecordDims;
constexpr size_t kName = kStrides + kRecordDims;
constexpr size_t kNameWords = (kMaxNameBytes + 8) / 8;
constexpr size_t kSegmentName = kName + kNameWords;
constexpr size_t kSegmentNameWords = kMaxSegmentNameBytes / 8;
constexpr size_t kOwner = kSegmentName + kSegmentNameWords;  // owner uid | ephemeral << 32
static_assert((kOwner + 1) * 8 <= kRecordBytes, "a record holds its fields");

// A torn read is retried this often before the reader gives up (kUnknown: ask the daemon).
constexpr int kReadAttempts = 1000;

// A record's fields are stored with release and loaded with acquire: a reader that loads any
// field of a write in progress then loads the odd (or a later) sequence, and reads again. (On
// x86 both are plain moves; fences would do as well, but TSan does not model them.)
uint64_t Load(const uint64_t* word, int order = __ATOMIC_ACQUIRE) {
  return __atomic_load_n(word, order);
}
void Store(uint64_t* word, uint64_t value, int order = __ATOMIC_RELEASE) {
  __atomic_store_n(word, value, order);
}

bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

// The hash word of a tombstone: no name hashes to it, so no lookup stops there.
constexpr uint64_t kTombstoneHash = ~uint64_t{0};

}  // namespace

uint64_t DirectoryHash(absl::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  return hash == 0 || hash == kTombstoneHash ? 1 : hash;
}

size_t DirectoryBytes(uint32_t records) {
  return kDirectoryHeaderBytes + size_t{records} * kRecordBytes;
}

// ---- the daemon's side

absl::Status DirectoryWriter::Format(void* base, size_t bytes, uint32_t records) {
  if (!IsPowerOfTwo(records)) {
    return absl::InvalidArgumentError(
        absl::StrCat("directory records: ", records, " is not a power of two"));
  }
  if (DirectoryBytes(records) > bytes) {
    return absl::InvalidArgumentError(absl::StrCat("directory records: ", records, " need ",
                                                   DirectoryBytes(records), " bytes, not ", bytes));
  }
  std::memset(base, 0, DirectoryBytes(records));
  auto* header = static_cast<uint64_t*>(base);
  Store(&header[kShapeWord], uint64_t{records} | uint64_t{kRecordBytes} << 32);
  Store(&header[kMagicWord], kDirectoryMagic, __ATOMIC_RELEASE);
  return absl::OkStatus();
}

DirectoryWriter::DirectoryWriter(void* base, uint32_t records)
    : base_(static_cast<uint8_t*>(base)), uses_(records) {}

void DirectoryWriter::Write(uint32_t index, const DirectoryEntry& entry) {
  auto* r =
      reinterpret_cast<uint64_t*>(base_ + kDirectoryHeaderBytes + size_t{index} * kRecordBytes);
  const uint64_t seq = Load(&r[kSeq]);
  Store(&r[kSeq], seq + 1, __ATOMIC_SEQ_CST);  // odd: being written
  const size_t ndim = entry.shape.size();
  const bool layout = entry.has_layout && ndim <= kRecordDims && entry.strides.size() == ndim &&
                      entry.segment.size() <= kMaxSegmentNameBytes;
  // A tombstone keeps neither the name nor its hash: a name the uid may no longer read leaves
  // nothing of itself behind.
  Store(&r[kHash], entry.version == 0 ? kTombstoneHash : DirectoryHash(entry.name));
  Store(&r[kVersion], entry.version);
  Store(&r[kObject], entry.object);
  Store(&r[kOffset], entry.offset);
  Store(&r[kNbytes], entry.nbytes);
  Store(&r[kOwner], uint64_t{entry.owner_uid} | uint64_t{entry.ephemeral} << 32);
  Store(&r[kTypeAndDims], uint64_t{entry.dtype.code} | uint64_t{entry.dtype.bits} << 8 |
                              uint64_t{entry.dtype.lanes} << 16 |
                              (layout ? uint64_t{ndim} << 32 | uint64_t{1} << 48 : 0));
  for (size_t d = 0; layout && d < ndim; ++d) {
    Store(&r[kShape + d], static_cast<uint64_t>(entry.shape[d]));
    Store(&r[kStrides + d], static_cast<uint64_t>(entry.strides[d]));
  }
  // Every word of the name and the segment, zeros past their ends: nothing of an earlier
  // record's name stays readable.
  uint64_t name[kNameWords] = {};
  const size_t length = entry.version == 0 ? 0 : std::min(entry.name.size(), kMaxNameBytes);
  std::memcpy(name, entry.name.data(), length);
  Store(&r[kNameLength], length);
  for (size_t w = 0; w < kNameWords; ++w) Store(&r[kName + w], name[w]);
  uint64_t segment[kSegmentNameWords] = {};
  const size_t segment_length = layout ? entry.segment.size() : 0;
  std::memcpy(segment, entry.segment.data(), segment_length);
  Store(&r[kSegment], segment_length);
  for (size_t w = 0; w < kSegmentNameWords; ++w) Store(&r[kSegmentName + w], segment[w]);
  Store(&r[kSeq], seq + 2, __ATOMIC_SEQ_CST);  // even: done
  auto* header = reinterpret_cast<uint64_t*>(base_);
  __atomic_fetch_add(&header[kChangesWord], 1, __ATOMIC_SEQ_CST);
}

absl::Status DirectoryWriter::Publish(const DirectoryEntry& entry) {
  if (auto it = index_.find(entry.name); it != index_.end()) {
    uses_[it->second].live = true;
    Write(it->second, entry);
    return absl::OkStatus();
  }
  const uint32_t mask = static_cast<uint32_t>(uses_.size() - 1);
  const uint64_t start = DirectoryHash(entry.name);
  for (uint32_t probe = 0; probe < kMaxProbes && probe < uses_.size(); ++probe) {
    const uint32_t index = static_cast<uint32_t>((start + probe) & mask);
    Use& use = uses_[index];
    if (use.live) continue;
    if (!use.name.empty()) index_.erase(use.name);  // a tombstone given to another name
    use = Use{entry.name, true};
    index_[entry.name] = index;
    Write(index, entry);
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat("directory: no record free for '", entry.name,
                                                   "' within ", kMaxProbes, " probes"));
}

void DirectoryWriter::Unpublish(absl::string_view name) {
  auto it = index_.find(name);
  if (it == index_.end() || !uses_[it->second].live) return;
  uses_[it->second].live = false;
  DirectoryEntry tombstone;
  tombstone.name = std::string(name);
  Write(it->second, tombstone);
}

void DirectoryWriter::SetOverflow(bool overflow) {
  auto* header = reinterpret_cast<uint64_t*>(base_);
  Store(&header[kOverflowWord], overflow ? 1 : 0, __ATOMIC_SEQ_CST);
}

// ---- a process's side

absl::Status DirectoryReader::Check(const void* base, size_t bytes) {
  if (bytes < kDirectoryHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("directory: ", bytes, " bytes, less than its header"));
  }
  const auto* header = static_cast<const uint64_t*>(base);
  if (Load(&header[kMagicWord], __ATOMIC_ACQUIRE) != kDirectoryMagic) {
    return absl::InvalidArgumentError("directory: not a directory of this layout (magic)");
  }
  const uint64_t shape = Load(&header[kShapeWord]);
  const uint64_t records = shape & 0xffffffffu;
  if (!IsPowerOfTwo(records) || (shape >> 32) != kRecordBytes ||
      DirectoryBytes(static_cast<uint32_t>(records)) > bytes) {
    return absl::InvalidArgumentError(absl::StrCat("directory: ", records, " records of ",
                                                   shape >> 32, " bytes do not fit ", bytes));
  }
  return absl::OkStatus();
}

DirectoryReader::DirectoryReader(const void* base)
    : base_(static_cast<const uint8_t*>(base)),
      records_(static_cast<uint32_t>(Load(&static_cast<const uint64_t*>(base)[kShapeWord]) &
                                     0xffffffffu)) {}

bool DirectoryReader::ReadRecord(uint32_t index, uint64_t* name_hash, Found* found) const {
  const auto* r = reinterpret_cast<const uint64_t*>(base_ + kDirectoryHeaderBytes +
                                                    size_t{index} * kRecordBytes);
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t seq = Load(&r[kSeq], __ATOMIC_ACQUIRE);
    if (seq % 2 == 1) continue;  // being written
    DirectoryEntry& e = found->entry;
    *name_hash = Load(&r[kHash]);
    e.version = Load(&r[kVersion]);
    e.object = Load(&r[kObject]);
    const uint64_t segment_length = std::min<uint64_t>(Load(&r[kSegment]), kMaxSegmentNameBytes);
    e.offset = Load(&r[kOffset]);
    e.nbytes = Load(&r[kNbytes]);
    const uint64_t owner = Load(&r[kOwner]);
    const uint64_t type = Load(&r[kTypeAndDims]);
    const uint64_t length = std::min<uint64_t>(Load(&r[kNameLength]), kMaxNameBytes);
    const size_t ndim = std::min<size_t>((type >> 32) & 0xffff, kRecordDims);
    uint64_t dims[2 * kRecordDims];
    for (size_t d = 0; d < ndim; ++d) {
      dims[d] = Load(&r[kShape + d]);
      dims[kRecordDims + d] = Load(&r[kStrides + d]);
    }
    uint64_t name[kNameWords];
    for (size_t w = 0; w < (length + 7) / 8; ++w) name[w] = Load(&r[kName + w]);
    uint64_t segment[kSegmentNameWords];
    for (size_t w = 0; w < (segment_length + 7) / 8; ++w) {
      segment[w] = Load(&r[kSegmentName + w]);
    }
    if (Load(&r[kSeq]) != seq) continue;  // torn: read again
    e.dtype = DLDataType{static_cast<uint8_t>(type), static_cast<uint8_t>(type >> 8),
                         static_cast<uint16_t>(type >> 16)};
    e.has_layout = ((type >> 48) & 1) != 0;
    e.owner_uid = static_cast<uint32_t>(owner);
    e.ephemeral = ((owner >> 32) & 1) != 0;
    e.shape.assign(dims, dims + ndim);
    e.strides.assign(dims + kRecordDims, dims + kRecordDims + ndim);
    e.name.assign(reinterpret_cast<const char*>(name), length);
    e.segment.assign(reinterpret_cast<const char*>(segment), segment_length);
    found->sequence = seq;
    found->index = index;
    return true;
  }
  return false;
}

DirectoryReader::Found DirectoryReader::Find(absl::string_view name) const {
  const auto* header = reinterpret_cast<const uint64_t*>(base_);
  const bool overflow = Load(&header[kOverflowWord], __ATOMIC_ACQUIRE) != 0;
  const uint64_t start = DirectoryHash(name);
  const uint32_t mask = records_ - 1;
  Found found;
  for (uint32_t probe = 0; probe < kMaxProbes && probe < records_; ++probe) {
    const uint32_t index = static_cast<uint32_t>((start + probe) & mask);
    uint64_t name_hash = 0;
    if (!ReadRecord(index, &name_hash, &found)) return Found{};  // kept changing: ask
    if (name_hash == 0) {
      found.lookup = overflow ? Lookup::kUnknown : Lookup::kAbsent;
      return found;
    }
    if (name_hash == start && found.entry.name == name) {
      found.lookup = Lookup::kFound;
      return found;
    }
  }
  return Found{};  // a chain longer than a read looks: ask the daemon
}

std::optional<bool> DirectoryReader::Matches(uint32_t index, uint64_t hash, absl::string_view name,
                                             bool* empty, uint64_t* version) const {
  const auto* r = reinterpret_cast<const uint64_t*>(base_ + kDirectoryHeaderBytes +
                                                    size_t{index} * kRecordBytes);
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t seq = Load(&r[kSeq], __ATOMIC_ACQUIRE);
    if (seq % 2 == 1) continue;  // being written
    const uint64_t record_hash = Load(&r[kHash]);
    *version = Load(&r[kVersion]);
    bool same = record_hash == hash && Load(&r[kNameLength]) == name.size();
    for (size_t w = 0; same && w < (name.size() + 7) / 8; ++w) {
      uint64_t mine = 0;
      std::memcpy(&mine, name.data() + 8 * w, std::min<size_t>(8, name.size() - 8 * w));
      same = Load(&r[kName + w]) == mine;
    }
    if (Load(&r[kSeq]) != seq) continue;  // torn: read again
    *empty = record_hash == 0;
    return same;
  }
  return std::nullopt;
}

DirectoryReader::Version DirectoryReader::VersionOf(absl::string_view name) const {
  if (name.size() > kMaxNameBytes) return Version{};
  const auto* header = reinterpret_cast<const uint64_t*>(base_);
  const bool overflow = Load(&header[kOverflowWord], __ATOMIC_ACQUIRE) != 0;
  const uint64_t start = DirectoryHash(name);
  const uint32_t mask = records_ - 1;
  for (uint32_t probe = 0; probe < kMaxProbes && probe < records_; ++probe) {
    bool empty = false;
    uint64_t version = 0;
    const std::optional<bool> same =
        Matches(static_cast<uint32_t>((start + probe) & mask), start, name, &empty, &version);
    if (!same.has_value()) return Version{};  // kept changing: ask
    if (*same) return Version{Lookup::kFound, version};
    if (empty) return Version{overflow ? Lookup::kUnknown : Lookup::kAbsent, 0};
  }
  return Version{};
}

uint64_t DirectoryReader::SequenceOf(uint32_t index) const {
  const auto* r = reinterpret_cast<const uint64_t*>(base_ + kDirectoryHeaderBytes +
                                                    size_t{index} * kRecordBytes);
  return Load(&r[kSeq], __ATOMIC_SEQ_CST);
}

uint64_t DirectoryReader::Changes() const {
  return Load(&reinterpret_cast<const uint64_t*>(base_)[kChangesWord], __ATOMIC_ACQUIRE);
}

}  // namespace tensorbroker
