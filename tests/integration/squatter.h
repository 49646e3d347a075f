// Another user squatting a broker's socket path, for identity_test.cc: a forked child of the
// test that becomes uid 65534 (no groups) and listens on `socket_path` (SOCK_STREAM, the gRPC
// socket's kind) and on `socket_path`.fd (SOCK_SEQPACKET, the local channel's) without ever
// answering, in a directory it may write (or makes first, with `make_directory_mode`).
// Stop() has it take every connection that reached it and count the bytes, so a test can say
// exactly what a victim sent. The child is a Subprocess::Fork (tests/support/subprocess.h);
// between fork and _exit it makes only async-signal-safe calls (the test process runs gRPC
// threads). Needs root.
//
// Owns the child: the destructor stops and reaps it. Move-only; not thread-safe.
#ifndef TENSORBROKER_TESTS_INTEGRATION_SQUATTER_H_
#define TENSORBROKER_TESTS_INTEGRATION_SQUATTER_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {

inline constexpr uid_t kSquatterUid = 65534;

// What reached a squatter's two sockets.
struct Catch {
  int stream_connections = 0;
  long stream_bytes = 0;
  int seqpacket_connections = 0;
  long seqpacket_bytes = 0;
};

class Squatter {
 public:
  // Returns once both sockets listen. INTERNAL naming the step the child failed at.
  static absl::StatusOr<Squatter> Start(const std::string& socket_path,
                                        mode_t make_directory_mode = 0);
  Squatter(Squatter&& other) noexcept;
  Squatter& operator=(Squatter&&) = delete;
  Squatter(const Squatter&) = delete;
  Squatter& operator=(const Squatter&) = delete;
  ~Squatter();

  // Everything that reached it until now; the child exits.
  absl::StatusOr<Catch> Stop();

 private:
  Squatter() = default;
  Subprocess process_;  // the child; reaped by Stop()
  UniqueFd ready_;      // the child says 'r' once it listens (or the step it failed at)
  UniqueFd stop_;       // closed by Stop(): the child then counts and answers on result_
  UniqueFd result_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_SQUATTER_H_
