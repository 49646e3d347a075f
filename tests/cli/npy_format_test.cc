// Unit tests of the CLI's .npy parser and writer (cli/npy_format.h, cli/npy_file.h).
#include "cli/npy_format.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <complex>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/npy_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/host_tensor.h"

namespace tensorbroker::npy {
namespace {

using ::tensorbroker::testing::HostTensor;
using ::testing::HasSubstr;

bool SameDType(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// A .npy file with the given version and header dict text (padding and '\n' added) and data.
std::string MakeNpy(int major, std::string dict, absl::string_view data, bool pad = true) {
  const size_t prefix = major == 1 ? 10 : 12;
  if (pad) {
    while ((prefix + dict.size() + 1) % 64 != 0) dict.push_back(' ');
    dict.push_back('\n');
  }
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  uint64_t len = dict.size();
  for (size_t i = 0; i < prefix - 8; ++i) {
    out.push_back(static_cast<char>(len & 0xff));
    len >>= 8;
  }
  return out + dict + std::string(data);
}

std::string Serialize(const DLTensor& tensor, absl::string_view descr) {
  std::string out;
  absl::Status s = WriteNpy(tensor, descr, [&](absl::string_view bytes) {
    out.append(bytes.data(), bytes.size());
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

class TempFile {
 public:
  explicit TempFile(absl::string_view content) {
    path_ = ::testing::TempDir() + "/npy_format_test_XXXXXX";
    const int fd = mkstemp(path_.data());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct DTypeCase {
  DLDataType dtype;
  std::string descr;
};

void PrintTo(const DTypeCase& c, std::ostream* os) { *os << c.descr; }

class RoundTripTest : public ::testing::TestWithParam<DTypeCase> {};

TEST_P(RoundTripTest, WriteThenParseGivesTheSameArray) {
  const DTypeCase& c = GetParam();
  absl::StatusOr<Descr> descr = DescrForDType(c.dtype);
  ASSERT_TRUE(descr.ok()) << descr.status();
  EXPECT_EQ(descr->text, c.descr);
  EXPECT_FALSE(descr->raw_void);

  const size_t item = c.dtype.bits / 8;
  std::vector<int64_t> shape{2, 3};
  std::string data(6 * item, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
  if (c.dtype.code == kDLBool) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 2);
  }
  const std::string file = Serialize(HostTensor(data.data(), shape, c.dtype), descr->text);

  absl::StatusOr<NpyHeader> header = ParseFile(file);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->major_version, 1);
  EXPECT_EQ(header->descr, c.descr);
  EXPECT_TRUE(SameDType(header->dtype, c.dtype));
  EXPECT_FALSE(header->fortran_order);
  EXPECT_EQ(header->shape, shape);
  EXPECT_EQ(header->data_offset % 64, 0u);
  EXPECT_EQ(header->data_nbytes, data.size());
  EXPECT_EQ(file.substr(header->data_offset), data);
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypes, RoundTripTest,
    ::testing::Values(DTypeCase{{kDLBool, 8, 1}, "|b1"}, DTypeCase{{kDLInt, 8, 1}, "|i1"},
                      DTypeCase{{kDLInt, 16, 1}, "<i2"}, DTypeCase{{kDLInt, 32, 1}, "<i4"},
                      DTypeCase{{kDLInt, 64, 1}, "<i8"}, DTypeCase{{kDLUInt, 8, 1}, "|u1"},
                      DTypeCase{{kDLUInt, 16, 1}, "<u2"}, DTypeCase{{kDLUInt, 32, 1}, "<u4"},
                      DTypeCase{{kDLUInt, 64, 1}, "<u8"}, DTypeCase{{kDLFloat, 16, 1}, "<f2"},
                      DTypeCase{{kDLFloat, 32, 1}, "<f4"}, DTypeCase{{kDLFloat, 64, 1}, "<f8"},
                      DTypeCase{{kDLComplex, 64, 1}, "<c8"},
                      DTypeCase{{kDLComplex, 128, 1}, "<c16"}),
    [](const ::testing::TestParamInfo<DTypeCase>& info) {
      std::string name;
      for (char c : info.param.descr) {
        if (std::isalnum(static_cast<unsigned char>(c))) name.push_back(c);
      }
      return name;
    });

TEST(NpyFormatTest, HeaderIsByteIdenticalToNumpys) {
  // What numpy 1.24 np.save writes for np.zeros((2, 3), '<f4') and np.zeros(5, bool).
  const std::string f4 = std::string("\x93NUMPY\x01\x00v\x00", 10) +
                         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                         std::string(58, ' ') + "\n";
  EXPECT_EQ(BuildHeader("<f4", {2, 3}), f4);
  const std::string b1 = std::string("\x93NUMPY\x01\x00v\x00", 10) +
                         "{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }" +
                         std::string(60, ' ') + "\n";
  EXPECT_EQ(BuildHeader("|b1", {5}), b1);
  const std::string scalar = BuildHeader("<f8", {});
  EXPECT_THAT(scalar, HasSubstr("'shape': (), }"));
  EXPECT_EQ(scalar.size() % 64, 0u);
}

TEST(NpyFormatTest, BFloat16AndFloat8AreWrittenAsRawVoid) {
  absl::StatusOr<Descr> bf16 = DescrForDType({kDLBfloat, 16, 1});
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->text, "|V2");
  EXPECT_TRUE(bf16->raw_void);
  absl::StatusOr<Descr> f8 = DescrForDType({10, 8, 1});
  ASSERT_TRUE(f8.ok());
  EXPECT_EQ(f8->text, "|V1");
  EXPECT_TRUE(f8->raw_void);
  // ... and reading such a file is refused with a reason.
  absl::StatusOr<NpyHeader> h = ParseHeader(BuildHeader("|V2", {3}));
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("void"));
  EXPECT_FALSE(DescrForDType({kDLFloat, 8, 1}).ok());
}

TEST(NpyFormatTest, ReadsVersions2And3) {
  const std::string data(24, 'x');
  for (int major : {1, 2, 3}) {
    const std::string file =
        MakeNpy(major, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data);
    absl::StatusOr<NpyHeader> h = ParseFile(file);
    ASSERT_TRUE(h.ok()) << "version " << major << ": " << h.status();
    EXPECT_EQ(h->major_version, major);
    EXPECT_EQ(h->shape, std::vector<int64_t>{3});
    EXPECT_EQ(h->data_offset, file.size() - data.size());
    EXPECT_EQ(h->data_offset % 64, 0u);
    EXPECT_EQ(h->data_nbytes, 24u);
  }
}

TEST(NpyFormatTest, AcceptsHeaderVariants) {
  struct Case {
    std::string dict;
    std::vector<int64_t> shape;
  };
  const Case cases[] = {
      {"{'shape': (2, 1), 'fortran_order': False, 'descr': '<i4'}", {2, 1}},
      {"{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2,1,)}", {2, 1}},
      {"{'descr':'<i4','fortran_order':False,'shape':(2L, 1L),}", {2, 1}},
      {"{ 'descr' : '=i4' ,\n 'fortran_order' : False , 'shape' : ( 2 , 1 ) }", {2, 1}},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': ()}", {}},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (0, 5)}", {0, 5}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<NpyHeader> h = ParseFile(MakeNpy(1, c.dict, std::string(8, '\0')));
    ASSERT_TRUE(h.ok()) << c.dict << ": " << h.status();
    EXPECT_EQ(h->shape, c.shape) << c.dict;
    EXPECT_TRUE(SameDType(h->dtype, {kDLInt, 32, 1})) << c.dict;
  }
  // One-byte types may carry any byte order mark.
  for (absl::string_view descr : {"|u1", "<u1", ">u1", "=u1", "|b1", ">i1"}) {
    EXPECT_TRUE(DTypeFromDescr(descr).ok()) << descr;
  }
}

TEST(NpyFormatTest, MalformedHeadersGiveUsefulErrors) {
  const std::string valid_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data(8, '\0');
  struct Case {
    std::string file;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "magic"},
      {"PK\x03\x04 this is a zip file", "magic"},
      {std::string("\x93NUMPY", 6), "version"},
      {MakeNpy(4, valid_dict, data), "version 4.0"},
      {std::string("\x93NUMPY\x01\x00", 8), "header length"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17), "truncated"},
      {std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12), "at most"},
      {MakeNpy(1, "['descr', '<f4']", data), "'{'"},
      {MakeNpy(1, "{'descr': '<f4', 'shape': (2,)}", data), "no 'fortran_order'"},
      {MakeNpy(1, "{'fortran_order': False, 'shape': (2,)}", data), "no 'descr'"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False}", data), "no 'shape'"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data),
       "unexpected key 'x'"},
      {MakeNpy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data),
       "twice"},
      {MakeNpy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", data), "big-endian"},
      {MakeNpy(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", data), "object"},
      {MakeNpy(1, "{'descr': '<U5', 'fortran_order': False, 'shape': (2,)}", data), "string"},
      {MakeNpy(1, "{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (2,)}", data), "datetime"},
      {MakeNpy(1, "{'descr': '<f3', 'fortran_order': False, 'shape': (2,)}", data), "item size"},
      {MakeNpy(1, "{'descr': '<f', 'fortran_order': False, 'shape': (2,)}", data), "item size"},
      {MakeNpy(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", data), "one-byte"},
      {MakeNpy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", data),
       "structured"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': maybe, 'shape': (2,)}", data),
       "True or False"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", data), "negative"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}", data),
       "not an integer"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", data), "not a tuple"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", data), "tuple"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
               data),
       "too large"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
               data),
       "too many elements"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1073741825)}",
               data),
       "too large in bytes"},
      {MakeNpy(1,
               "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
               "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}",
               data),
       "more than 32 dimensions"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", data),
       "after the closing"},
      {MakeNpy(1, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", data), "descr"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", data), "expected"},
      {MakeNpy(1, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", data), "escape"},
      {MakeNpy(1, valid_dict, std::string(7, '\0')), "truncated"},
      {MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}", data),
       "needs 4000000000000 data bytes but only 8 follow"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<NpyHeader> h = ParseFile(c.file);
    ASSERT_FALSE(h.ok()) << "accepted: " << c.file;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << h.status();
    EXPECT_THAT(h.status().message(), HasSubstr(c.message)) << c.file;
  }
}

// A dimension that does not fit in int64, or a size (dims times item size) that does not fit in
// 2^62 bytes, is refused naming the header field, as NumPy refuses it; it must never wrap (2^64
// read as 0 made an empty array of a file NumPy rejects).
TEST(NpyFormatTest, DimensionsThatOverflowAreRefusedNamingTheField) {
  struct Case {
    std::string shape;
    std::string message;
  };
  const std::vector<Case> cases = {
      // Parse overflow: each of these wrapped (2^64 -> 0, 2^64 + 1 -> 1, 2^65 -> 0) before.
      {"(18446744073709551616,)",
       "header field 'shape': shape[0] = 18446744073709551616 is too large for int64"},
      {"(18446744073709551617,)",
       "header field 'shape': shape[0] = 18446744073709551617 is too large for int64"},
      {"(2, 36893488147419103232)",
       "header field 'shape': shape[1] = 36893488147419103232 is too large for int64"},
      {"(9223372036854775808,)",
       "header field 'shape': shape[0] = 9223372036854775808 is too large for int64"},
      {"(" + std::string(200, '9') + ",)",
       "header field 'shape': shape[0] = " + std::string(48, '9') + "... is too large for int64"},
      // Product overflow: of the dimensions, then times the item size. A zero dimension does
      // not hide the others (NumPy: "array is too big").
      {"(4294967296, 4294967296)",
       "header field 'shape': (4294967296, 4294967296) has too many elements (more than 2^62)"},
      {"(0, 4611686018427387904, 4)",
       "header field 'shape': (0, 4611686018427387904, 4) has too many elements"},
      {"(9223372036854775807,)", "has too many elements (more than 2^62)"},
      {"(9223372036854775807, 0)", "has too many elements (more than 2^62)"},
      {"(1073741824, 1073741825)",
       "header fields 'shape' (1073741824, 1073741825) and 'descr' '<f4': the data is too large "
       "in bytes (more than 2^62)"},
      {"(0, 2305843009213693952)",
       "header fields 'shape' (0, 2305843009213693952) and 'descr' '<f4': the data is too large "
       "in bytes"},
  };
  for (const Case& c : cases) {
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + c.shape + ", }";
    absl::StatusOr<NpyHeader> h = ParseHeader(MakeNpy(1, dict, ""));
    if (h.ok()) {
      ADD_FAILURE() << "accepted shape " << c.shape << " as (" << absl::StrJoin(h->shape, ", ")
                    << "), " << h->data_nbytes << " bytes";
      continue;
    }
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << h.status();
    EXPECT_THAT(h.status().message(), HasSubstr(c.message)) << c.shape;
  }
  // The largest size that fits (2^60 float32: 2^62 bytes) is accepted, an empty array with it too.
  for (const std::string& shape :
       {std::string("(1152921504606846976,)"), std::string("(0, 1152921504606846976)")}) {
    absl::StatusOr<NpyHeader> h = ParseHeader(
        MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", ""));
    EXPECT_TRUE(h.ok()) << shape << ": " << h.status();
  }
}

TEST(NpyFormatTest, EveryTruncationAndRandomCorruptionIsHandled) {
  std::vector<int64_t> shape{3, 4};
  std::vector<float> values(12, 1.5f);
  const std::string file = Serialize(HostTensor(values.data(), shape, {kDLFloat, 32, 1}), "<f4");
  ASSERT_TRUE(ParseFile(file).ok());
  for (size_t len = 0; len < file.size(); ++len) {
    absl::StatusOr<NpyHeader> h = ParseFile(absl::string_view(file).substr(0, len));
    EXPECT_FALSE(h.ok()) << "accepted a file cut to " << len << " bytes";
  }
  std::mt19937 rng(42);
  for (int round = 0; round < 20000; ++round) {
    std::string corrupted = file.substr(0, 128);
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      corrupted[rng() % corrupted.size()] = static_cast<char>(rng() & 0xff);
    }
    absl::StatusOr<NpyHeader> h = ParseHeader(corrupted);  // must not crash or hang
    if (h.ok()) {
      EXPECT_LE(h->data_offset, corrupted.size());
    }
  }
}

TEST(NpyFileTest, FortranOrderFileLoadsWithColumnMajorStrides) {
  // [[0, 1, 2], [3, 4, 5]] stored column-major: 0 3 1 4 2 5.
  const int32_t column_major[] = {0, 3, 1, 4, 2, 5};
  const TempFile file(MakeNpy(
      1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
      absl::string_view(reinterpret_cast<const char*>(column_major), sizeof(column_major))));
  absl::StatusOr<NpyArray> array = NpyArray::Load(file.path());
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_TRUE(array->header().fortran_order);
  DLTensor t = array->tensor();
  ASSERT_EQ(t.ndim, 2);
  EXPECT_EQ(t.strides[0], 1);
  EXPECT_EQ(t.strides[1], 2);
  EXPECT_EQ(t.byte_offset, 128u);
  const int32_t* data =
      reinterpret_cast<const int32_t*>(static_cast<const char*>(t.data) + t.byte_offset);
  EXPECT_EQ(data[t.strides[0] * 1 + t.strides[1] * 2], 5);

  // Writing it back gives C order.
  const std::string out = Serialize(t, "<i4");
  absl::StatusOr<NpyHeader> h = ParseFile(out);
  ASSERT_TRUE(h.ok());
  std::vector<int32_t> c_order(6);
  std::memcpy(c_order.data(), out.data() + h->data_offset, 24);
  EXPECT_EQ(c_order, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(FortranStrides({2, 0, 4}), (std::vector<int64_t>{1, 2, 2}));
}

TEST(NpyFileTest, LoadErrorsNameTheFile) {
  const TempFile garbage("this is not a numpy file at all");
  absl::StatusOr<NpyArray> array = NpyArray::Load(garbage.path());
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr(garbage.path()));
  EXPECT_THAT(array.status().message(), HasSubstr("not a valid .npy file"));

  const TempFile empty("");
  EXPECT_FALSE(NpyArray::Load(empty.path()).ok());
  absl::StatusOr<NpyArray> missing = NpyArray::Load("/nonexistent/dir/x.npy");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/dir/x.npy"));
  EXPECT_EQ(NpyArray::Load(::testing::TempDir()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyFileTest, WritesStridedTensorsInCOrder) {
  // A 3x4 int16 matrix; take every other column (strides 4, 2) and its transpose.
  std::vector<int16_t> m(12);
  for (int i = 0; i < 12; ++i) m[i] = static_cast<int16_t>(i);
  std::vector<int64_t> shape{3, 2};
  std::vector<int64_t> strides{4, 2};
  std::string out = Serialize(HostTensor(m.data(), shape, {kDLInt, 16, 1}, strides.data()), "<i2");
  absl::StatusOr<NpyHeader> h = ParseFile(out);
  ASSERT_TRUE(h.ok());
  std::vector<int16_t> got(6);
  std::memcpy(got.data(), out.data() + h->data_offset, 12);
  EXPECT_EQ(got, (std::vector<int16_t>{0, 2, 4, 6, 8, 10}));

  std::vector<int64_t> tshape{4, 3};
  std::vector<int64_t> tstrides{1, 4};
  out = Serialize(HostTensor(m.data(), tshape, {kDLInt, 16, 1}, tstrides.data()), "<i2");
  h = ParseFile(out);
  ASSERT_TRUE(h.ok());
  got.resize(12);
  std::memcpy(got.data(), out.data() + h->data_offset, 24);
  EXPECT_EQ(got, (std::vector<int16_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));

  // byte_offset is honoured, and size-1 dimensions with odd strides are fine.
  std::vector<int64_t> one_shape{1, 3};
  std::vector<int64_t> one_strides{100, 1};
  DLTensor row = HostTensor(m.data(), one_shape, {kDLInt, 16, 1}, one_strides.data());
  row.byte_offset = 8;
  out = Serialize(row, "<i2");
  h = ParseFile(out);
  ASSERT_TRUE(h.ok());
  got.resize(3);
  std::memcpy(got.data(), out.data() + h->data_offset, 6);
  EXPECT_EQ(got, (std::vector<int16_t>{4, 5, 6}));
}

TEST(NpyFileTest, ScalarsAndEmptyArrays) {
  double scalar = 2.5;
  std::vector<int64_t> no_dims;
  std::string out = Serialize(HostTensor(&scalar, no_dims, {kDLFloat, 64, 1}), "<f8");
  absl::StatusOr<NpyHeader> h = ParseFile(out);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->shape.empty());
  EXPECT_EQ(h->data_nbytes, 8u);
  double back = 0;
  std::memcpy(&back, out.data() + h->data_offset, 8);
  EXPECT_EQ(back, 2.5);

  std::vector<int64_t> empty_shape{0, 3};
  out = Serialize(HostTensor(nullptr, empty_shape, {kDLFloat, 32, 1}), "<f4");
  h = ParseFile(out);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->shape, empty_shape);
  EXPECT_EQ(h->data_nbytes, 0u);
  EXPECT_EQ(out.size(), h->data_offset);
}

TEST(NpyFileTest, SinkErrorsArePropagated) {
  std::vector<int64_t> shape{4};
  std::vector<float> v(4);
  absl::Status s = WriteNpy(HostTensor(v.data(), shape, {kDLFloat, 32, 1}), "<f4",
                            [](absl::string_view) { return absl::DataLossError("disk full"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tensorbroker::npy
