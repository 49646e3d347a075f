// The `tensorbroker` tool's help texts, one per command and the overview. Constants only.
#ifndef TENSORBROKER_CLI_HELP_TEXTS_H_
#define TENSORBROKER_CLI_HELP_TEXTS_H_

#include "absl/strings/string_view.h"

namespace tensorbroker::cli::help {

extern const absl::string_view kOverview;
extern const absl::string_view kWatchHelp;
extern const absl::string_view kLsHelp;
extern const absl::string_view kStatHelp;
extern const absl::string_view kPutHelp;
extern const absl::string_view kGetHelp;
extern const absl::string_view kRmHelp;
extern const absl::string_view kStatsHelp;
extern const absl::string_view kHealthHelp;
extern const absl::string_view kHelpHelp;

}  // namespace tensorbroker::cli::help

#endif  // TENSORBROKER_CLI_HELP_TEXTS_H_
