// The names of a stream ring's reader seats (client stream rings, tensorbroker/stream.h): the
// seats of ring `R` are the tensors named `R/.readers/<anything without "/.readers/">`. The
// daemon keeps that namespace for them: only a process that may read `R` can create there, and
// only ephemeral tensors (tensor_store.h). Pure functions; thread-safe.
#ifndef TENSORBROKER_COMMON_STREAM_SEATS_H_
#define TENSORBROKER_COMMON_STREAM_SEATS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tensorbroker {

inline constexpr absl::string_view kSeatInfix = "/.readers/";

// The prefix of ring `ring`'s seats.
std::string SeatPrefix(absl::string_view ring);
// The ring whose seat `name` is (the part before its last "/.readers/"), or nullopt when `name`
// is no seat's.
std::optional<std::string> RingOfSeat(absl::string_view name);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_STREAM_SEATS_H_
