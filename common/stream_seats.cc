#include "common/stream_seats.h"

#include "absl/strings/str_cat.h"

namespace tensorbroker {

std::string SeatPrefix(absl::string_view ring) { return absl::StrCat(ring, kSeatInfix); }

std::optional<std::string> RingOfSeat(absl::string_view name) {
  const size_t at = name.rfind(kSeatInfix);
  if (at == absl::string_view::npos) return std::nullopt;
  return std::string(name.substr(0, at));
}

}  // namespace tensorbroker
