// podlet._core entry points of the input pipeline: the synthetic DDSM source, sources
// over NumPy arrays, batch reads, and the pipeline iterator (plus the debug hooks tests
// use to re-derive shuffle orders and augmentation draws).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include "podlet/data/array_source.h"
#include "podlet/data/augment.h"
#include "podlet/data/pipeline.h"
#include "podlet/data/shuffle.h"
#include "podlet/data/synthetic_ddsm.h"
#include "podlet/error.h"
#include "podlet/parallel.h"
#include "registry.h"

namespace py = pybind11;
using namespace podlet;
using namespace podlet::data;

namespace {

template <class T>
T get_or(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : fallback;
}

ElementOp parse_op(const py::dict& d) {
  ElementOp op;
  auto kind = d["op"].cast<std::string>();
  if (kind == "normalize") {
    op.kind = ElementOp::kNormalize;
    auto mode = d["mode"].cast<std::string>();
    if (mode == "mean_std") op.normalize.mode = NormalizeSpec::kMeanStd;
    else if (mode == "minus_one_to_one") op.normalize.mode = NormalizeSpec::kMinusOneToOne;
    else if (mode == "unit") op.normalize.mode = NormalizeSpec::kUnit;
    else throw ValueError(fmt("normalize: unknown mode '", mode, "'; expected 'mean_std' or 'minus_one_to_one'"));
    op.normalize.mean = get_or<std::vector<float>>(d, "mean", {});
    op.normalize.std = get_or<std::vector<float>>(d, "std", {});
  } else if (kind == "augment") {
    op.kind = ElementOp::kAugment;
    AugmentSpec& a = op.augment;
    a.translate = get_or<int>(d, "translate", 0);
    a.rotate = get_or<double>(d, "rotate", 0.0);
    a.brightness = get_or<double>(d, "brightness", 0.0);
    a.contrast = d.contains("contrast") && !d["contrast"].is_none();
    if (a.contrast) {
      auto lh = d["contrast"].cast<std::pair<double, double>>();
      a.contrast_lo = lh.first; a.contrast_hi = lh.second;
    }
    a.hflip = get_or<bool>(d, "hflip", false);
    a.seed = get_or<uint64_t>(d, "seed", 0);
  } else {
    throw ValueError(fmt("unknown element op '", kind, "'"));
  }
  return op;
}

PipelineSpec parse_spec(std::shared_ptr<Source> source, const py::dict& d) {
  PipelineSpec s;
  s.source = std::move(source);
  s.shuffle = get_or<bool>(d, "shuffle", false);
  s.shuffle_buffer = get_or<int64_t>(d, "shuffle_buffer", 1);
  s.shuffle_seed = get_or<uint64_t>(d, "shuffle_seed", 0);
  s.reshuffle_each_iteration = get_or<bool>(d, "reshuffle_each_iteration", true);
  if (d.contains("ops"))
    for (auto o : d["ops"]) s.ops.push_back(parse_op(o.cast<py::dict>()));
  s.batch_size = get_or<int64_t>(d, "batch_size", 0);
  s.drop_remainder = get_or<bool>(d, "drop_remainder", false);
  s.repeat = get_or<int64_t>(d, "repeat", 1);
  s.repeat_before_batch = get_or<bool>(d, "repeat_before_batch", true);
  s.take = get_or<int64_t>(d, "take", -1);
  s.shard_count = get_or<int64_t>(d, "shard_count", 1);
  s.shard_index = get_or<int64_t>(d, "shard_index", 0);
  s.prefetch = get_or<int64_t>(d, "prefetch", 0);
  s.threads = get_or<int>(d, "threads", 0);
  return s;
}

py::dict augment_draw_dict(const AugmentDraw& a) {
  py::dict d;
  d["flip"] = a.flip; d["dy"] = a.dy; d["dx"] = a.dx; d["angle_deg"] = a.angle_deg;
  d["brightness"] = a.brightness; d["contrast"] = a.contrast;
  return d;
}

template <class T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> a(py::ssize_t(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

py::object batch_to_python(Batch&& b) {
  auto* raw = b.image.release();
  py::capsule owner(raw, [](void* p) { delete[] static_cast<float*>(p); });
  py::array_t<float> image({py::ssize_t(b.n), py::ssize_t(b.height), py::ssize_t(b.width), py::ssize_t(b.channels)},
                           raw, owner);
  py::list ids;
  for (auto& s : b.id) ids.append(py::str(s));
  return py::make_tuple(image, to_numpy(b.label), ids, to_numpy(b.epoch), to_numpy(b.position), to_numpy(b.index));
}

py::object lesion_to_python(const SyntheticDDSM& src, int64_t i) {
  Lesion l;
  {
    py::gil_scoped_release nogil;
    l = src.lesion(i);
  }
  if (!l.present) return py::none();
  int S = src.image_size();
  py::array_t<bool> mask({S, S});
  auto* m = mask.mutable_data();
  for (size_t p = 0; p < l.mask.size(); ++p) m[p] = l.mask[p] != 0;
  py::dict d;
  d["label"] = l.label;
  d["class_name"] = src.class_names()[l.label];
  // pixel-index coordinates: pixel (row r, col c) has its centre at (x=c, y=r)
  d["center"] = py::make_tuple(l.cx - 0.5, l.cy - 0.5);
  d["radius"] = l.radius;
  d["bbox"] = py::make_tuple(l.x0, l.y0, l.x1, l.y1);
  d["mask"] = mask;
  return d;
}

// A test double: 4x4x1 examples whose pixels are the index; get(fail_at) throws and
// get(odd_shape_at) returns a 5x4x1 image, so tests can reach the pipeline's error paths.
class DebugSource final : public Source {
 public:
  DebugSource(int64_t n, int64_t fail_at, int64_t odd_shape_at) : n_(n), fail_(fail_at), odd_(odd_shape_at) {}
  int64_t size() const override { return n_; }
  Record get(int64_t i) const override {
    if (i == fail_) throw ValueError(fmt("debug source: record ", i, " is corrupt (as asked)"));
    Record r;
    r.height = i == odd_ ? 5 : 4; r.width = 4; r.channels = 1;
    r.image.assign(size_t(r.height) * 4, uint8_t(i % 256));
    r.label = int32_t(i % 3);
    r.id = fmt("debug/", i);
    return r;
  }
  std::string describe() const override { return fmt("debug_source (", n_, " examples)"); }

 private:
  int64_t n_, fail_, odd_;
};

}  // namespace

static podlet_bindings::Binder reg_data([](py::module_& m) {
  py::class_<SyntheticDDSM, Source, std::shared_ptr<SyntheticDDSM>>(m, "SyntheticDDSM")
      .def(py::init<const std::string&, int, double, uint64_t>(), py::arg("split"), py::arg("image_size") = 224,
           py::arg("scale") = 1.0, py::arg("seed") = 0)
      .def_property_readonly("image_size", &SyntheticDDSM::image_size)
      .def_property_readonly("split", &SyntheticDDSM::split)
      .def("label", &SyntheticDDSM::label, py::arg("index"))
      .def("labels", [](const SyntheticDDSM& s) {
        std::vector<int32_t> v(size_t(s.size()));
        {
          py::gil_scoped_release nogil;
          for (int64_t i = 0; i < s.size(); ++i) v[size_t(i)] = s.label(i);
        }
        return to_numpy(v);
      })
      .def("class_counts", [](const SyntheticDDSM& s) {
        auto& c = s.class_counts();
        return std::vector<int64_t>(c.begin(), c.end());
      })
      .def("lesion", &lesion_to_python, py::arg("index"))
      .def_static("class_fractions", [] {
        auto& f = SyntheticDDSM::class_fractions();
        return std::vector<double>(f.begin(), f.end());
      })
      .def_static("full_split_size", &SyntheticDDSM::full_split_size);

  m.def("data_array_source", [](py::array images, std::vector<int32_t> labels, std::optional<std::vector<std::string>> ids,
                                std::vector<std::string> class_names, std::string name) -> std::shared_ptr<Source> {
    auto arr = py::array_t<uint8_t, py::array::c_style>::ensure(images);
    if (!arr || arr.ndim() != 4)
      throw ValueError(fmt(name, ": images must be uint8 of shape (N, H, W, C)"));
    int64_t n = arr.shape(0);
    int h = int(arr.shape(1)), w = int(arr.shape(2)), c = int(arr.shape(3));
    // Borrow NumPy's buffer; the owner may be released on any thread, so take the GIL.
    auto* keep = new py::object(arr);
    std::shared_ptr<const uint8_t> pixels(arr.data(), [keep](const uint8_t*) {
      py::gil_scoped_acquire g;
      delete keep;
    });
    return std::make_shared<ArraySource>(pixels, n, h, w, c, std::move(labels), ids ? std::move(*ids) : std::vector<std::string>{},
                                         std::move(class_names), std::move(name));
  }, py::arg("images"), py::arg("labels"), py::arg("ids"), py::arg("class_names"), py::arg("name"));

  m.def("data_read_batch", [](std::shared_ptr<Source> src, std::vector<int64_t> indices, int threads) {
    const int64_t n = int64_t(indices.size());
    for (int64_t i : indices)
      if (i < 0 || i >= src->size())
        throw ValueError(fmt("index ", i, " out of range for ", src->describe(), " of size ", src->size()));
    std::vector<Record> recs(static_cast<size_t>(n));
    {
      py::gil_scoped_release nogil;
      const int nt = std::max(1, threads > 0 ? threads : num_threads());
      auto one = [&](int64_t i) { recs[size_t(i)] = src->get(indices[size_t(i)]); };
#if defined(PODLET_SANITIZE_THREAD)
      // TBB's task hand-offs are invisible to TSan (sanitize.h): plain threads in that build.
      dynamic_on_threads(nt, n, one);
#else
      tbb::task_arena arena(nt);
      arena.execute([&] { tbb::parallel_for(int64_t(0), n, one); });
#endif
    }
    int h = n ? recs[0].height : 0, w = n ? recs[0].width : 0, c = n ? recs[0].channels : 0;
    py::array_t<uint8_t> out({py::ssize_t(n), py::ssize_t(h), py::ssize_t(w), py::ssize_t(c)});
    std::vector<int32_t> labels(static_cast<size_t>(n));
    py::list ids;
    for (int64_t i = 0; i < n; ++i) {
      auto& r = recs[size_t(i)];
      if (r.height != h || r.width != w || r.channels != c)
        throw ValueError(fmt(src->describe(), ": record ", indices[size_t(i)], " (id '", r.id, "') has shape (", r.height,
                             ", ", r.width, ", ", r.channels, "), expected (", h, ", ", w, ", ", c, ")"));
      std::memcpy(out.mutable_data() + size_t(i) * h * w * c, r.image.data(), r.image.size());
      labels[size_t(i)] = r.label;
      ids.append(py::str(r.id));
    }
    return py::make_tuple(out, to_numpy(labels), ids);
  }, py::arg("source"), py::arg("indices"), py::arg("threads") = 0);

  py::class_<BatchIterator, std::shared_ptr<BatchIterator>>(m, "DataIterator")
      .def(py::init([](std::shared_ptr<Source> src, const py::dict& spec, uint64_t first_epoch, int64_t start_item) {
             PipelineSpec s = parse_spec(std::move(src), spec);
             py::gil_scoped_release nogil;
             return std::make_shared<BatchIterator>(std::move(s), first_epoch, start_item);
           }),
           py::arg("source"), py::arg("spec"), py::arg("first_epoch") = 0, py::arg("start_item") = 0)
      .def_property_readonly("num_items", &BatchIterator::num_items)
      .def("next", [](BatchIterator& it) -> py::object {
        std::optional<Batch> b;
        {
          py::gil_scoped_release nogil;
          b = it.next();
        }
        if (!b) return py::none();
        return batch_to_python(std::move(*b));
      })
      .def("close", [](BatchIterator& it) {
        py::gil_scoped_release nogil;
        it.close();
      });

  m.def("data_augment_draw", [](const py::dict& op, int op_index, uint64_t epoch, uint64_t position) {
    ElementOp e = parse_op(op);
    if (e.kind != ElementOp::kAugment) throw ValueError("data_augment_draw needs an augment op");
    return augment_draw_dict(draw_augment(e.augment, augment_key(e.augment, op_index, epoch, position)));
  }, py::arg("op"), py::arg("op_index"), py::arg("epoch"), py::arg("position"));

  m.def("data_debug_source", [](int64_t n, int64_t fail_at, int64_t odd_shape_at) -> std::shared_ptr<Source> {
    return std::make_shared<DebugSource>(n, fail_at, odd_shape_at);
  }, py::arg("n"), py::arg("fail_at") = -1, py::arg("odd_shape_at") = -1);

  m.def("data_shuffle_order", [](int64_t n, int64_t buffer, uint64_t key) {
    return to_numpy(buffer_shuffle_order(n, buffer, key));
  }, py::arg("n"), py::arg("buffer_size"), py::arg("key"));
});
