// tf.train.Example read from and written to the protobuf wire format, without
// libprotobuf. The messages (tensorflow/core/example/{example,feature}.proto):
//   Example   { Features features = 1; }
//   Features  { map<string, Feature> feature = 1; }   // entry: { key = 1; value = 2; }
//   Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                            Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed = true]; }
//   Int64List { repeated int64 value = 1 [packed = true]; }
// Parsing follows protobuf semantics: packed and unpacked repeated scalars are both
// accepted, unknown fields are skipped, a repeated map key keeps the last value, a
// repeated list field merges (values concatenate), and setting a different oneof member
// replaces the previous one. Malformed input throws ValueError naming `where`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace podlet::io {

struct Feature {
  enum class Kind { kNone, kBytes, kFloat, kInt64 };
  Kind kind = Kind::kNone;  // kNone: a Feature with no list set (legal protobuf)
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> int64s;
};
const char* kind_name(Feature::Kind k);  // "bytes_list", "float_list", "int64_list", "no list"

using Example = std::map<std::string, Feature>;  // ordered: serialisation is deterministic

Example parse_example(const uint8_t* data, size_t n, const std::string& where);

// Keys in sorted order, lists packed: the same Example always gives the same bytes.
std::string serialize_example(const Example& ex);

}  // namespace podlet::io
