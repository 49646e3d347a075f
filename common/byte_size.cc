#include "common/byte_size.h"

#include <cctype>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensorbroker {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, absl::string_view field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", text.substr(0, 64), "' is not a size (examples: 1048576, 512M, 4G, 1.5GiB)"));
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return bad();
  absl::string_view number = s.substr(0, digits);
  std::string suffix = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(s.substr(digits)));
  if (suffix.size() > 1 && (suffix.back() == 'B')) suffix.pop_back();
  if (suffix.size() > 1 && (suffix.back() == 'I')) suffix.pop_back();
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (suffix == "T") {
    shift = 40;
  } else {
    return bad();
  }
  if (number.find('.') == absl::string_view::npos) {
    uint64_t value = 0;
    if (!absl::SimpleAtoi(number, &value)) return bad();
    if (shift > 0 && value > (UINT64_MAX >> shift)) return bad();
    return value << shift;
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value)) return bad();
  const double bytes = std::ldexp(value, shift);
  if (bytes >= 1.8e19) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string FormatByteSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace tensorbroker
