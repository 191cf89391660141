// podlet._core.run_pmap: the pmap executor (exec/pmap.h) for python/podlet/_src/pmap.py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "podlet/exec/pmap.h"
#include "podlet/exec/distributed.h"
#include "registry.h"

namespace py = pybind11;

static podlet_bindings::Binder reg_pmap([](py::module_& m) {
  m.def(
      "run_pmap",
      [](const podlet::Graph& g, const std::vector<podlet::Array>& args, const std::vector<bool>& replicated,
         int n_local) {
        podlet::PmapOutputs r;
        {
          py::gil_scoped_release nogil;
          r = podlet::run_graph_pmap(g, args, replicated, n_local);
        }
        return py::make_tuple(r.values, r.replicated);
      },
      py::arg("graph"), py::arg("args"), py::arg("replicated"), py::arg("n_local"),
      "Runs a traced graph on n_local replicas in lockstep. Returns (values, replicated).");
  m.def("set_pmap_merge", &podlet::set_pmap_merge, py::arg("on"));
  m.def("pmap_merge", &podlet::pmap_merge);
  m.def("set_pmap_replica_parallel", &podlet::set_pmap_replica_parallel, py::arg("on"));
  m.def("pmap_replica_parallel", &podlet::pmap_replica_parallel);
  m.def("have_mpi", &podlet::have_mpi);
  m.def("mpi_initialize", []() { py::gil_scoped_release nogil; podlet::mpi_initialize(); });
  m.def("mpi_finalize", []() { py::gil_scoped_release nogil; podlet::mpi_finalize(); });
  m.def("process_count", []() { return podlet::comm() ? podlet::comm()->size() : 1; });
  m.def("process_index", []() { return podlet::comm() ? podlet::comm()->rank() : 0; });
  m.def(
      "process_allgather_bytes",
      [](const py::bytes& data) {
        std::string mine = data;
        std::vector<std::string> all;
        {
          py::gil_scoped_release nogil;
          all = podlet::process_allgather_bytes(mine);
        }
        py::list out;
        for (auto& s : all) out.append(py::bytes(s));
        return out;
      },
      py::arg("data"),
      "Every process's bytes (any lengths), in process order; [data] in a single process. "
      "Bounded by PODLET_COLLECTIVE_TIMEOUT like pmap's collectives.");
  m.def("take_pmap_profile", []() {
    py::dict d;
    for (auto& [k, e] : podlet::take_pmap_profile())
      d[py::make_tuple(std::get<0>(k), std::get<1>(k), std::get<2>(k))] =
          py::make_tuple(e.calls, e.seconds, e.flops, e.bytes);
    return d;
  }, "{(prim, dtype, how): (calls, seconds, flops, bytes)} of pmap'd graphs since the last take; clears.");
  m.def("mpi_abort", [](int code) { podlet::mpi_abort(code); }, py::arg("code"),
        "Ends every process of the job with this exit status (MPI_Abort).");
});
