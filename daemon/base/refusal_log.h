// Warnings for refusals that a flood could repeat thousands of times a second (connections
// over a limit, calls a peer may not make): one line per key (who and why) per interval,
// saying how many were refused since that key's last line and who was refused last. The first
// refusal of a key is logged at once; the ones after it within the interval only counted.
//
//   RefusalLog refusals("peers");
//   refusals.Note(absl::StrCat(peer, "\n", method), "peer broker-x called Create: refused",
//                 "call(s)", "from ipv4:10.0.0.7:5555");
//   // <4>peers: peer broker-x called Create: refused: refused 1 call(s), the last from ...
//
// Memory: at most kMaxRefusalKeys keys (the ones idle longest are forgotten first; past that,
// keys share one line, "(other keys)"). Thread-safe.
#ifndef TENSORBROKER_DAEMON_BASE_REFUSAL_LOG_H_
#define TENSORBROKER_DAEMON_BASE_REFUSAL_LOG_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

inline constexpr size_t kMaxRefusalKeys = 1024;

class RefusalLog {
 public:
  // `what` starts every line (the socket or service); one line per key per `interval`.
  explicit RefusalLog(std::string what, absl::Duration interval = absl::Seconds(10));

  // One refusal under `key`: logged now (`why`, the count since the key's last line, `noun`
  // counted, `last` said of this one) when the key's last line is `interval` old, else counted.
  // Returns whether it logged.
  bool Note(absl::string_view key, absl::string_view why, absl::string_view noun,
            absl::string_view last);

 private:
  struct Key {
    absl::Time last_logged = absl::InfinitePast();
    uint64_t since_logged = 0;
  };
  // The entry of `key`, made room for when the table is full.
  Key& EntryLocked(absl::string_view key, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string what_;
  const absl::Duration interval_;
  Mutex mu_;
  std::map<std::string, Key, std::less<>> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_BASE_REFUSAL_LOG_H_
