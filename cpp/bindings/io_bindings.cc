// podlet._core file readers: read_idx (MNIST / Fashion-MNIST IDX files, plain or gzip).
// module.cc calls bind_io(m) after registering Array and the error translator, so the
// returned podlet::Array and podlet::ValueError (-> podlet.PodletError) are translated.
#include <pybind11/pybind11.h>
#include <pybind11/stl/filesystem.h>

#include "podlet/io/idx.h"

namespace py = pybind11;

void bind_io(py::module_& m) {
  m.def(
      "read_idx",
      [](const std::filesystem::path& path) {
        py::gil_scoped_release nogil;
        return podlet::io::read_idx(path.string());
      },
      py::arg("path"),
      "Reads an IDX file (gzip-compressed or plain) into an Array. Type codes 0x08 "
      "uint8, 0x0D float32, 0x0E float64 keep their dtype; 0x09 int8, 0x0B int16 and "
      "0x0C int32 become int32. Raises PodletError naming the file on a bad magic "
      "number, truncated or oversized data, or a corrupt gzip stream.");
}
