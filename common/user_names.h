// Users by name and by uid, for messages and settings that name the user a broker runs as.
// Reads the password database (getpwnam_r/getpwuid_r: /etc/passwd, NSS); thread-safe.
//
//   DescribeUid(65534)             -> "uid 65534 (nobody)"
//   DescribeUid(4242)              -> "uid 4242" (no such user)
//   ParseUser("tensorbroker")      -> 995, ParseUser("2470") -> 2470
#ifndef TENSORBROKER_COMMON_USER_NAMES_H_
#define TENSORBROKER_COMMON_USER_NAMES_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorbroker {

// The user's name, or nothing when the database has no entry for `uid`.
std::optional<std::string> UserName(uid_t uid);
// The uid of the user called `name`, or nothing when there is none.
std::optional<uid_t> UidOfUser(const std::string& name);

// "uid N (name)", or "uid N" when the uid has no name.
std::string DescribeUid(uid_t uid);

// A user given by name, or by number ("2470", for a uid without a name here, as in a container
// image that does not know the broker's user). INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<uid_t> ParseUser(const std::string& text, absl::string_view field);

}  // namespace tensorbroker

#endif  // TENSORBROKER_COMMON_USER_NAMES_H_
