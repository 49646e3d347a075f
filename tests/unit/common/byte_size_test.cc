// ParseByteSize / FormatByteSize: the --capacity syntax.
#include "common/byte_size.h"

#include <gtest/gtest.h>

namespace tensorbroker {
namespace {

TEST(ParseByteSize, AcceptsSuffixesAndPlainBytes) {
  EXPECT_EQ(*ParseByteSize("1048576", "--capacity"), 1048576u);
  EXPECT_EQ(*ParseByteSize("512M", "--capacity"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("4G", "--capacity"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("4g", "--capacity"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("1.5GiB", "--capacity"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("64KB", "--capacity"), 64ull << 10);
  EXPECT_EQ(*ParseByteSize("2T", "--capacity"), 2ull << 40);
  EXPECT_EQ(*ParseByteSize("100B", "--capacity"), 100u);
}

TEST(ParseByteSize, RejectsGarbageNamingTheFlag) {
  for (const char* text :
       {"", "M", "12X", "-5", "1e9", "99999999999999999999", "4GG", "18446744073709551615T"}) {
    auto parsed = ParseByteSize(text, "--capacity");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("--capacity"), std::string::npos);
  }
}

TEST(FormatByteSize, PicksAUnit) {
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatByteSize(4ull << 30), "4.0 GiB");
}

}  // namespace
}  // namespace tensorbroker
