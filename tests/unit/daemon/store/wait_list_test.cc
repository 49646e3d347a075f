// WaitList: ids, the per-uid most, cancellation and answering in id order.
#include "daemon/store/wait_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/store/tensor_store.h"  // TensorGrant, to answer

namespace tensorbroker::daemon {
namespace {

WaitList::Waiter WaiterOf(uint32_t uid, const std::string& session, const std::string& name,
                          std::vector<std::string>* answers = nullptr) {
  WaitList::Waiter waiter;
  waiter.uid = uid;
  waiter.session_id = session;
  waiter.name = name;
  waiter.on_ready = [answers, name](absl::StatusOr<TensorGrant> result) {
    if (answers != nullptr) answers->push_back(name + ":" + result.status().ToString());
  };
  return waiter;
}

TEST(WaitList, IdsAndThePerUidMost) {
  WaitList waits(2);
  auto a = waits.Add(WaiterOf(1000, "s", "x"));
  auto b = waits.Add(WaiterOf(1000, "s", "y"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, 1u);
  EXPECT_EQ(*b, 2u);
  EXPECT_EQ(waits.Add(WaiterOf(1000, "s", "z")).status(),
            absl::ResourceExhaustedError(
                "waiting Gets: uid 1000 has 2 already (the most one user may have)"));
  auto other = waits.Add(WaiterOf(1001, "t", "z"));  // another uid's are its own
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, 3u);  // the refused one took no id
  EXPECT_EQ(waits.size(), 3u);
  EXPECT_EQ(waits.CountForUid(1000), 2u);
  EXPECT_TRUE(waits.Remove(*a));
  EXPECT_FALSE(waits.Remove(*a));
  EXPECT_FALSE(waits.Remove(99));
  EXPECT_EQ(waits.CountForUid(1000), 1u);
  auto again = waits.Add(WaiterOf(1000, "s", "z"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 4u);  // never reused
}

TEST(WaitList, RemoveIfVisitsInIdOrderAndForgetsTheAnswered) {
  WaitList waits(10);
  std::vector<std::string> answers;
  waits.Add(WaiterOf(1000, "s1", "a", &answers)).IgnoreError();
  waits.Add(WaiterOf(1000, "s2", "b", &answers)).IgnoreError();
  waits.Add(WaiterOf(1001, "s1", "c", &answers)).IgnoreError();
  std::vector<std::string> visited;
  std::vector<GetCallback> taken;
  const size_t removed = waits.RemoveIf([&](WaitList::Waiter& waiter) {
    visited.push_back(waiter.name);
    if (waiter.session_id != "s1") return false;
    taken.push_back(std::move(waiter.on_ready));
    return true;
  });
  EXPECT_EQ(removed, 2u);
  EXPECT_EQ(visited, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits.CountForUid(1000), 1u);
  EXPECT_EQ(waits.CountForUid(1001), 0u);
  EXPECT_TRUE(answers.empty());  // the list runs nothing itself
  for (auto& callback : taken) callback(absl::UnavailableError("bye"));
  EXPECT_EQ(answers, (std::vector<std::string>{"a:UNAVAILABLE: bye", "c:UNAVAILABLE: bye"}));
  EXPECT_EQ(waits.RemoveIf([](WaitList::Waiter&) { return true; }), 1u);
  EXPECT_EQ(waits.size(), 0u);
  EXPECT_EQ(waits.CountForUid(1000), 0u);
}

}  // namespace
}  // namespace tensorbroker::daemon
