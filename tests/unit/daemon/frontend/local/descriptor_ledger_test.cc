#include "daemon/frontend/local/descriptor_ledger.h"

#include <gtest/gtest.h>

namespace tensorbroker::daemon {
namespace {

TEST(DescriptorLedger, AConnectionMaySendUpToItsBoundThenWaits) {
  DescriptorLedger ledger(/*per_connection=*/4, /*per_uid=*/100);
  EXPECT_TRUE(ledger.MaySend(7, 0, 1));
  EXPECT_TRUE(ledger.MaySend(7, 3, 1));
  EXPECT_FALSE(ledger.MaySend(7, 4, 1));
  EXPECT_FALSE(ledger.MaySend(7, 3, 2));
  // A message without descriptors always goes.
  EXPECT_TRUE(ledger.MaySend(7, 4, 0));
}

TEST(DescriptorLedger, AUidAtItsBoundWaitsButAConnectionWithNothingInFlightStillSendsOne) {
  DescriptorLedger ledger(/*per_connection=*/64, /*per_uid=*/10);
  ledger.Charge(7, 10);
  EXPECT_EQ(ledger.InFlight(7), 10u);
  EXPECT_TRUE(ledger.UidAtBound(7, 1));
  EXPECT_FALSE(ledger.MaySend(7, 1, 1));
  EXPECT_TRUE(ledger.MaySend(7, 0, 1));  // no client of the uid is starved by its siblings
  // Another uid is not held back by this one.
  EXPECT_TRUE(ledger.MaySend(8, 5, 1));
  EXPECT_FALSE(ledger.UidAtBound(8, 1));
}

TEST(DescriptorLedger, RefundsFreeTheUidAndAreReportedOnce) {
  DescriptorLedger ledger(64, 10);
  ledger.Charge(7, 6);
  ledger.Charge(8, 2);
  EXPECT_EQ(ledger.InFlightTotal(), 8u);
  ledger.Refund(7, 4);
  EXPECT_EQ(ledger.InFlight(7), 2u);
  EXPECT_TRUE(ledger.has_refunds());
  EXPECT_EQ(ledger.TakeRefunded(), std::set<uid_t>({7}));
  EXPECT_FALSE(ledger.has_refunds());
  // More than was charged refunds what was charged, and nothing of another uid.
  ledger.Refund(7, 100);
  EXPECT_EQ(ledger.InFlight(7), 0u);
  EXPECT_EQ(ledger.InFlight(8), 2u);
  EXPECT_EQ(ledger.InFlightTotal(), 2u);
  // Nothing charged: nothing to report.
  ledger.Refund(9, 3);
  EXPECT_EQ(ledger.TakeRefunded(), std::set<uid_t>({7}));
}

}  // namespace
}  // namespace tensorbroker::daemon
