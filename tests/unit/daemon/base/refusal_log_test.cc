// RefusalLog: the first refusal of a key is logged at once, the ones after it within the
// interval only counted (the next line says how many); keys are bounded however many a flood
// makes up.
#include "daemon/base/refusal_log.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

TEST(RefusalLogTest, OneLinePerKeyPerInterval) {
  RefusalLog refusals("peers", absl::Hours(1));
  EXPECT_TRUE(refusals.Note("broker-x\nCreate", "peer broker-x called Create", "call(s)", "a"));
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(refusals.Note("broker-x\nCreate", "peer broker-x called Create", "call(s)", "b"));
  }
  // Another method, another peer: lines of their own.
  EXPECT_TRUE(refusals.Note("broker-x\nDelete", "peer broker-x called Delete", "call(s)", "c"));
  EXPECT_TRUE(refusals.Note("broker-y\nCreate", "peer broker-y called Create", "call(s)", "d"));
}

TEST(RefusalLogTest, AKeyLogsAgainOnceItsIntervalIsOver) {
  RefusalLog refusals("socket", absl::ZeroDuration());
  EXPECT_TRUE(refusals.Note("", "full", "connection(s)", "of uid 1"));
  EXPECT_TRUE(refusals.Note("", "full", "connection(s)", "of uid 2"));
}

TEST(RefusalLogTest, AFloodOfKeysSharesOneLineOnceTheTableIsFull) {
  RefusalLog refusals("peers", absl::Hours(1));
  for (size_t i = 0; i < kMaxRefusalKeys; ++i) {
    EXPECT_TRUE(refusals.Note(absl::StrCat("peer-", i), "refused", "call(s)", "x")) << i;
  }
  EXPECT_TRUE(refusals.Note("one more", "refused", "call(s)", "x"));  // "(other keys)"
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(refusals.Note(absl::StrCat("yet another ", i), "refused", "call(s)", "x"));
  }
  EXPECT_FALSE(refusals.Note("peer-0", "refused", "call(s)", "x"));  // its own key still
}

}  // namespace
}  // namespace tensorbroker::daemon
