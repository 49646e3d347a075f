// A test whose process has a service manager: $NOTIFY_SOCKET names a ServiceManagerHarness
// (tests/support/service_manager_harness.h) for the length of each test.
#ifndef TENSORBROKER_TESTS_UNIT_SERVICE_MANAGER_FIXTURE_H_
#define TENSORBROKER_TESTS_UNIT_SERVICE_MANAGER_FIXTURE_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>

#include "tests/support/service_manager_harness.h"

namespace tensorbroker::testing {

class WithServiceManager : public ::testing::Test {
 protected:
  void SetUp() override {
    auto harness = ServiceManagerHarness::CreateInTemporaryDirectory();
    ASSERT_TRUE(harness.ok()) << harness.status();
    harness_ = std::move(*harness);
    ::setenv("NOTIFY_SOCKET", harness_->notify_socket().c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("NOTIFY_SOCKET");
    harness_.reset();
  }

  std::unique_ptr<ServiceManagerHarness> harness_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_UNIT_SERVICE_MANAGER_FIXTURE_H_
