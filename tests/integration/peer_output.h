// What the peer programs (the second processes the tests exec: test_peer, chaos_peer,
// attack_peer, tests/gpu's cuda_peer) print: one line per step on stdout, flushed at once so the
// test reads it as it comes; "error CODE message" and exit 4 for a failed call; "PROGRAM: why"
// on stderr and exit 2 for bad usage. Stateless.
#ifndef TENSORBROKER_TESTS_INTEGRATION_PEER_OUTPUT_H_
#define TENSORBROKER_TESTS_INTEGRATION_PEER_OUTPUT_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker::testing {

inline void Say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

[[noreturn]] inline void Fail(const absl::Status& status) {
  Say(absl::StrCat("error ", absl::StatusCodeToString(status.code()), " ", status.message()));
  std::exit(4);
}

[[noreturn]] inline void UsageError(const char* program, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program, why.c_str());
  std::exit(2);
}

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_PEER_OUTPUT_H_
