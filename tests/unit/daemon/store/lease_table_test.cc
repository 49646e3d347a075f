// LeaseTable: ids, ownership checks and per-session reclaim.
#include "daemon/store/lease_table.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

TEST(LeaseTable, AddRemoveAndOwnership) {
  LeaseTable leases;
  const uint64_t a = leases.Add("s1", 10);
  const uint64_t b = leases.Add("s2", 10);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(leases.size(), 2u);
  // Another session's lease reads exactly like an unknown one.
  EXPECT_EQ(
      leases.Remove("s2", a).status(),
      absl::NotFoundError(absl::StrCat("lease_id ", a, " is not a live lease of this session")));
  EXPECT_EQ(leases.ObjectOf("s2", a).status(), leases.Remove("s2", a).status());
  auto object = leases.Remove("s1", a);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(*object, 10u);
  EXPECT_EQ(leases.Remove("s1", a).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(leases.Remove("s1", 999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(leases.size(), 1u);
}

TEST(LeaseTable, RemoveSessionReturnsOneEntryPerLease) {
  LeaseTable leases;
  leases.Add("s1", 1);
  leases.Add("s1", 1);
  leases.Add("s1", 2);
  const uint64_t other = leases.Add("s2", 1);
  EXPECT_EQ(leases.CountForSession("s1"), 3u);
  auto objects = leases.RemoveSession("s1");
  std::sort(objects.begin(), objects.end());
  EXPECT_EQ(objects, (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases.CountForSession("s1"), 0u);
  EXPECT_TRUE(leases.RemoveSession("s1").empty());
  EXPECT_TRUE(leases.Remove("s2", other).ok());
}

TEST(LeaseTable, IdsAreNeverReused) {
  LeaseTable leases;
  const uint64_t first = leases.Add("s", 1);
  ASSERT_TRUE(leases.Remove("s", first).ok());
  EXPECT_GT(leases.Add("s", 1), first);
}

}  // namespace
}  // namespace tensorbroker::daemon
