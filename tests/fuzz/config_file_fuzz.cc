// Feeds: the bytes as tensorbrokerd's config file to ParseConfigText (daemon/app/config_file.h),
// then its settings to ResolveSettings and FormatConfig (daemon/app/daemon_options.h), as the
// daemon's LoadDaemonOptions and --print-config do.
// Asserts, where the file parses: every setting's key is non-empty, and neither key nor value
// holds '#', a line break or surrounding whitespace; keys are unique; origins name the lines in
// order. Where the settings resolve too: --print-config's text is a config file that parses and
// resolves to the very same text again (what it prints can be used as the file).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/app/config_file.h"
#include "daemon/app/daemon_options.h"
#include "daemon/base/log.h"
#include "tests/fuzz/fuzz_support.h"

namespace tensorbroker::daemon {
namespace {

constexpr uint64_t kDefaultCapacity = uint64_t{1} << 30;
const std::string kPath = "fuzz.conf";

bool Clean(const std::string& text) {
  return text.find_first_of("#\n") == std::string::npos && absl::StripAsciiWhitespace(text) == text;
}

void CheckSettings(const std::vector<Setting>& settings) {
  std::set<std::string> keys;
  int last_line = 0;
  for (const Setting& setting : settings) {
    FUZZ_CHECK(
        !setting.key.empty() && Clean(setting.key) && setting.key.find('=') == std::string::npos,
        "key '%s'", setting.key.c_str());
    FUZZ_CHECK(Clean(setting.value), "value '%s'", setting.value.c_str());
    FUZZ_CHECK(keys.insert(setting.key).second, "key '%s' twice", setting.key.c_str());
    int line = 0;
    FUZZ_CHECK(setting.origin.rfind(kPath + ":", 0) == 0 &&
                   absl::SimpleAtoi(setting.origin.substr(kPath.size() + 1), &line) &&
                   line > last_line,
               "origin '%s'", setting.origin.c_str());
    last_line = line;
  }
}

void CheckPrintedConfig(const DaemonOptions& options) {
  const std::string printed = FormatConfig(options);
  auto settings = ParseConfigText(printed, "printed");
  FUZZ_CHECK(settings.ok(), "--print-config output does not parse: %s\n%s",
             std::string(settings.status().message()).c_str(), printed.c_str());
  auto again = ResolveSettings(*settings, kDefaultCapacity);
  FUZZ_CHECK(again.ok(), "--print-config output does not resolve: %s\n%s",
             std::string(again.status().message()).c_str(), printed.c_str());
  const std::string reprinted = FormatConfig(*again);
  FUZZ_CHECK(reprinted == printed, "--print-config output changes when read back:\n%s\n---\n%s",
             printed.c_str(), reprinted.c_str());
}

}  // namespace
}  // namespace tensorbroker::daemon

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tensorbroker::daemon::SetLogLevel(tensorbroker::daemon::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorbroker::daemon;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto settings = ParseConfigText(text, kPath);
  if (!settings.ok()) return 0;
  CheckSettings(*settings);
  auto options = ResolveSettings(*settings, kDefaultCapacity);
  if (options.ok()) CheckPrintedConfig(*options);
  return 0;
}
