// Unit tests of the CLI's JSON writer (cli/json_writer.h).
#include "cli/json_writer.h"

#include "gtest/gtest.h"

namespace tensorbroker::cli {
namespace {

TEST(JsonQuoteTest, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonQuote("plain/name-1.x"), "\"plain/name-1.x\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("\n\t\r\b\f"), "\"\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(JsonQuote(std::string("\0", 1)), "\"\\u0000\"");
  EXPECT_EQ(JsonQuote("gr\xc3\xbc\xc3\x9f \xe2\x82\xac"), "\"gr\xc3\xbc\xc3\x9f \xe2\x82\xac\"");
  // Invalid UTF-8 (lone continuation byte, truncated sequence, overlong) becomes U+FFFD.
  EXPECT_EQ(JsonQuote("\x80"), "\"\\ufffd\"");
  EXPECT_EQ(JsonQuote("\xe2\x82"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
}

TEST(JsonWriterTest, NestsAndPlacesCommas) {
  JsonWriter json;
  json.BeginArray();
  json.BeginObject().Key("a").Int(-1).Key("b").IntArray({1, 2}).Key("c").Bool(true).EndObject();
  json.BeginObject().EndObject();
  json.String("x").UInt(18446744073709551615u).IntArray({});
  json.EndArray();
  EXPECT_EQ(json.str(),
            "[{\"a\": -1, \"b\": [1, 2], \"c\": true}, {}, \"x\", 18446744073709551615, []]");
}

}  // namespace
}  // namespace tensorbroker::cli
