// Feeds: the bytes, as the start of a .npy file, to npy::ParseHeader (cli/npy_format.h): the
// first thing `tensorbroker put` parses of a file it is given.
// Asserts, where the header parses: it lies within the bytes, at the offset its version's
// length field says; at most kMaxDims dimensions, none negative; data_nbytes is exactly the
// item size times the dimensions' product (0 when one is 0), recomputed here in 128 bits, and
// at most 2^62; the dtype's descr maps back to it (DescrForDType, DTypeFromDescr); and the
// header BuildHeader writes for the same descr and shape parses back to the same tensor, its
// data aligned to 64 bytes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "cli/npy_format.h"
#include "common/tensor_layout.h"
#include "tests/fuzz/fuzz_support.h"

namespace tensorbroker::npy {
namespace {

bool SameType(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

void CheckHeader(absl::string_view bytes, const NpyHeader& header) {
  FUZZ_CHECK(header.minor_version == 0 && header.major_version >= 1 && header.major_version <= 3,
             "version %d.%d", header.major_version, header.minor_version);
  const uint64_t prefix = header.major_version == 1 ? 10 : 12;
  FUZZ_CHECK(header.data_offset > prefix && header.data_offset <= bytes.size(),
             "data_offset %llu of %zu bytes", static_cast<unsigned long long>(header.data_offset),
             bytes.size());
  uint64_t stated = 0;
  for (uint64_t i = prefix; i-- > 8;) stated = stated << 8 | static_cast<uint8_t>(bytes[i]);
  FUZZ_CHECK(header.data_offset == prefix + stated, "data_offset vs the length field");
  FUZZ_CHECK(header.shape.size() <= kMaxDims, "%zu dimensions", header.shape.size());
  FUZZ_CHECK(ValidateDType(header.dtype).ok(), "dtype of descr %s", header.descr.c_str());

  unsigned __int128 product = ItemSize(header.dtype);
  bool empty = false;
  for (int64_t dim : header.shape) {
    FUZZ_CHECK(dim >= 0, "negative dimension");
    if (dim == 0)
      empty = true;
    else
      product *= static_cast<uint64_t>(dim);
    FUZZ_CHECK(empty || product <= (uint64_t{1} << 62), "size past 2^62 accepted");
  }
  const uint64_t expected = empty ? 0 : static_cast<uint64_t>(product);
  FUZZ_CHECK(header.data_nbytes == expected, "data_nbytes %llu, expected %llu",
             static_cast<unsigned long long>(header.data_nbytes),
             static_cast<unsigned long long>(expected));

  absl::StatusOr<Descr> descr = DescrForDType(header.dtype);
  FUZZ_CHECK(descr.ok() && !descr->raw_void, "no descr for the parsed dtype");
  absl::StatusOr<DLDataType> again = DTypeFromDescr(descr->text);
  FUZZ_CHECK(again.ok() && SameType(*again, header.dtype), "descr %s does not map back",
             descr->text.c_str());

  const std::string built = BuildHeader(descr->text, header.shape);
  absl::StatusOr<NpyHeader> reparsed = ParseHeader(built);
  FUZZ_CHECK(reparsed.ok(), "BuildHeader's own header refused: %s",
             std::string(reparsed.status().message()).c_str());
  FUZZ_CHECK(reparsed->data_offset == built.size() && built.size() % 64 == 0,
             "built header of %zu bytes", built.size());
  FUZZ_CHECK(reparsed->shape == header.shape && SameType(reparsed->dtype, header.dtype) &&
                 !reparsed->fortran_order && reparsed->data_nbytes == header.data_nbytes,
             "round trip through BuildHeader changed the tensor");
}

}  // namespace
}  // namespace tensorbroker::npy

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto header = tensorbroker::npy::ParseHeader(bytes);
  if (header.ok()) tensorbroker::npy::CheckHeader(bytes, *header);
  return 0;
}
