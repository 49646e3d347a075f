// The store's reports on the wire (daemon/wire/store_proto.h), read back as the client reads
// them (common/wire/proto_convert.h): every field of a view, every kind of event. The counters of
// StoreStats are checked row by row in tests/unit/common/stats_schema_test.cc.
#include "daemon/wire/store_proto.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "common/wire/proto_convert.h"
#include "tensorbroker/types.h"

namespace tensorbroker::daemon {
namespace {

TensorView SampleView() {
  TensorView view;
  view.name = "a/b";
  view.dtype = DLDataType{kDLFloat, 32, 1};
  view.shape = {2, 3};
  view.strides = {3, 1};
  view.nbytes = 24;
  view.sealed = true;
  view.is_mutable = true;
  view.version = 7;
  view.leases = 2;
  view.created_unix_ms = 1234;
  view.owner_uid = 1000;
  view.readers = {"uid:1001", "gid:50"};
  view.keep = 3;
  view.kept_versions = {5, 7};
  view.ephemeral = true;
  return view;
}

TEST(StoreProto, ATensorViewReadsBackFieldForField) {
  const TensorView view = SampleView();
  v1::TensorInfo proto;
  ToProto(view, &proto);
  const TensorInfo back = FromProto(proto);
  EXPECT_EQ(back.name, view.name);
  EXPECT_EQ(back.dtype.code, view.dtype.code);
  EXPECT_EQ(back.dtype.bits, view.dtype.bits);
  EXPECT_EQ(back.dtype.lanes, view.dtype.lanes);
  EXPECT_EQ(back.shape, view.shape);
  EXPECT_EQ(back.strides, view.strides);
  EXPECT_EQ(back.nbytes, view.nbytes);
  EXPECT_EQ(back.device.device_type, kDLCPU);
  EXPECT_EQ(back.sealed, view.sealed);
  EXPECT_EQ(back.is_mutable, view.is_mutable);
  EXPECT_EQ(back.version, view.version);
  EXPECT_EQ(back.leases, view.leases);
  EXPECT_EQ(back.created_unix_ms, view.created_unix_ms);
  EXPECT_EQ(back.owner_uid, view.owner_uid);
  EXPECT_EQ(back.readers, view.readers);
  EXPECT_EQ(back.keep, view.keep);
  EXPECT_EQ(back.kept_versions, view.kept_versions);
  EXPECT_EQ(back.ephemeral, view.ephemeral);
}

TEST(StoreProto, EveryEventKindReadsBackAsItself) {
  const std::vector<std::pair<StoreEvent::Kind, WatchEvent::Kind>> kinds = {
      {StoreEvent::Kind::kPublished, WatchEvent::Kind::kPublished},
      {StoreEvent::Kind::kReplaced, WatchEvent::Kind::kReplaced},
      {StoreEvent::Kind::kDeleted, WatchEvent::Kind::kDeleted},
      {StoreEvent::Kind::kExpired, WatchEvent::Kind::kExpired},
  };
  for (const auto& [kind, expected] : kinds) {
    StoreEvent event;
    event.kind = kind;
    event.sequence = 9;
    event.name = "a/b";
    event.version = 7;
    event.previous_version = 5;
    event.info = SampleView();
    v1::WatchEvent proto;
    ToProto(event, &proto);
    const WatchEvent back = FromProto(proto);
    EXPECT_EQ(back.kind, expected);
    EXPECT_EQ(back.sequence, 9u);
    EXPECT_EQ(back.name, "a/b");
    EXPECT_EQ(back.version, 7u);
    EXPECT_EQ(back.previous_version, 5u);
    EXPECT_EQ(back.info.name, "a/b");
    EXPECT_EQ(back.info.version, 7u);
  }
}

TEST(StoreProto, ALostEventCarriesItsRangeAndNoInfo) {
  StoreEvent lost;
  lost.kind = StoreEvent::Kind::kLost;
  lost.sequence = 20;
  lost.lost_first = 11;
  lost.lost_last = 20;
  v1::WatchEvent proto;
  ToProto(lost, &proto);
  EXPECT_FALSE(proto.has_info());
  const WatchEvent back = FromProto(proto);
  EXPECT_EQ(back.kind, WatchEvent::Kind::kLost);
  EXPECT_EQ(back.lost_first, 11u);
  EXPECT_EQ(back.lost_last, 20u);
}

}  // namespace
}  // namespace tensorbroker::daemon
