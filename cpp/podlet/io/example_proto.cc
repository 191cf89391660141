// tf.train.Example <-> protobuf wire format: see example_proto.h.
#include "podlet/io/example_proto.h"

#include <cstring>

#include "podlet/error.h"

namespace podlet::io {
namespace {

enum Wire { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// A bounds-checked cursor over one message. `base` is the offset of `p` within the
// whole record, so errors point at the absolute byte.
struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  const uint8_t* start;  // first byte of this message
  size_t base;           // absolute offset of `start` in the record
  const char* msg;       // which message is being parsed, for errors
  const std::string& where;

  size_t size() const { return size_t(end - p); }
  size_t offset() const { return base + size_t(p - start); }
  [[noreturn]] void fail(const std::string& what, size_t at) const {
    throw ValueError(fmt(where, ": malformed tf.train.Example: ", what, " at byte ", at, " (in ", msg, ")"));
  }

  bool done() const { return p == end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p == end) fail("varint runs past the end of the message", offset());
      uint8_t b = *p++;
      if (shift == 63 && b > 1) fail("varint overflows 64 bits", offset() - 1);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes", offset());
  }
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > size()) fail(fmt(what, " of ", n, " bytes runs past the end of the message (", size(), " left)"), offset());
    const uint8_t* q = p;
    p += n;
    return q;
  }
  // Reads a tag; returns false at the end of the message.
  bool tag(uint32_t& field, int& wire) {
    if (done()) return false;
    size_t at = offset();
    uint64_t t = varint();
    field = uint32_t(t >> 3);
    wire = int(t & 7);
    if ((t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF) fail(fmt("invalid field number ", (t >> 3)), at);
    if (wire == kStartGroup || wire == kEndGroup) fail("groups (wire types 3/4) are not supported", at);
    if (wire > 5) fail(fmt("invalid wire type ", wire), at);
    return true;
  }
  void skip(int wire) {
    switch (wire) {
      case kVarint: varint(); break;
      case kFixed64: take(8, "fixed64 field"); break;
      case kFixed32: take(4, "fixed32 field"); break;
      case kLen: take(varint(), "length-delimited field"); break;
    }
  }
  Reader sub(const char* what, const char* submsg) {
    uint64_t n = varint();
    size_t at = offset();
    const uint8_t* q = take(n, what);
    return Reader{q, q + n, q, at, submsg, where};
  }
  void expect(int wire, int want, const char* field) {
    if (wire != want) fail(fmt("field ", field, " has wire type ", wire, ", expected ", want), offset());
  }
};

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void parse_bytes_list(Reader r, Feature& f) {
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field != 1) { r.skip(wire); continue; }
    r.expect(wire, kLen, "BytesList.value");
    uint64_t n = r.varint();
    const uint8_t* q = r.take(n, "BytesList value");
    f.bytes.emplace_back(reinterpret_cast<const char*>(q), size_t(n));
  }
}

void parse_float_list(Reader r, Feature& f) {
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field != 1) { r.skip(wire); continue; }
    if (wire == kFixed32) {  // unpacked
      float v; std::memcpy(&v, r.take(4, "FloatList value"), 4); f.floats.push_back(v);
    } else if (wire == kLen) {  // packed
      uint64_t n = r.varint();
      if (n % 4) r.fail(fmt("packed FloatList of ", n, " bytes is not a multiple of 4"), r.offset());
      const uint8_t* q = r.take(n, "packed FloatList");
      size_t old = f.floats.size();
      f.floats.resize(old + n / 4);
      for (size_t i = 0; i < n / 4; ++i) { uint32_t u = le32(q + 4 * i); std::memcpy(&f.floats[old + i], &u, 4); }
    } else {
      r.fail(fmt("FloatList.value has wire type ", wire, ", expected 5 (fixed32) or 2 (packed)"), r.offset());
    }
  }
}

void parse_int64_list(Reader r, Feature& f) {
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field != 1) { r.skip(wire); continue; }
    if (wire == kVarint) {
      f.int64s.push_back(int64_t(r.varint()));
    } else if (wire == kLen) {
      Reader packed = r.sub("packed Int64List", "packed Int64List");
      while (!packed.done()) f.int64s.push_back(int64_t(packed.varint()));
    } else {
      r.fail(fmt("Int64List.value has wire type ", wire, ", expected 0 (varint) or 2 (packed)"), r.offset());
    }
  }
}

void parse_feature(Reader r, Feature& f) {
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field < 1 || field > 3) { r.skip(wire); continue; }
    r.expect(wire, kLen, "Feature.kind");
    auto kind = field == 1 ? Feature::Kind::kBytes : field == 2 ? Feature::Kind::kFloat : Feature::Kind::kInt64;
    if (f.kind != kind) f = Feature{};  // a different oneof member replaces the previous
    f.kind = kind;
    if (field == 1) parse_bytes_list(r.sub("BytesList", "BytesList"), f);
    else if (field == 2) parse_float_list(r.sub("FloatList", "FloatList"), f);
    else parse_int64_list(r.sub("Int64List", "Int64List"), f);
  }
}

void parse_entry(Reader r, Example& ex) {
  std::string key;
  Feature value;
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field == 1) {
      r.expect(wire, kLen, "Features.feature.key");
      uint64_t n = r.varint();
      const uint8_t* q = r.take(n, "feature key");
      key.assign(reinterpret_cast<const char*>(q), size_t(n));
    } else if (field == 2) {
      r.expect(wire, kLen, "Features.feature.value");
      parse_feature(r.sub("Feature", "Feature"), value);  // repeated value fields merge
    } else {
      r.skip(wire);
    }
  }
  ex[key] = std::move(value);
}

void parse_features(Reader r, Example& ex) {
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field != 1) { r.skip(wire); continue; }
    r.expect(wire, kLen, "Features.feature");
    parse_entry(r.sub("map entry", "Features.feature entry"), ex);
  }
}

// --- writing ---
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) { out.push_back(char(v | 0x80)); v >>= 7; }
  out.push_back(char(v));
}
void put_len(std::string& out, uint32_t field, const std::string& payload) {
  put_varint(out, uint64_t(field) << 3 | kLen);
  put_varint(out, payload.size());
  out += payload;
}

}  // namespace

const char* kind_name(Feature::Kind k) {
  switch (k) {
    case Feature::Kind::kBytes: return "bytes_list";
    case Feature::Kind::kFloat: return "float_list";
    case Feature::Kind::kInt64: return "int64_list";
    default: return "no list";
  }
}

Example parse_example(const uint8_t* data, size_t n, const std::string& where) {
  Example ex;
  Reader r{data, data + n, data, 0, "Example", where};
  uint32_t field; int wire;
  while (r.tag(field, wire)) {
    if (field != 1) { r.skip(wire); continue; }
    r.expect(wire, kLen, "Example.features");
    parse_features(r.sub("Features", "Features"), ex);  // repeated message fields merge
  }
  return ex;
}

std::string serialize_example(const Example& ex) {
  std::string features, entry, feature, list;
  for (const auto& [key, f] : ex) {
    list.clear();
    uint32_t kind_field = 0;
    switch (f.kind) {
      case Feature::Kind::kBytes:
        kind_field = 1;
        for (const auto& b : f.bytes) put_len(list, 1, b);
        break;
      case Feature::Kind::kFloat: {
        kind_field = 2;
        std::string packed(f.floats.size() * 4, '\0');
        for (size_t i = 0; i < f.floats.size(); ++i) {
          uint32_t u; std::memcpy(&u, &f.floats[i], 4);
          for (int b = 0; b < 4; ++b) packed[4 * i + b] = char(u >> (8 * b));
        }
        if (!f.floats.empty()) put_len(list, 1, packed);
        break;
      }
      case Feature::Kind::kInt64: {
        kind_field = 3;
        std::string packed;
        for (int64_t v : f.int64s) put_varint(packed, uint64_t(v));
        if (!f.int64s.empty()) put_len(list, 1, packed);
        break;
      }
      default: break;
    }
    feature.clear();
    if (kind_field) put_len(feature, kind_field, list);
    entry.clear();
    put_len(entry, 1, key);
    put_len(entry, 2, feature);
    put_len(features, 1, entry);
  }
  std::string out;
  put_len(out, 1, features);
  return out;
}

}  // namespace podlet::io
