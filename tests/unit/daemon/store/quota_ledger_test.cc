// QuotaLedger: usage against quotas, Stats' rows, and the per-uid most of streams.
#include "daemon/store/quota_ledger.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace tensorbroker::daemon {
namespace {

QuotaLedger::StreamLimits Limits() { return {2, 1}; }

Quota QuotaOf(uint32_t uid) {
  Quota quota;
  if (uid == 1000) {
    quota.bytes = 100;
    quota.tensors = 2;
  }
  return quota;
}

TEST(QuotaLedger, ChargeRefundAndRoom) {
  QuotaLedger ledger(QuotaOf, Limits());
  EXPECT_TRUE(ledger.CheckRoom(1000, "a", 100).ok());
  ledger.Charge(1000, 60);
  EXPECT_EQ(ledger.UsageOf(1000).bytes, 60u);
  EXPECT_EQ(ledger.UsageOf(1000).tensors, 1u);
  EXPECT_TRUE(ledger.CheckRoom(1000, "b", 40).ok());
  EXPECT_EQ(ledger.CheckRoom(1000, "b", 41),
            absl::ResourceExhaustedError(absl::StrCat(
                "quota-bytes: name 'b' needs ", FormatByteSize(41), "; ", DescribeUid(1000),
                " holds ", FormatByteSize(60), " in 1 tensor(s) of its quota of ",
                FormatByteSize(100), " (release or delete tensors, or ask for a larger quota)")));
  ledger.Charge(1000, 10);
  EXPECT_EQ(ledger.CheckRoom(1000, "c", 0),
            absl::ResourceExhaustedError(absl::StrCat(
                "quota-tensors: name 'c': ", DescribeUid(1000), " holds ", FormatByteSize(70),
                " in 2 tensor(s), its quota is 2 tensor(s) (release or delete tensors, or ask "
                "for a larger quota)")));
  // Another uid has no quota.
  EXPECT_TRUE(ledger.CheckRoom(1001, "d", uint64_t{1} << 40).ok());
  ledger.Refund(1000, 60);
  EXPECT_EQ(ledger.UsageOf(1000).bytes, 10u);
  EXPECT_EQ(ledger.UsageOf(1000).tensors, 1u);
  EXPECT_TRUE(ledger.CheckRoom(1000, "c", 90).ok());
}

TEST(QuotaLedger, NoQuotasWithoutQuotaFor) {
  QuotaLedger ledger(nullptr, Limits());
  ledger.Charge(1000, 1000);
  EXPECT_TRUE(ledger.CheckRoom(1000, "a", uint64_t{1} << 40).ok());
  const std::vector<StoreStats::User> rows = ledger.Users(Principal{1000, {}, false, {}});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].bytes, 1000u);
  EXPECT_EQ(rows[0].quota_bytes, 0u);
  EXPECT_EQ(rows[0].quota_tensors, 0u);
}

TEST(QuotaLedger, UsersForAnAdministratorAndForOthers) {
  QuotaLedger ledger(QuotaOf, Limits());
  ledger.Charge(1001, 5);
  ledger.Charge(1000, 7);
  ledger.Charge(1000, 8);
  const std::vector<StoreStats::User> all = ledger.Users(Principal{0, {}, true, {}});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].uid, 1000u);
  EXPECT_EQ(all[0].bytes, 15u);
  EXPECT_EQ(all[0].tensors, 2u);
  EXPECT_EQ(all[0].quota_bytes, 100u);
  EXPECT_EQ(all[0].quota_tensors, 2u);
  EXPECT_EQ(all[1].uid, 1001u);
  EXPECT_EQ(all[1].bytes, 5u);
  // One who holds nothing gets its own row, of zeros.
  const std::vector<StoreStats::User> mine = ledger.Users(Principal{1002, {}, false, {}});
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].uid, 1002u);
  EXPECT_EQ(mine[0].bytes, 0u);
  EXPECT_EQ(mine[0].tensors, 0u);
  // Refunded to nothing, a uid leaves the administrator's rows.
  ledger.Refund(1001, 5);
  EXPECT_EQ(ledger.Users(Principal{0, {}, true, {}}).size(), 1u);
}

TEST(QuotaLedger, StreamsPerUid) {
  QuotaLedger ledger(nullptr, Limits());
  using Stream = QuotaLedger::Stream;
  EXPECT_TRUE(ledger.CheckStream(Stream::kRead, 1000).ok());
  ledger.OpenStream(Stream::kRead, 11, 1000);
  ledger.OpenStream(Stream::kRead, 12, 1000);
  EXPECT_EQ(ledger.CheckStream(Stream::kRead, 1000),
            absl::ResourceExhaustedError(
                "reads in progress: uid 1000 has 2 already (the most one user may have)"));
  EXPECT_TRUE(ledger.CheckStream(Stream::kRead, 1001).ok());
  // Kinds are counted apart.
  EXPECT_TRUE(ledger.CheckStream(Stream::kWatch, 1000).ok());
  ledger.OpenStream(Stream::kWatch, 11, 1000);
  EXPECT_EQ(
      ledger.CheckStream(Stream::kWatch, 1000),
      absl::ResourceExhaustedError("watches: uid 1000 has 1 already (the most one user may have)"));
  ledger.CloseStream(Stream::kWatch, 11);
  ledger.CloseStream(Stream::kWatch, 11);  // nothing
  EXPECT_TRUE(ledger.CheckStream(Stream::kWatch, 1000).ok());
  EXPECT_EQ(ledger.CheckStream(Stream::kRead, 1000).code(), absl::StatusCode::kResourceExhausted);
  ledger.CloseStream(Stream::kRead, 12);
  EXPECT_TRUE(ledger.CheckStream(Stream::kRead, 1000).ok());
}

TEST(QuotaLedger, CountInAndCountOff) {
  std::map<uint32_t, size_t> counts;
  EXPECT_TRUE(CountIn(&counts, 7, 1, "things").ok());
  EXPECT_EQ(
      CountIn(&counts, 7, 1, "things"),
      absl::ResourceExhaustedError("things: uid 7 has 1 already (the most one user may have)"));
  EXPECT_EQ(counts, (std::map<uint32_t, size_t>{{7, 1}}));
  CountOff(&counts, 7);
  CountOff(&counts, 8);  // nothing
  EXPECT_TRUE(counts.empty());
}

}  // namespace
}  // namespace tensorbroker::daemon
