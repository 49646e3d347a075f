// What the hostile peers that report on stderr (flood_peer, table_flood_peer) print, and how
// their tests read it: one fact a line, "WORD rest", written with one write(2) each (a peer may
// be killed at any instant, and reads nothing it need not); "fatal why" and exit 3 when it
// cannot go on. Stateless.
#ifndef TENSORBROKER_TESTS_INTEGRATION_STDERR_REPORT_H_
#define TENSORBROKER_TESTS_INTEGRATION_STDERR_REPORT_H_

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tensorbroker::testing {

// The peer's side.
inline void SayOnStderr(const std::string& line) {
  const std::string text = line + "\n";
  (void)!::write(STDERR_FILENO, text.data(), text.size());
}

[[noreturn]] inline void DieOnStderr(const std::string& why) {
  SayOnStderr("fatal " + why);
  std::exit(3);
}

// The test's side: the report's lines as {first word: rest} (a later line of a word wins).
inline std::map<std::string, std::string> ReportLines(const std::string& text) {
  std::map<std::string, std::string> said;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t space = line.find(' ');
    said[std::string(line.substr(0, space))] =
        space == absl::string_view::npos ? "" : std::string(line.substr(space + 1));
  }
  return said;
}

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_STDERR_REPORT_H_
