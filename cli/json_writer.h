// A minimal JSON writer for the CLI's --json output: a string escaper and a streaming builder
// that places commas and colons itself. Output is compact, one line, UTF-8 passed through;
// control characters, '"' and '\\' are escaped, and bytes that are not valid UTF-8 become
// U+FFFD so the output always parses. The builder does not check that calls nest correctly:
// callers pair Begin/End themselves. Not thread-safe; one owner.
#ifndef TENSORBROKER_CLI_JSON_WRITER_H_
#define TENSORBROKER_CLI_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tensorbroker::cli {

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The next value is this object member's.
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& UInt(uint64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  JsonWriter& IntArray(const std::vector<int64_t>& values);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();

  std::string out_;
  std::vector<bool> has_items_;  // per open container: something was written into it
  bool after_key_ = false;
};

}  // namespace tensorbroker::cli

#endif  // TENSORBROKER_CLI_JSON_WRITER_H_
