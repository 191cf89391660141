// podlet._core entry points for dataset file formats: CRC32C, TFRecord framing,
// tf.train.Example, JPEG, TFRecord/TFDS and HDF5 sources, and the exporters. The
// Python API over them is python/podlet/data/{tfds,hdf5,export}.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "podlet/data/source.h"
#include "podlet/error.h"
#include "podlet/io/crc32c.h"
#include "podlet/io/example_proto.h"
#include "podlet/io/hdf5_shards.h"
#include "podlet/io/jpeg.h"
#include "podlet/io/tfrecord.h"
#include "podlet/io/tfrecord_export.h"
#include "podlet/io/tfrecord_source.h"
#include "registry.h"

namespace py = pybind11;
using namespace podlet;

namespace {

std::string_view view(const py::bytes& b) {
  char* p; py::ssize_t n;
  PyBytes_AsStringAndSize(b.ptr(), &p, &n);
  return {p, size_t(n)};
}
const uint8_t* u8(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

py::object feature_value(const io::Feature& f) {
  switch (f.kind) {
    case io::Feature::Kind::kBytes: {
      py::list l;
      for (auto& b : f.bytes) l.append(py::bytes(b));
      return py::make_tuple("bytes_list", l);
    }
    case io::Feature::Kind::kFloat: return py::make_tuple("float_list", py::cast(f.floats));
    case io::Feature::Kind::kInt64: return py::make_tuple("int64_list", py::cast(f.int64s));
    default: return py::make_tuple("none", py::list());
  }
}

io::Feature feature_from(const std::string& key, py::handle v) {
  auto t = v.cast<py::tuple>();
  if (t.size() != 2) throw ValueError(fmt("feature '", key, "': expected (kind, values)"));
  auto kind = t[0].cast<std::string>();
  io::Feature f;
  if (kind == "bytes_list") {
    f.kind = io::Feature::Kind::kBytes;
    for (auto b : t[1]) f.bytes.push_back(b.cast<std::string>());
  } else if (kind == "float_list") {
    f.kind = io::Feature::Kind::kFloat;
    f.floats = t[1].cast<std::vector<float>>();
  } else if (kind == "int64_list") {
    f.kind = io::Feature::Kind::kInt64;
    f.int64s = t[1].cast<std::vector<int64_t>>();
  } else {
    throw ValueError(fmt("feature '", key, "': unknown kind '", kind, "'; expected bytes_list, float_list or int64_list"));
  }
  return f;
}

}  // namespace

static podlet_bindings::Binder reg_formats([](py::module_& m) {
  m.def("crc32c", [](const py::bytes& b, uint32_t crc) { auto s = view(b); return io::crc32c(s.data(), s.size(), crc); },
        py::arg("data"), py::arg("crc") = 0, "CRC32C (Castagnoli) of bytes, continuing from `crc`.");
  m.def("mask_crc", &io::mask_crc, "TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.");
  m.def("unmask_crc", &io::unmask_crc);

  m.def("tfrecord_frame", [](const py::bytes& b) {
    auto s = view(b); std::string out; io::append_tfrecord(out, s.data(), s.size()); return py::bytes(out);
  }, "One record framed as TFRecord bytes.");
  m.def("tfrecord_parse", [](const py::bytes& b, const std::string& name) {
    auto s = view(b);
    std::vector<io::RecordSpan> spans;
    { py::gil_scoped_release nogil; spans = io::scan_tfrecords(u8(s), s.size(), name); }
    py::list out;
    for (auto& sp : spans) out.append(py::bytes(s.data() + sp.offset, sp.length));
    return out;
  }, py::arg("data"), py::arg("name") = "<bytes>", "Records of a TFRecord byte string, both CRCs verified.");
  m.def("tfrecord_read", [](const std::string& path) {
    std::vector<std::string> recs;
    {
      py::gil_scoped_release nogil;
      io::TFRecordFile f(path);
      for (size_t i = 0; i < f.size(); ++i) recs.push_back(f.read(i));
    }
    py::list out;
    for (auto& r : recs) out.append(py::bytes(r));
    return out;
  }, py::arg("path"), "Every record of a TFRecord file, both CRCs verified.");
  m.def("tfrecord_write", [](const std::string& path, const std::vector<py::bytes>& records) {
    io::TFRecordWriter w(path);
    for (auto& r : records) { auto s = view(r); w.write(s.data(), s.size()); }
    w.close();
  }, py::arg("path"), py::arg("records"));

  m.def("example_parse", [](const py::bytes& b, const std::string& where) {
    auto s = view(b);
    io::Example ex = io::parse_example(u8(s), s.size(), where);
    py::dict d;
    for (auto& [k, f] : ex) d[py::str(k)] = feature_value(f);
    return d;
  }, py::arg("data"), py::arg("where") = "<bytes>",
     "A serialised tf.train.Example as {name: (kind, values)}, kind one of 'bytes_list', "
     "'float_list', 'int64_list' ('none' for a Feature with no list).");
  m.def("example_serialize", [](const py::dict& d) {
    io::Example ex;
    for (auto kv : d) { auto k = kv.first.cast<std::string>(); ex[k] = feature_from(k, kv.second); }
    return py::bytes(io::serialize_example(ex));
  }, py::arg("features"), "Inverse of example_parse (keys sorted, lists packed).");

  m.def("jpeg_decode", [](const py::bytes& b, int channels, const std::string& where) {
    auto s = view(b);
    io::DecodedImage img;
    { py::gil_scoped_release nogil; img = io::decode_jpeg(u8(s), s.size(), where, channels); }
    py::array_t<uint8_t> out({img.height, img.width, img.channels});
    std::memcpy(out.mutable_data(), img.pixels.data(), img.pixels.size());
    return out;
  }, py::arg("data"), py::arg("channels") = 0, py::arg("where") = "<bytes>",
     "Decodes JPEG bytes to uint8 HxWxC; channels 0 = as stored, 1 = gray, 3 = RGB.");
  m.def("jpeg_encode", [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> a, int quality) {
    if (a.ndim() != 3 && a.ndim() != 2) throw ShapeError(fmt("jpeg_encode: expected HxW or HxWxC uint8, got rank ", a.ndim()));
    int h = int(a.shape(0)), w = int(a.shape(1)), c = a.ndim() == 3 ? int(a.shape(2)) : 1;
    std::string out;
    { py::gil_scoped_release nogil; out = io::encode_jpeg(a.data(), h, w, c, quality, "jpeg_encode"); }
    return py::bytes(out);
  }, py::arg("image"), py::arg("quality") = 95);

  py::class_<io::TfrecordSource, data::Source, std::shared_ptr<io::TfrecordSource>>(m, "TfrecordSource")
      .def("shard_lengths", &io::TfrecordSource::shard_lengths)
      .def("shards", &io::TfrecordSource::shards);
  m.def("tfrecord_source", [](std::vector<std::string> shards, std::vector<std::string> class_names, int num_classes,
                              std::string image_key, std::string label_key, std::string id_key, int height, int width,
                              int channels, std::string description) {
    io::TfrecordSpec spec;
    spec.shards = std::move(shards); spec.class_names = std::move(class_names); spec.num_classes = num_classes;
    spec.image_key = std::move(image_key); spec.label_key = std::move(label_key); spec.id_key = std::move(id_key);
    spec.height = height; spec.width = width; spec.channels = channels; spec.description = std::move(description);
    py::gil_scoped_release nogil;
    return std::make_shared<io::TfrecordSource>(std::move(spec));
  }, py::arg("shards"), py::arg("class_names"), py::arg("num_classes") = 0, py::arg("image_key") = "image",
     py::arg("label_key") = "label", py::arg("id_key") = "id", py::arg("height") = -1, py::arg("width") = -1,
     py::arg("channels") = 0, py::arg("description") = "tfrecord");

  m.def("tfrecord_export", [](std::shared_ptr<data::Source> src, const std::vector<std::string>& paths, int quality) {
    io::ExportStats st;
    { py::gil_scoped_release nogil; st = io::export_tfrecord_shards(*src, paths, quality); }
    py::dict d;
    d["shard_lengths"] = st.shard_lengths; d["num_bytes"] = st.num_bytes;
    d["shape"] = py::make_tuple(st.height, st.width, st.channels); d["max_label"] = st.max_label;
    return d;
  }, py::arg("source"), py::arg("paths"), py::arg("quality") = 95);
  m.def("tfrecord_encode_example", [](std::shared_ptr<data::Source> src, int64_t i, int quality) {
    data::Record r = src->get(i);
    return py::bytes(io::encode_example(r, quality, fmt("example ", i)));
  });

  m.def("hdf5_source", [](const std::vector<std::string>& paths) {
    py::gil_scoped_release nogil;
    return io::open_hdf5_source(paths);
  }, py::arg("paths"));
  m.def("hdf5_write", [](std::shared_ptr<data::Source> src, const std::string& path, int gzip_level) {
    py::gil_scoped_release nogil;
    io::write_hdf5(*src, path, gzip_level);
  }, py::arg("source"), py::arg("path"), py::arg("gzip_level") = 0);

});
