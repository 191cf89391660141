// HDF5 dataset shards: see hdf5_shards.h.
#include "podlet/io/hdf5_shards.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "podlet/error.h"
#include "podlet/parallel.h"

namespace podlet::io {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace {

// Owns one HDF5 identifier.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept { reset(); id_ = o.id_; close_ = o.close_; o.id_ = -1; return *this; }
  ~Hid() { reset(); }
  void reset() { if (id_ >= 0 && close_) close_(id_); id_ = -1; }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// HDF5 prints its error stack to stderr by default; podlet reports errors itself.
struct QuietErrors {
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  QuietErrors() { H5Eget_auto2(H5E_DEFAULT, &func, &data); H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func, data); }
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ValueError(fmt("HDF5 shard '", path, "': ", what));
}

std::vector<hsize_t> dims_of(hid_t dset) {
  Hid space(H5Dget_space(dset), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> d(std::max(rank, 0));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
  return d;
}

std::string dims_str(const std::vector<hsize_t>& d) {
  std::vector<int64_t> s(d.begin(), d.end());
  return shape_str(s);
}

// Reads a 1-D string dataset or attribute (variable or fixed length) into `out`.
template <class ReadFn>
std::vector<std::string> read_strings(hid_t ftype, hsize_t n, ReadFn read, const std::string& path,
                                      const std::string& what) {
  std::vector<std::string> out;
  if (H5Tget_class(ftype) != H5T_STRING)
    fail(path, fmt("'", what, "' must hold strings (h5py: dtype=h5py.string_dtype() or 'S<n>')"));
  Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), H5Tget_cset(ftype));
  if (H5Tis_variable_str(ftype) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    std::vector<char*> ptrs(n, nullptr);
    if (n && read(mem.get(), ptrs.data()) < 0) fail(path, fmt("cannot read '", what, "'"));
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    if (n) {
      hsize_t dims[1] = {n};
      Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
      H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    }
  } else {
    size_t len = H5Tget_size(ftype);
    H5Tset_size(mem.get(), len);
    H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
    std::vector<char> buf(n * len + 1, '\0');
    if (n && read(mem.get(), buf.data()) < 0) fail(path, fmt("cannot read '", what, "'"));
    for (hsize_t i = 0; i < n; ++i) {
      const char* p = buf.data() + i * len;
      out.emplace_back(p, strnlen(p, len));
    }
  }
  return out;
}

struct Shard {
  std::string path;
  Hid file, image;
  int64_t n = 0;
  std::vector<int32_t> labels;
  std::vector<std::string> ids;
};

class Hdf5Source : public data::Source {
 public:
  explicit Hdf5Source(const std::vector<std::string>& paths) {
    if (paths.empty()) throw ValueError("hdf5_source: no shard files given");
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietErrors quiet;
    offsets_.push_back(0);
    for (const auto& p : paths) {
      shards_.push_back(open(p));
      offsets_.push_back(offsets_.back() + shards_.back().n);
    }
    int64_t k = int64_t(class_names_.size());
    for (auto& s : shards_)
      for (int64_t i = 0; i < s.n; ++i)
        if (s.labels[i] < 0 || (k > 0 && s.labels[i] >= k))
          fail(s.path, fmt("label[", i, "] = ", s.labels[i], " out of range; expected 0..", k - 1,
                           k > 0 ? fmt(" (", k, " class_names)") : std::string(" (labels are non-negative)")));
  }
  int64_t size() const override { return offsets_.back(); }
  std::string describe() const override {
    return fmt("hdf5:", shards_[0].path, shards_.size() > 1 ? fmt(" (+", shards_.size() - 1, " shards)") : std::string());
  }
  std::vector<std::string> class_names() const override { return class_names_; }

  data::Record get(int64_t index) const override {
    if (index < 0 || index >= size())
      throw ValueError(fmt(describe(), ": example ", index, " out of range (", size(), " examples)"));
    size_t s = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin()) - 1;
    const Shard& sh = shards_[s];
    int64_t k = index - offsets_[s];
    data::Record r;
    r.height = h_; r.width = w_; r.channels = c_;
    r.label = sh.labels[k];
    r.id = sh.ids.empty() ? fmt(sh.path, ":", k) : sh.ids[k];
    r.image.resize(size_t(h_) * w_ * c_);
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietErrors quiet;
    Hid fspace(H5Dget_space(sh.image.get()), H5Sclose);
    hsize_t start[4] = {hsize_t(k), 0, 0, 0}, count[4] = {1, hsize_t(h_), hsize_t(w_), hsize_t(c_)};
    int rank = rank_of_image_[s];
    H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
    Hid mspace(H5Screate_simple(rank, count, nullptr), H5Sclose);
    if (H5Dread(sh.image.get(), H5T_NATIVE_UINT8, mspace.get(), fspace.get(), H5P_DEFAULT, r.image.data()) < 0)
      fail(sh.path, fmt("cannot read image[", k, "] (example ", index, "): the file may be corrupt"));
    return r;
  }

 private:
  Shard open(const std::string& path) {
    Shard s;
    s.path = path;
    s.file = Hid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!s.file.ok()) fail(path, "cannot open (missing, unreadable or not an HDF5 file)");
    hid_t f = s.file.get();
    auto need = [&](const char* name) {
      if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
        fail(path, fmt("no dataset '", name, "'; expected datasets image (N,H,W,C) uint8, label (N,), id (N,) strings"));
      Hid d(H5Dopen2(f, name, H5P_DEFAULT), H5Dclose);
      if (!d.ok()) fail(path, fmt("'", name, "' is not a dataset"));
      return d;
    };
    s.image = need("image");
    auto idims = dims_of(s.image.get());
    {
      Hid t(H5Dget_type(s.image.get()), H5Tclose);
      if (H5Tget_class(t.get()) != H5T_INTEGER || H5Tget_size(t.get()) != 1 || H5Tget_sign(t.get()) != H5T_SGN_NONE)
        fail(path, "'image' must be uint8");
    }
    if (idims.size() != 4 && idims.size() != 3)
      fail(path, fmt("'image' has shape ", dims_str(idims), "; expected (N, H, W, C) or (N, H, W)"));
    int h = int(idims[1]), w = int(idims[2]), c = idims.size() == 4 ? int(idims[3]) : 1;
    if (h_ < 0) { h_ = h; w_ = w; c_ = c; }
    else if (h != h_ || w != w_ || c != c_)
      fail(path, fmt("images are ", h, "x", w, "x", c, ", but the first shard '", shards_[0].path, "' has ",
                     h_, "x", w_, "x", c_));
    rank_of_image_.push_back(int(idims.size()));
    s.n = int64_t(idims[0]);

    Hid label = need("label");
    auto ldims = dims_of(label.get());
    {
      Hid t(H5Dget_type(label.get()), H5Tclose);
      if (H5Tget_class(t.get()) != H5T_INTEGER) fail(path, "'label' must hold integers");
    }
    if (ldims.size() != 1 || int64_t(ldims[0]) != s.n)
      fail(path, fmt("'label' has shape ", dims_str(ldims), "; expected (", s.n, ",) to match 'image'"));
    std::vector<int64_t> l64(s.n);
    if (s.n && H5Dread(label.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, l64.data()) < 0)
      fail(path, "cannot read 'label'");
    for (int64_t i = 0; i < s.n; ++i) {
      if (l64[i] < INT32_MIN || l64[i] > INT32_MAX) fail(path, fmt("label[", i, "] = ", l64[i], " does not fit int32"));
      s.labels.push_back(int32_t(l64[i]));
    }

    if (H5Lexists(f, "id", H5P_DEFAULT) > 0) {
      Hid id = need("id");
      auto d = dims_of(id.get());
      if (d.size() != 1 || int64_t(d[0]) != s.n)
        fail(path, fmt("'id' has shape ", dims_str(d), "; expected (", s.n, ",) to match 'image'"));
      Hid t(H5Dget_type(id.get()), H5Tclose);
      s.ids = read_strings(t.get(), d[0], [&](hid_t mem, void* buf) {
        return H5Dread(id.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); }, path, "id");
    }

    if (H5Aexists(f, "class_names") > 0) {
      Hid a(H5Aopen(f, "class_names", H5P_DEFAULT), H5Aclose);
      Hid space(H5Aget_space(a.get()), H5Sclose);
      hssize_t n = H5Sget_simple_extent_npoints(space.get());
      Hid t(H5Aget_type(a.get()), H5Tclose);
      auto names = read_strings(t.get(), hsize_t(std::max<hssize_t>(n, 0)), [&](hid_t mem, void* buf) {
        return H5Aread(a.get(), mem, buf); }, path, "class_names attribute");
      if (shards_.empty()) class_names_ = names;
      else if (names != class_names_) fail(path, fmt("class_names differ from those of '", shards_[0].path, "'"));
    }
    return s;
  }

  std::vector<Shard> shards_;
  std::vector<int> rank_of_image_;
  std::vector<int64_t> offsets_;
  std::vector<std::string> class_names_;
  int h_ = -1, w_ = -1, c_ = -1;
};

Hid vlen_utf8() {
  Hid t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

std::shared_ptr<data::Source> open_hdf5_source(const std::vector<std::string>& paths) {
  return std::make_shared<Hdf5Source>(paths);
}

void write_hdf5(const data::Source& src, const std::string& path, int gzip_level) {
  if (gzip_level < 0 || gzip_level > 9) throw ValueError(fmt("export_hdf5: gzip level ", gzip_level, " not in 0..9"));
  const int64_t n = src.size();
  constexpr int64_t kBlock = 64;
  std::vector<data::Record> block(kBlock);
  std::vector<std::exception_ptr> errors(kBlock);
  std::vector<int64_t> labels;
  std::vector<std::string> ids;
  labels.reserve(n);
  ids.reserve(n);
  int h = -1, w = -1, c = -1;
  Hid file, image;
  auto fetch = [&](int64_t b, int64_t m) {
    parallel_for(m, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        errors[j] = nullptr;
        try { block[j] = src.get(b + j); } catch (...) { errors[j] = std::current_exception(); }
      }
    });
    for (int64_t j = 0; j < m; ++j) if (errors[j]) std::rethrow_exception(errors[j]);
  };
  for (int64_t b = 0; b < std::max<int64_t>(n, 1); b += kBlock) {
    int64_t m = std::min(kBlock, n - b);
    if (m > 0) fetch(b, m);  // sources may use HDF5 themselves: fetch outside the lock
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietErrors quiet;
    if (b == 0) {
      file = Hid(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      if (!file.ok()) fail(path, "cannot create the file (does the directory exist and is it writable?)");
      if (n > 0) { h = block[0].height; w = block[0].width; c = block[0].channels; }
      else { h = w = c = 0; }
      hsize_t dims[4] = {hsize_t(n), hsize_t(h), hsize_t(w), hsize_t(c)};
      Hid space(H5Screate_simple(4, dims, nullptr), H5Sclose);
      Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      if (n > 0 && h > 0 && w > 0 && c > 0) {
        hsize_t chunk[4] = {1, hsize_t(h), hsize_t(w), hsize_t(c)};  // one image per chunk: get() reads one
        H5Pset_chunk(dcpl.get(), 4, chunk);
        if (gzip_level > 0) H5Pset_deflate(dcpl.get(), unsigned(gzip_level));
      }
      image = Hid(H5Dcreate2(file.get(), "image", H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                  H5Dclose);
      if (!image.ok()) fail(path, "cannot create dataset 'image'");
    }
    for (int64_t j = 0; j < m; ++j) {
      const data::Record& r = block[j];
      if (r.height != h || r.width != w || r.channels != c)
        fail(path, fmt("example ", b + j, " of ", src.describe(), " is ", r.height, "x", r.width, "x", r.channels,
                       ", but example 0 is ", h, "x", w, "x", c, "; HDF5 shards hold images of one shape"));
      if (r.label < 0)
        fail(path, fmt("example ", b + j, " of ", src.describe(), " has negative label ", r.label));
      if (r.image.size() != size_t(h) * w * c)
        fail(path, fmt("example ", b + j, " has ", r.image.size(), " image bytes, expected ", h, "x", w, "x", c));
      Hid fspace(H5Dget_space(image.get()), H5Sclose);
      hsize_t start[4] = {hsize_t(b + j), 0, 0, 0}, count[4] = {1, hsize_t(h), hsize_t(w), hsize_t(c)};
      H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
      Hid mspace(H5Screate_simple(4, count, nullptr), H5Sclose);
      if (H5Dwrite(image.get(), H5T_NATIVE_UINT8, mspace.get(), fspace.get(), H5P_DEFAULT, r.image.data()) < 0)
        fail(path, fmt("cannot write image ", b + j, " (disk full?)"));
      labels.push_back(r.label);
      ids.push_back(r.id);
    }
  }
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  auto write_strings = [&](hid_t loc, const char* name, const std::vector<std::string>& v, bool attribute) {
    hsize_t dims[1] = {v.size()};
    Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    Hid type = vlen_utf8();
    std::vector<const char*> ptrs;
    for (auto& s : v) ptrs.push_back(s.c_str());
    herr_t rc;
    if (attribute) {
      Hid a(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      rc = a.ok() ? H5Awrite(a.get(), type.get(), ptrs.data()) : -1;
    } else {
      Hid d(H5Dcreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
      rc = d.ok() ? (v.empty() ? 0 : H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data())) : -1;
    }
    if (rc < 0) fail(path, fmt("cannot write '", name, "'"));
  };
  {
    hsize_t dims[1] = {hsize_t(n)};
    Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    Hid d(H5Dcreate2(file.get(), "label", H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!d.ok() || (n && H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0))
      fail(path, "cannot write 'label'");
  }
  write_strings(file.get(), "id", ids, false);
  write_strings(file.get(), "class_names", src.class_names(), true);
  image.reset();
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) fail(path, "cannot flush (disk full?)");
  file.reset();
}

}  // namespace podlet::io
