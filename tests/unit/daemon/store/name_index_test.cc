// NameIndex: publication and kept versions, adoption's checks, and pending names.
#include "daemon/store/name_index.h"

#include <gtest/gtest.h>

#include <map>

namespace tensorbroker::daemon {
namespace {

using Versions = std::map<uint64_t, uint64_t>;

TEST(NameIndex, PublishKeepsVersionsAndTheFirstOwner) {
  NameIndex names;
  EXPECT_EQ(names.Find("a"), nullptr);
  EXPECT_EQ(names.Publish("a", 1000, 1, 5, 50), 0u);  // new name
  const NameIndex::Published* a = names.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->owner_uid, 1000u);
  EXPECT_EQ(a->keep, 1u);
  EXPECT_EQ(a->current(), 50u);
  // A replacement (by an administrator, uid 0) keeps the name's owner and takes its keep.
  EXPECT_EQ(names.Publish("a", 0, 3, 6, 60), 50u);
  EXPECT_EQ(a->owner_uid, 1000u);
  EXPECT_EQ(a->keep, 3u);
  EXPECT_EQ(a->versions, (Versions{{5, 50}, {6, 60}}));
  EXPECT_EQ(a->current(), 60u);
  // Trimming is the store's: the index keeps what it is given until told.
  EXPECT_EQ(names.RemoveVersion("a", 5), 50u);
  EXPECT_EQ(a->versions, (Versions{{6, 60}}));
  EXPECT_EQ(names.published().size(), 1u);
  EXPECT_EQ(names.RemoveVersion("a", 6), 60u);
  EXPECT_NE(names.Find("a"), nullptr);  // until Erase
  names.Erase("a");
  EXPECT_EQ(names.Find("a"), nullptr);
  EXPECT_TRUE(names.published().empty());
}

TEST(NameIndex, PendingNames) {
  NameIndex names;
  EXPECT_FALSE(names.IsPending("a"));
  EXPECT_EQ(names.PendingObject("a"), std::nullopt);
  names.AddPending("a", 7);
  names.Publish("b", 1000, 1, 1, 1);
  names.AddPending("b", 8);  // a replacement on the way: both
  EXPECT_TRUE(names.IsPending("a"));
  EXPECT_EQ(names.PendingObject("b"), 8u);
  EXPECT_NE(names.Find("b"), nullptr);
  EXPECT_EQ(names.pending(), (std::map<std::string, uint64_t>{{"a", 7}, {"b", 8}}));
  names.ErasePending("a");
  names.ErasePending("nope");  // nothing
  EXPECT_EQ(names.pending(), (std::map<std::string, uint64_t>{{"b", 8}}));
}

TEST(NameIndex, Adoption) {
  NameIndex names;
  EXPECT_TRUE(names.MayAdopt("a", 1000, 5));
  names.Adopt("a", 1000, 2, 5, 50);
  EXPECT_FALSE(names.MayAdopt("a", 1000, 5));  // that version is kept already
  EXPECT_FALSE(names.MayAdopt("a", 1001, 4));  // another uid's name
  EXPECT_TRUE(names.MayAdopt("a", 1000, 4));
  // An older version joins without changing the name's keep; a newer one sets it.
  names.Adopt("a", 1000, 9, 4, 40);
  EXPECT_EQ(names.Find("a")->keep, 2u);
  names.Adopt("a", 1000, 3, 7, 70);
  const NameIndex::Published* a = names.Find("a");
  EXPECT_EQ(a->keep, 3u);
  EXPECT_EQ(a->owner_uid, 1000u);
  EXPECT_EQ(a->versions, (Versions{{4, 40}, {5, 50}, {7, 70}}));
  EXPECT_EQ(a->current(), 70u);
  names.AddPending("b", 1);
  EXPECT_FALSE(names.MayAdopt("b", 1000, 1));  // pending
}

}  // namespace
}  // namespace tensorbroker::daemon
