// podlet._core: the only C++ that knows Python. Arrays, primitive application, graphs
// (trace / inline / vjp / run) and the error types.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/numpy.h>
#include <cstring>
#include <functional>
#include "podlet/sanitize.h"
#include "podlet/ir/graph.h"
#include "podlet/ir/subgraph.h"
#include "podlet/ir/scan_hoist.h"
#include "podlet/parallel.h"
#include "podlet/data/source.h"
#include "registry.h"

namespace py = pybind11;
using namespace podlet;

static PyObject* g_PodletError = nullptr;
static PyObject* g_ShapeError = nullptr;
static PyObject* g_DTypeError = nullptr;

static AttrValue to_attr(const std::string& key, py::handle v) {
  // Sub-graphs (control flow, custom rules) are copied once into an immutable shared graph.
  if (py::isinstance<Graph>(v)) return GraphRef(std::make_shared<const Graph>(v.cast<const Graph&>()));
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    auto seq = v.cast<py::sequence>();
    if (py::len(seq) > 0 && py::isinstance<Graph>(seq[0])) {
      std::vector<GraphRef> gs;
      for (auto e : seq) gs.push_back(std::make_shared<const Graph>(e.cast<const Graph&>()));
      return gs;
    }
  }
  if (py::isinstance<py::bool_>(v)) return int64_t(v.cast<bool>());
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::hasattr(v, "__index__") && !py::isinstance<py::sequence>(v)) return v.attr("__index__")().cast<int64_t>();
  if (py::isinstance<py::sequence>(v)) {
    std::vector<int64_t> ints; std::vector<double> dbls; bool all_int = true;
    // Flatten one level of nesting: [(lo, hi), ...] -> [lo, hi, ...].
    std::function<void(py::handle)> walk = [&](py::handle x) {
      if (py::isinstance<py::sequence>(x) && !py::isinstance<py::str>(x)) { for (auto e : x) walk(e); return; }
      if (py::isinstance<py::float_>(x)) { all_int = false; dbls.push_back(x.cast<double>()); return; }
      int64_t iv = py::isinstance<py::int_>(x) ? x.cast<int64_t>() : x.attr("__index__")().cast<int64_t>();
      ints.push_back(iv); dbls.push_back(double(iv));
    };
    walk(v);
    if (all_int) return ints;
    return dbls;
  }
  throw ValueError(fmt("attribute '", key, "' has unsupported type ", std::string(py::str(v.get_type()))));
}

static Attrs to_attrs(const py::dict& d) {
  Attrs a;
  for (auto kv : d) { auto k = kv.first.cast<std::string>(); a.set(k, to_attr(k, kv.second)); }
  return a;
}

static py::tuple shape_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
  return t;
}

static DType dtype_of_numpy(const py::dtype& dt) {
  std::string name = py::str(dt.attr("name"));
  if (name == "bool") return DType::boolean;
  return dtype_from_name(name);  // float32 bfloat16 float64 int32 uint32 uint8
}

static const char* buffer_format(DType d) {
  switch (d) {
    case DType::f32: return "f"; case DType::f64: return "d"; case DType::i32: return "i";
    case DType::u32: return "I"; case DType::u8: return "B"; case DType::boolean: return "?";
    default: return nullptr;
  }
}

static Array array_from_numpy(py::array arr, bool copy) {
  DType d = dtype_of_numpy(arr.dtype());
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  bool contiguous = arr.flags() & py::array::c_style;
  if (!contiguous) { arr = py::array::ensure(arr, py::array::c_style); copy = false; /* already a fresh copy */ 
    if (!arr) throw ValueError("could not make the array C-contiguous"); }
  void* ptr = const_cast<void*>(arr.data());
  bool aligned = (reinterpret_cast<uintptr_t>(ptr) % kAlign) == 0;
  if (!copy && aligned) {
    // Zero-copy: the Array keeps the NumPy array alive. The deleter may run on a thread
    // that does not hold the GIL (the executor releases it), so take it.
    auto* keep = new py::object(arr);
    // After the interpreter is gone (a static cache freed at exit) the object is left alone.
    std::shared_ptr<void> owner(ptr, [keep](void*) {
      if (!Py_IsInitialized()) return;
      py::gil_scoped_acquire g;
      delete keep;
    });
    return Array(d, shape, ptr, owner);
  }
  Array a(d, shape);
  if (a.nbytes()) std::memcpy(a.raw(), ptr, a.nbytes());
  return a;
}

// A read-only NumPy view sharing the Array's buffer; bf16 comes out as uint16 and the
// Python side reinterprets it as ml_dtypes.bfloat16.
static py::array numpy_view(const Array& a) {
  std::string fmt_s = a.dtype() == DType::bf16 ? "H" : buffer_format(a.dtype());
  py::dtype dt(fmt_s);
  std::vector<py::ssize_t> shape(a.shape().begin(), a.shape().end());
  std::vector<py::ssize_t> strides;
  for (auto s : strides_of(a.shape())) strides.push_back(s * itemsize(a.dtype()));
  auto* holder = new std::shared_ptr<void>(a.storage());
  py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  void* data = a.raw();
  static char dummy[kAlign];
  if (!data) data = dummy;
  py::array out(dt, shape, strides, data, base);
  py::detail::array_proxy(out.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return out;
}

static std::vector<py::tuple> describe(const Graph& g, const std::vector<int>& ids) {
  std::vector<py::tuple> r;
  for (int v : ids) r.push_back(py::make_tuple(v, dtype_name(g.aval(v).dtype), shape_tuple(g.aval(v).shape)));
  return r;
}

void bind_io(py::module_& m);  // io_bindings.cc
void bind_isa(py::module_& m);  // isa_bindings.cc

namespace podlet_bindings {
std::vector<BindFn>& binders() {
  static std::vector<BindFn> b;
  return b;
}
}  // namespace podlet_bindings

PYBIND11_MODULE(_core, m) {
  m.doc() = "podlet C++ core";
  route_ubsan_reports();
  m.attr("sanitizer") = sanitizer_build();  // "address" / "thread" in scripts/sanitize.sh builds
  // Cached fused sub-graphs hold constants that may own NumPy arrays: free them while
  // the interpreter is still alive.
  py::module_::import("atexit").attr("register")(py::cpp_function([]() { clear_scan_plans(); clear_subgraph_cache(); }));
  g_PodletError = PyErr_NewException("podlet.PodletError", PyExc_ValueError, nullptr);
  g_ShapeError = PyErr_NewException("podlet.ShapeError", g_PodletError, nullptr);
  {
    py::tuple bases = py::make_tuple(py::handle(g_PodletError), py::handle(PyExc_TypeError));
    g_DTypeError = PyErr_NewException("podlet.DTypeError", bases.ptr(), nullptr);
  }
  m.attr("PodletError") = py::handle(g_PodletError);
  m.attr("ShapeError") = py::handle(g_ShapeError);
  m.attr("DTypeError") = py::handle(g_DTypeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try { if (p) std::rethrow_exception(p); }
    catch (const ShapeError& e) { PyErr_SetString(g_ShapeError, e.what()); }
    catch (const DTypeError& e) { PyErr_SetString(g_DTypeError, e.what()); }
    catch (const Error& e) { PyErr_SetString(g_PodletError, e.what()); }
  });

  py::class_<Array>(m, "Array", py::buffer_protocol(), py::dynamic_attr())
      .def_static("from_numpy", &array_from_numpy, py::arg("array"), py::arg("copy") = true)
      .def_property_readonly("shape", [](const Array& a) { return shape_tuple(a.shape()); })
      .def_property_readonly("_dtype_name", [](const Array& a) { return dtype_name(a.dtype()); })
      .def_property_readonly("ndim", &Array::ndim)
      .def_property_readonly("size", &Array::size)
      .def_property_readonly("nbytes", &Array::nbytes)
      .def_property_readonly("_address", [](const Array& a) { return reinterpret_cast<uintptr_t>(a.raw()); })
      .def("_numpy_view", &numpy_view)
      .def_buffer([](const Array& a) -> py::buffer_info {
        const char* f = buffer_format(a.dtype());
        if (!f) throw py::buffer_error("bfloat16 has no PEP 3118 format; use np.asarray(x) (ml_dtypes.bfloat16)");
        std::vector<py::ssize_t> shape(a.shape().begin(), a.shape().end()), strides;
        for (auto s : strides_of(a.shape())) strides.push_back(s * itemsize(a.dtype()));
        return py::buffer_info(a.raw(), itemsize(a.dtype()), f, a.ndim(), shape, strides, /*readonly=*/true);
      });

  m.def("apply", [](const std::string& prim, const std::vector<Array>& args, const py::dict& attrs) {
    const PrimDef& p = lookup_prim(prim);
    Attrs a = to_attrs(attrs);
    py::gil_scoped_release nogil;
    return apply_prim(p, args, a);
  }, py::arg("prim"), py::arg("args"), py::arg("attrs") = py::dict());

  m.def("infer", [](const std::string& prim, const std::vector<std::pair<std::string, Shape>>& in, const py::dict& attrs) {
    std::vector<AVal> ia;
    for (auto& [d, s] : in) ia.push_back(AVal{dtype_from_name(d), s});
    std::vector<py::tuple> r;
    for (auto& a : infer_shapes(lookup_prim(prim), ia, to_attrs(attrs)))
      r.push_back(py::make_tuple(dtype_name(a.dtype), shape_tuple(a.shape)));
    return r;
  });
  m.def("prim_names", &prim_names);
  // What the registry row of a primitive declares (tests check every primitive has a
  // batching rule or a stated reason why none can exist).
  m.def("prim_info", [](const std::string& name) {
    const PrimDef& p = lookup_prim(name);
    py::dict d;
    d["has_vjp"] = bool(p.vjp);
    d["has_batch"] = bool(p.batch);
    d["batch_always"] = p.batch_always;
    d["no_batch_reason"] = p.no_batch_reason ? py::object(py::str(p.no_batch_reason)) : py::object(py::none());
    d["zero_grad"] = p.zero_grad;
    return d;
  }, py::arg("name"));
  bind_io(m);
  bind_isa(m);
  // The base class of every dataset; binders add subclasses and factories.
  py::class_<data::Source, std::shared_ptr<data::Source>>(m, "DataSource")
      .def("__len__", [](const data::Source& s) { return s.size(); })
      .def("describe", &data::Source::describe)
      .def("class_names", &data::Source::class_names)
      .def("__repr__", [](const data::Source& s) { return "<DataSource " + s.describe() + ">"; })
      .def("get", [](const data::Source& s, int64_t i) {
        if (i < 0) i += s.size();
        if (i < 0 || i >= s.size())
          throw ValueError(fmt("index ", i, " out of range for ", s.describe(), " of size ", s.size()));
        data::Record r;
        { py::gil_scoped_release nogil; r = s.get(i); }
        py::array_t<uint8_t> img({r.height, r.width, r.channels});
        std::memcpy(img.mutable_data(), r.image.data(), r.image.size());
        py::dict d;
        d["image"] = img; d["label"] = r.label; d["id"] = r.id;
        return d;
      }, py::arg("index"), "One decoded example as {'image': uint8 HxWxC, 'label': int, 'id': str}.");
  for (auto f : podlet_bindings::binders()) f(m);
  m.def("set_num_threads", &set_num_threads);
  m.def("num_threads", &num_threads);
  m.def("memory_stats", []() { auto& s = mem_stats(); return py::make_tuple(s.live, s.peak, s.pooled); },
        "(bytes of buffers in use, their peak since reset_peak_memory, bytes freed and pooled for reuse)");
  m.def("reset_peak_memory", &reset_peak_memory);
  m.def("set_profiling", &set_profiling, py::arg("on"), py::arg("by_shape") = false);
  m.def("take_profile", []() {
    py::dict d;
    for (auto& [k, e] : take_profile()) d[py::str(k)] = py::make_tuple(e.calls, e.seconds, e.flops);
    return d;
  });

  py::class_<Graph>(m, "Graph")
      .def(py::init<>())
      .def("add_input", [](Graph& g, const std::string& d, const Shape& s) { return g.add_input(AVal{dtype_from_name(d), s}); })
      .def("add_const", &Graph::add_const)
      .def("add", [](Graph& g, const std::string& prim, const std::vector<int>& in, const py::dict& attrs, const std::string& where) {
        return describe(g, g.add(prim, in, to_attrs(attrs), where));
      }, py::arg("prim"), py::arg("inputs"), py::arg("attrs") = py::dict(), py::arg("where") = "")
      .def("aval", [](const Graph& g, int v) { return py::make_tuple(dtype_name(g.aval(v).dtype), shape_tuple(g.aval(v).shape)); })
      .def_readwrite("outputs", &Graph::outputs)
      .def_readonly("inputs", &Graph::inputs)
      .def_property_readonly("num_nodes", [](const Graph& g) { return g.nodes.size(); })
      .def_property_readonly("num_consts", [](const Graph& g) { return g.consts.size(); })
      // nested=True also counts the nodes of sub-graphs (scan / cond / checkpoint bodies).
      .def("prim_counts", [](const Graph& g, bool nested) {
        std::map<std::string, int> c;
        std::function<void(const Graph&)> walk = [&](const Graph& h) {
          for (auto& n : h.nodes) {
            c[n.prim->name]++;
            if (nested) for (auto& r : subgraphs_of(n.attrs)) walk(*r);
          }
        };
        walk(g);
        return c; }, py::arg("nested") = false)
      .def("inline", [](Graph& g, const Graph& sub, const std::vector<int>& args, const std::string& where) {
        return describe(g, g.inline_graph(sub, args, where));
      }, py::arg("sub"), py::arg("args"), py::arg("where") = "")
      .def("dce", &Graph::dce)
      .def("flops", &Graph::flops)
      .def("dump", &Graph::dump)
      .def("__repr__", &Graph::dump)
      .def("output_avals", [](const Graph& g) {
        std::vector<py::tuple> r;
        for (int v : g.outputs) r.push_back(py::make_tuple(dtype_name(g.aval(v).dtype), shape_tuple(g.aval(v).shape)));
        return r; })
      .def("vjp", &vjp_graph, py::arg("wrt"), py::arg("ct_outputs"))
      .def("batch", [](const Graph& g, const std::vector<int>& in_bdim, int64_t size, const std::string& axis_name) {
        std::vector<int> ob;
        Graph r = batch_graph(g, in_bdim, size, axis_name, ob);
        return py::make_tuple(std::move(r), ob);
      }, py::arg("in_bdims"), py::arg("size"), py::arg("axis_name") = "")
      .def("partition", [](const Graph& g, const std::vector<int>& in_dim, int64_t n, const std::string& axis_name,
                           bool gather_outputs) {
        std::vector<int> od;
        std::map<std::string, int> fb;
        Graph r = partition_graph(g, in_dim, n, axis_name, gather_outputs, od, fb);
        r.dce();
        return py::make_tuple(std::move(r), od, fb);
      }, py::arg("in_dims"), py::arg("n"), py::arg("axis_name"), py::arg("gather_outputs") = false)
      .def("copy", [](const Graph& g) { return Graph(g); })
      .def("run", [](const Graph& g, const std::vector<Array>& args) {
        py::gil_scoped_release nogil;
        return run_graph(g, args);
      });
}
