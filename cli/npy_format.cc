#include "cli/npy_format.h"

#include <cctype>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/tensor_layout.h"

namespace tensorbroker::npy {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlign = 64;
// NumPy leaves room for the growth axis to reach this many digits (format.py).
constexpr size_t kGrowthAxisMaxDigits = 21;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("not a valid .npy file: ", message));
}

// A printable, length-limited rendering of untrusted text for error messages.
std::string Quote(absl::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 48; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (s.size() > 48) out += "...";
  return out + "'";
}

uint64_t ReadLittleEndian(absl::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

// Recursive-descent reader of the Python literal subset a .npy header uses:
// {'key': value, ...} with string, True/False and tuple-of-int values.
class HeaderDictParser {
 public:
  explicit HeaderDictParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool have_descr = false, have_fortran = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("the header does not start with '{'");
    SkipSpace();
    while (!Consume('}')) {
      absl::StatusOr<std::string> key = ParseString("a key");
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after key ", Quote(*key)));
      SkipSpace();
      if (*key == "descr") {
        if (have_descr) return Error("key 'descr' appears twice");
        have_descr = true;
        if (Peek() == '[' || Peek() == '(') {
          return Invalid(
              "'descr' is a structured dtype (a list of fields); only plain numeric "
              "dtypes are supported");
        }
        absl::StatusOr<std::string> descr = ParseString("the 'descr' value");
        if (!descr.ok()) return descr.status();
        absl::StatusOr<DLDataType> dtype = DTypeFromDescr(*descr);
        if (!dtype.ok()) return dtype.status();
        header.descr = *std::move(descr);
        header.dtype = *dtype;
      } else if (*key == "fortran_order") {
        if (have_fortran) return Error("key 'fortran_order' appears twice");
        have_fortran = true;
        if (ConsumeWord("True")) {
          header.fortran_order = true;
        } else if (ConsumeWord("False")) {
          header.fortran_order = false;
        } else {
          return Error("'fortran_order' must be True or False");
        }
      } else if (*key == "shape") {
        if (have_shape) return Error("key 'shape' appears twice");
        have_shape = true;
        absl::StatusOr<std::vector<int64_t>> shape = ParseShape();
        if (!shape.ok()) return shape.status();
        header.shape = *std::move(shape);
      } else {
        return Error(absl::StrCat("unexpected key ", Quote(*key),
                                  " (a header has exactly 'descr', 'fortran_order', 'shape')"));
      }
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
      } else if (Peek() != '}') {
        return Error("expected ',' or '}' after a value");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the closing '}'");
    if (!have_descr) return Invalid("the header has no 'descr' key");
    if (!have_fortran) return Invalid("the header has no 'fortran_order' key");
    if (!have_shape) return Invalid("the header has no 'shape' key");
    return header;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return Invalid(absl::StrCat("header dict at offset ", pos_, ": ", what));
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t end = pos_ + word.size();
    if (end < text_.size() &&
        (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) {
      return false;
    }
    pos_ = end;
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  absl::StatusOr<std::string> ParseString(absl::string_view what) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error(absl::StrCat("expected a string for ", what));
    ++pos_;
    std::string value;
    while (true) {
      if (pos_ >= text_.size()) return Error(absl::StrCat("unterminated string for ", what));
      const char c = text_[pos_++];
      if (c == quote) break;
      if (c == '\\') return Error(absl::StrCat("escape sequences are not supported in ", what));
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        return Error(absl::StrCat("non-printable byte in ", what));
      }
      if (value.size() >= 64) return Error(absl::StrCat(what, " is too long"));
      value.push_back(c);
    }
    return value;
  }

  // A dimension is read as decimal digits into int64 with every step checked: a value past
  // INT64_MAX is refused, never wrapped (2^64 must not read as 0).
  absl::StatusOr<int64_t> ParseDimension(size_t index) {
    if (Peek() == '-') {
      return Invalid(absl::StrCat("header field 'shape': shape[", index, "] is negative"));
    }
    if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
      return Error(absl::StrCat("shape[", index, "] is not a non-negative integer"));
    }
    const size_t start = pos_;
    while (std::isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
    const absl::string_view digits = text_.substr(start, pos_ - start);
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t value = 0;
    for (char c : digits) {
      const int64_t digit = c - '0';
      if (value > (kMax - digit) / 10) {
        const bool cut = digits.size() > 48;
        return Invalid(absl::StrCat("header field 'shape': shape[", index,
                                    "] = ", digits.substr(0, 48), cut ? "..." : "",
                                    " is too large for int64 (at most ", kMax, ")"));
      }
      value = value * 10 + digit;
    }
    Consume('L');  // Python 2 long literals, as old NumPy wrote them.
    if (std::isalnum(static_cast<unsigned char>(Peek())) || Peek() == '.') {
      return Error(absl::StrCat("shape[", index, "] is not an integer"));
    }
    return value;
  }

  absl::StatusOr<std::vector<int64_t>> ParseShape() {
    if (!Consume('(')) return Error("'shape' must be a tuple of non-negative integers");
    std::vector<int64_t> shape;
    SkipSpace();
    bool trailing_comma = false;
    while (!Consume(')')) {
      if (shape.size() >= kMaxDims) {
        return Invalid(absl::StrCat("'shape' has more than ", kMaxDims,
                                    " dimensions, the most the broker supports"));
      }
      absl::StatusOr<int64_t> dim = ParseDimension(shape.size());
      if (!dim.ok()) return dim.status();
      shape.push_back(*dim);
      SkipSpace();
      trailing_comma = Consume(',');
      SkipSpace();
      if (!trailing_comma && Peek() != ')') return Error("expected ',' or ')' in 'shape'");
    }
    if (shape.size() == 1 && !trailing_comma) {
      return Error("'shape' (n) is not a tuple; a one-dimensional shape is written (n,)");
    }
    return shape;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// Bytes of data `header` describes. As NumPy does, a dimension of 0 empties the array but does
// not excuse the others: the product of the non-zero dimensions times the item size must stay
// within 2^62 bytes (NumPy: within INT64_MAX), every step checked so that nothing wraps.
absl::StatusOr<uint64_t> DataBytes(const NpyHeader& header) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t elements = 1;
  bool empty = false;
  for (int64_t dim : header.shape) {
    const uint64_t d = static_cast<uint64_t>(dim);
    if (d == 0) {
      empty = true;
      continue;
    }
    if (elements > kLimit / d) {
      return Invalid(absl::StrCat("header field 'shape': (", absl::StrJoin(header.shape, ", "),
                                  ") has too many elements (more than 2^62)"));
    }
    elements *= d;
  }
  const uint64_t item = ItemSize(header.dtype);
  if (elements > kLimit / item) {
    return Invalid(absl::StrCat("header fields 'shape' (", absl::StrJoin(header.shape, ", "),
                                ") and 'descr' ", Quote(header.descr),
                                ": the data is too large in bytes (more than 2^62)"));
  }
  return empty ? 0 : elements * item;
}

}  // namespace

absl::StatusOr<DLDataType> DTypeFromDescr(absl::string_view descr) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("dtype descr ", Quote(descr), ": ", why));
  };
  absl::string_view rest = descr;
  char order = '=';
  if (!rest.empty() && (rest[0] == '<' || rest[0] == '>' || rest[0] == '|' || rest[0] == '=')) {
    order = rest[0];
    rest.remove_prefix(1);
  }
  if (rest.empty()) return bad("has no type character");
  const char kind = rest[0];
  rest.remove_prefix(1);
  switch (kind) {
    case 'O':
      return bad("object arrays hold Python object pointers, not data; they cannot be stored");
    case 'V':
      return bad(
          "raw void data has no element type (tensorbroker get writes bfloat16 and float8 "
          "tensors this way; they cannot be put back from a .npy file)");
    case 'S':
    case 'U':
    case 'a':
      return bad("string dtypes are not supported; use a numeric dtype");
    case 'M':
    case 'm':
      return bad("datetime/timedelta dtypes are not supported; use a numeric dtype");
    case 'b':
    case 'i':
    case 'u':
    case 'f':
    case 'c':
      break;
    default:
      return bad("is not a supported numeric dtype (bool, int, uint, float or complex)");
  }
  if (rest.empty() || rest.size() > 2) return bad("has no valid item size");
  uint32_t itemsize = 0;
  for (char c : rest) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad("has no valid item size");
    itemsize = itemsize * 10 + static_cast<uint32_t>(c - '0');
  }
  if (itemsize > 1 && order == '>') {
    return bad(
        "big-endian data is not supported; convert it first, e.g. "
        "a.astype(a.dtype.newbyteorder('<'))");
  }
  if (itemsize > 1 && order == '|') {
    return bad("'|' (no byte order) is only valid for one-byte types");
  }
  DLDataType dtype{0, static_cast<uint8_t>(itemsize * 8), 1};
  bool ok = false;
  switch (kind) {
    case 'b':
      dtype.code = kDLBool;
      ok = itemsize == 1;
      break;
    case 'i':
      dtype.code = kDLInt;
      ok = itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
      break;
    case 'u':
      dtype.code = kDLUInt;
      ok = itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
      break;
    case 'f':
      dtype.code = kDLFloat;
      ok = itemsize == 2 || itemsize == 4 || itemsize == 8;
      break;
    case 'c':
      dtype.code = kDLComplex;
      ok = itemsize == 8 || itemsize == 16;
      break;
  }
  if (!ok) return bad("has an item size the broker does not support");
  return dtype;
}

absl::StatusOr<Descr> DescrForDType(const DLDataType& dtype) {
  if (absl::Status s = ValidateDType(dtype); !s.ok()) return s;
  const uint64_t bytes = ItemSize(dtype);
  switch (dtype.code) {
    case kDLBool:
      return Descr{"|b1", false};
    case kDLInt:
      return Descr{bytes == 1 ? "|i1" : absl::StrCat("<i", bytes), false};
    case kDLUInt:
      return Descr{bytes == 1 ? "|u1" : absl::StrCat("<u", bytes), false};
    case kDLFloat:
      return Descr{absl::StrCat("<f", bytes), false};
    case kDLComplex:
      return Descr{absl::StrCat("<c", bytes), false};
    default:  // bfloat16, float8: NumPy has no name for them.
      return Descr{absl::StrCat("|V", bytes), true};
  }
}

absl::StatusOr<NpyHeader> ParseHeader(absl::string_view bytes) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic) {
    return Invalid("it does not start with the magic string \\x93NUMPY");
  }
  if (bytes.size() < 8) return Invalid("it ends inside the version field");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return Invalid(absl::StrCat("format version ", major, ".", minor,
                                " is not supported (1.0, 2.0 and 3.0 are)"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) return Invalid("it ends inside the header length field");
  const uint64_t header_len = ReadLittleEndian(bytes.substr(8, length_bytes));
  const uint64_t prefix = 8 + length_bytes;
  if (header_len > kMaxHeaderBytes) {
    return Invalid(absl::StrCat("the header claims to be ", header_len, " bytes; at most ",
                                kMaxHeaderBytes, " are supported"));
  }
  if (bytes.size() - prefix < header_len) {
    return Invalid(absl::StrCat("the file is truncated: the header needs ", header_len,
                                " bytes but only ", bytes.size() - prefix, " follow"));
  }
  const absl::string_view text = bytes.substr(prefix, header_len);
  // Versions 1.0/2.0 are latin-1 and 3.0 is UTF-8; the keys and values we accept are ASCII,
  // and non-ASCII bytes are refused wherever they appear outside the whitespace.
  absl::StatusOr<NpyHeader> header = HeaderDictParser(text).Parse();
  if (!header.ok()) return header.status();
  header->major_version = major;
  header->minor_version = minor;
  header->data_offset = prefix + header_len;

  absl::StatusOr<uint64_t> nbytes = DataBytes(*header);
  if (!nbytes.ok()) return nbytes.status();
  header->data_nbytes = *nbytes;
  return header;
}

absl::StatusOr<NpyHeader> ParseFile(absl::string_view file) {
  absl::StatusOr<NpyHeader> header = ParseHeader(file);
  if (!header.ok()) return header.status();
  const uint64_t have = file.size() - header->data_offset;
  if (have < header->data_nbytes) {
    return Invalid(absl::StrCat("the file is truncated: shape (",
                                absl::StrJoin(header->shape, ", "), ") of ", header->descr,
                                " needs ", header->data_nbytes, " data bytes but only ", have,
                                " follow the header"));
  }
  return header;
}

std::string BuildHeader(absl::string_view descr, const std::vector<int64_t>& shape) {
  std::string shape_text;
  if (shape.size() == 1) {
    shape_text = absl::StrCat("(", shape[0], ",)");
  } else {
    shape_text = absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  }
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape_text, ", }");
  if (!shape.empty()) {
    const size_t digits = absl::StrCat(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  const size_t text_len = dict.size() + 1;  // + '\n'
  size_t prefix = 10;
  int major = 1;
  if (text_len + (kAlign - (prefix + text_len) % kAlign) > 0xffff) {
    prefix = 12;
    major = 2;
  }
  const size_t pad = kAlign - (prefix + text_len) % kAlign;
  dict.append(pad, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  uint64_t len = dict.size();
  for (size_t i = 0; i < prefix - 8; ++i) {
    out.push_back(static_cast<char>(len & 0xff));
    len >>= 8;
  }
  out += dict;
  return out;
}

std::vector<int64_t> FortranStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    strides[i] = step;
    step *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

}  // namespace tensorbroker::npy
