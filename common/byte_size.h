// Human byte sizes: "512M", "4G", "1.5GiB", "1048576". Powers of 1024. Pure functions.
#ifndef TENSORBROKER_COMMON_BYTE_SIZE_H_
#define TENSORBROKER_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace tensorbroker {

// Accepts plain bytes or a number with a K/M/G/T suffix (optionally followed by "i", "B" or
// "iB"); INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, absl::string_view field);
// "1.5 GiB", "512 B".
std::string FormatByteSize(uint64_t bytes);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_BYTE_SIZE_H_
