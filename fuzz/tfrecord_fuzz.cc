// libFuzzer harness for the TFDS read path: TFRecord framing (both CRCs), the
// tf.train.Example wire-format parser, and Example -> Record (JPEG decode, label and
// shape checks). The first input byte picks the mode, so the fuzzer can reach the
// Example parser without having to forge CRCs:
//   even: the rest is a TFRecord stream; every record is parsed and decoded
//   odd:  the rest is one serialised Example
// A ValueError is the expected answer to bad input; anything else (crash, sanitizer
// report, other exception, a broken invariant) is a bug. Build and run: fuzz/README.md.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "podlet/error.h"
#include "podlet/io/example_proto.h"
#include "podlet/io/tfrecord.h"
#include "podlet/io/tfrecord_source.h"

using namespace podlet;

static void check_example(const uint8_t* data, size_t n) {
  io::Example ex = io::parse_example(data, n, "<fuzz example>");
  // Serialising what was parsed and parsing it again is the identity.
  std::string again = io::serialize_example(ex);
  io::Example ex2 = io::parse_example(reinterpret_cast<const uint8_t*>(again.data()), again.size(), "<reparse>");
  if (ex2.size() != ex.size()) std::abort();
  for (auto& [k, f] : ex) {
    const io::Feature& g = ex2.at(k);
    bool same_floats = f.floats.size() == g.floats.size();
    for (size_t i = 0; same_floats && i < f.floats.size(); ++i)  // NaN != NaN: compare bits
      same_floats = __builtin_memcmp(&f.floats[i], &g.floats[i], 4) == 0;
    if (g.kind != f.kind || g.bytes != f.bytes || g.int64s != f.int64s || !same_floats) std::abort();
  }
  io::TfrecordSpec spec;
  spec.num_classes = 5;
  try {
    data::Record r = io::example_to_record(ex, spec, "<fuzz record>");
    if (r.image.size() != size_t(r.height) * r.width * r.channels || r.label < 0 || r.label >= 5) std::abort();
  } catch (const ValueError&) {
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* p = data + 1;
  size_t n = size - 1;
  try {
    if (data[0] & 1) {
      check_example(p, n);
    } else {
      std::vector<io::RecordSpan> spans = io::scan_tfrecords(p, n, "<fuzz input>");
      // A stream that scans cleanly is exactly its records re-framed.
      std::string reframed;
      for (auto& s : spans) {
        if (s.offset + s.length > n) std::abort();
        io::append_tfrecord(reframed, p + s.offset, s.length);
      }
      if (reframed.size() != n || __builtin_memcmp(reframed.data(), p, n) != 0) std::abort();
      for (auto& s : spans) {
        try { check_example(p + s.offset, s.length); } catch (const ValueError&) {}
      }
    }
  } catch (const ValueError&) {
  }
  return 0;
}
