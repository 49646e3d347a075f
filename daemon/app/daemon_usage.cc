// tensorbrokerd's --help text: the synopsis and a paragraph per flag from the key table
// (option_keys.h), then the command line's own flags. Pure; thread-safe.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/app/daemon_options.h"
#include "daemon/app/option_keys.h"

namespace tensorbroker::daemon {
namespace {

constexpr size_t kHelpColumn = 21;     // where the help of a flag starts
constexpr size_t kSynopsisWidth = 86;  // the synopsis wraps before this column

// "Usage: tensorbrokerd [--socket PATH] ...", every key's flag and then the modes, wrapped.
std::string Synopsis() {
  std::vector<std::string> items;
  for (const OptionKey& key : OptionKeys()) {
    items.push_back(absl::StrCat("[--", key.key, " ", key.value_name, "]"));
  }
  for (const char* mode : {"[--config PATH]", "[--print-config]", "[--takeover]"}) {
    items.emplace_back(mode);
  }
  std::string text = "Usage: tensorbrokerd";
  size_t line_start = 0;
  for (const std::string& item : items) {
    if (text.size() - line_start + 1 + item.size() > kSynopsisWidth) {
      text += "\n";
      line_start = text.size();
      text += std::string(kHelpColumn - 2, ' ');
    }
    absl::StrAppend(&text, " ", item);
  }
  return text + "\n";
}

// "  --capacity SIZE    Most shared memory...", its lines aligned at kHelpColumn.
std::string KeyHelp(const OptionKey& key) {
  std::string help(key.help);
  if (key.now != nullptr) help = absl::StrReplaceAll(help, {{"{now}", key.now()}});
  std::string text = absl::StrCat("  --", key.key, " ", key.value_name);
  if (text.size() + 1 > kHelpColumn) {
    text += "\n";
    text += std::string(kHelpColumn, ' ');
  } else {
    text += std::string(kHelpColumn - text.size(), ' ');
  }
  text += absl::StrReplaceAll(help, {{"\n", "\n" + std::string(kHelpColumn, ' ')}});
  return text + "\n";
}

}  // namespace

std::string DaemonUsage() {
  std::string text = absl::StrCat(
      Synopsis(),
      "\n"
      "tensorbrokerd owns shared memory and publishes tensors by name over a gRPC API\n"
      "(tensorbroker.v1.Broker) on a Unix socket. Clients get DLPack tensors that point at\n"
      "the very same pages; memory is freed when no name and no lease refers to it.\n"
      "\n");
  for (const OptionKey& key : OptionKeys()) text += KeyHelp(key);
  return absl::StrCat(
      text, "  --config PATH      Read settings from PATH first (default: ", kDefaultConfigPath,
      "\n"
      "                     when it exists): `key = value` lines with the flags' names as\n"
      "                     keys, plus readers[PREFIX], publishers[PREFIX],\n"
      "                     quota-bytes[USER], quota-tensors[USER] and\n"
      "                     remote[PREFIX] = HOST:PORT (names under PREFIX are\n"
      "                     fetched from the brokers there: needs the tls-* keys);\n"
      "                     `#` comments.\n"
      "                     Flags override the file. SIGHUP re-reads it:\n"
      "                     log-level changes at once, the others at the next start.\n"
      "  --print-config     Print the effective settings in the file's format and exit.\n"
      "  --takeover         Take over from the daemon running on --socket, without\n"
      "                     systemd: it hands this one its tensors (CPU), its sockets and\n"
      "                     its lock over the local channel and exits; clients reconnect\n"
      "                     on their own and new ones wait in the socket's backlog meanwhile.\n"
      "                     Same user as the running daemon, or root.\n"
      "  --help             Show this text.\n"
      "\n"
      "SIGTERM or SIGINT: stop accepting, finish in-flight calls, remove every segment and\n"
      "the socket, exit 0.\n");
}

}  // namespace tensorbroker::daemon
