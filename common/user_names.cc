#include "common/user_names.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensorbroker {
namespace {

// Calls `lookup(&entry, buffer, size, &result)` (getpwnam_r or getpwuid_r), growing the buffer
// while the entry does not fit; the entry, or nothing when there is none.
template <typename Lookup>
std::optional<passwd> LookUp(Lookup lookup, std::vector<char>* buffer) {
  const long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  buffer->resize(hint > 0 ? static_cast<size_t>(hint) : 1024);
  while (true) {
    passwd entry{};
    passwd* result = nullptr;
    const int error = lookup(&entry, buffer->data(), buffer->size(), &result);
    if (error == ERANGE && buffer->size() < (1u << 20)) {
      buffer->resize(buffer->size() * 2);
      continue;
    }
    if (error != 0 || result == nullptr) return std::nullopt;
    return entry;
  }
}

}  // namespace

std::optional<std::string> UserName(uid_t uid) {
  std::vector<char> buffer;
  auto entry = LookUp(
      [uid](passwd* e, char* b, size_t n, passwd** r) { return ::getpwuid_r(uid, e, b, n, r); },
      &buffer);
  if (!entry.has_value() || entry->pw_name == nullptr) return std::nullopt;
  return std::string(entry->pw_name);
}

std::optional<uid_t> UidOfUser(const std::string& name) {
  std::vector<char> buffer;
  auto entry = LookUp([&name](passwd* e, char* b, size_t n,
                              passwd** r) { return ::getpwnam_r(name.c_str(), e, b, n, r); },
                      &buffer);
  if (!entry.has_value()) return std::nullopt;
  return entry->pw_uid;
}

std::string DescribeUid(uid_t uid) {
  const std::optional<std::string> name = UserName(uid);
  return name.has_value() ? absl::StrCat("uid ", uid, " (", *name, ")") : absl::StrCat("uid ", uid);
}

absl::StatusOr<uid_t> ParseUser(const std::string& text, absl::string_view field) {
  if (std::optional<uid_t> uid = UidOfUser(text); uid.has_value()) return *uid;
  uint32_t number = 0;
  const bool numeric = !text.empty() && text.size() <= 10 &&
                       std::all_of(text.begin(), text.end(), absl::ascii_isdigit) &&
                       absl::SimpleAtoi(text, &number);
  // (uid_t)-1 is "no uid" to chown(2) and friends, never a user.
  if (!numeric || number == static_cast<uint32_t>(-1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", text.substr(0, 64), "' is neither a user name known here nor a uid"));
  }
  return static_cast<uid_t>(number);
}

}  // namespace tensorbroker
