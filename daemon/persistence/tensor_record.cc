#include "daemon/persistence/tensor_record.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/wire/store_proto.h"

namespace tensorbroker::daemon {
namespace {

// What keeps a record as written; F_SEAL_SEAL is added when writing, not required to read.
constexpr int kRecordSeals = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;

absl::Status ErrnoStatus(const char* what) {
  const int error = errno;
  std::string message = absl::StrCat("tensor record: ", what, ": ", std::strerror(error));
  if (error == ENOMEM || error == ENOSPC || error == EMFILE || error == ENFILE) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

}  // namespace

v1::TensorRecord TensorRecordOf(const JournaledTensor& tensor) {
  v1::TensorRecord record;
  ToProto(tensor.view, record.mutable_info());
  record.set_publisher_uid(tensor.publisher_uid);
  record.set_segment(tensor.segment);
  record.set_segment_size(tensor.segment_size);
  record.set_offset(tensor.offset);
  record.set_block_size(tensor.block_size);
  return record;
}

absl::StatusOr<UniqueFd> WriteTensorRecord(v1::TensorRecord record) {
  record.set_format(kTensorRecordFormat);
  const std::string bytes = record.SerializeAsString();
  if (bytes.size() > kMaxTensorRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor record of '", record.info().name(),
                                                   "' takes ", bytes.size(), " bytes (at most ",
                                                   kMaxTensorRecordBytes, ")"));
  }
  UniqueFd fd(::memfd_create("tb-record", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoStatus("memfd_create");
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write");
    written += static_cast<size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, kRecordSeals | F_SEAL_SEAL) != 0)
    return ErrnoStatus("F_ADD_SEALS");
  return fd;
}

absl::StatusOr<v1::TensorRecord> ReadTensorRecord(int fd) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError(absl::StrCat("not a sealable memfd: ", std::strerror(errno)));
  }
  if ((seals & kRecordSeals) != kRecordSeals) {
    return absl::InvalidArgumentError(
        absl::StrCat("not sealed against write, shrink and grow (seals 0x", absl::Hex(seals), ")"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("fstat");
  if (st.st_size <= 0 || static_cast<uint64_t>(st.st_size) > kMaxTensorRecordBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds ", st.st_size, " bytes (1 to ", kMaxTensorRecordBytes, ")"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("pread");
    got += static_cast<size_t>(n);
  }
  v1::TensorRecord record;
  if (!record.ParseFromString(bytes)) {
    return absl::InvalidArgumentError("not a tensor record (does not parse)");
  }
  if (record.format() != kTensorRecordFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record format ", record.format(), " (this daemon reads ", kTensorRecordFormat, ")"));
  }
  return record;
}

}  // namespace tensorbroker::daemon
