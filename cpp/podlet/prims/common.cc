#include "podlet/prims/common.h"
#include <cstring>
#include "podlet/kernels/stream_out.h"
#include <algorithm>
#include <vector>

namespace podlet {

void check_arity(const std::vector<AVal>& in, size_t n) {
  if (in.size() != n) throw ValueError(fmt("expected ", n, " operands, got ", in.size()));
}
void check_same_dtype(const std::vector<AVal>& in) {
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].dtype != in[0].dtype)
      throw DTypeError(fmt("operands must have the same dtype, got ", dtype_name(in[0].dtype), " and ",
                           dtype_name(in[i].dtype), " (cast one with astype)"));
}
Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt("shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast together"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}
Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape st(out.size(), 0);
  Shape s = strides_of(in);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[lead + i] = in[i] == 1 ? 0 : s[i];
  return st;
}
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int rank, const char* what) {
  std::vector<int64_t> r;
  for (auto a : axes) {
    int64_t x = a < 0 ? a + rank : a;
    if (x < 0 || x >= rank) throw ShapeError(fmt(what, " ", a, " is out of range for an array of rank ", rank));
    r.push_back(x);
  }
  return r;
}

// As LayerNorm's rows (kernels/norm_avx512_impl.h): twice the fused outputs' threshold,
// so an output that may still sit in L3 for its reader keeps plain stores.
constexpr int64_t kStreamCopyBytes = 2 * kernels::kStreamOutBytes;

void copy_strided(const void* src, int64_t sbase, const Shape& src_st, void* dst, int64_t dbase,
                  const Shape& dst_st, const Shape& shape, size_t isz) {
  const int64_t n = numel(shape);
  if (n == 0) return;
  // Size-1 dimensions dropped, and a dimension merged into the next when both strides
  // run on across it: a slice of qkv [B, T, 3, N, H] copies rows of N H elements, not of
  // H (Swin's slices and concatenations ran at a quarter of the copy bandwidth).
  Shape sh, ss, ds;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sh.empty() && ss.back() == src_st[d] * shape[d] && ds.back() == dst_st[d] * shape[d]) {
      sh.back() *= shape[d];
      ss.back() = src_st[d];
      ds.back() = dst_st[d];
    } else {
      sh.push_back(shape[d]);
      ss.push_back(src_st[d]);
      ds.push_back(dst_st[d]);
    }
  }
  const int r = int(sh.size());
  const int64_t inner = r ? sh[r - 1] : 1;
  const int64_t si = r ? ss[r - 1] : 0, di = r ? ds[r - 1] : 0;
  const int64_t rows = n / inner;
  // Rows of at least a line contiguous on both sides, the output at least
  // kStreamCopyBytes: the rows go out with non-temporal stores (kernels::stream_bytes,
  // SSE2 in this baseline build), each row's unaligned head and tail by memcpy. Swin-T's
  // window partition (rows of 1344 bytes, 19 MB) ran 1.46-1.59x faster alone, its patch
  // merging's f32 rows (384 bytes, 38 MB) 1.23-1.32x.
  const bool stream = si == 1 && di == 1 && inner * int64_t(isz) >= 64 && n * int64_t(isz) >= kStreamCopyBytes;
  auto body = [&](auto tag) {
    using E = decltype(tag);
    const E* xs = static_cast<const E*>(src);
    E* ys = static_cast<E*>(dst);
    if (rows == 1 && si == 1 && di == 1) {  // one contiguous run (a slice of leading rows, a
      // concatenation's part): cut into chunks for the threads, where a row per task left
      // one thread copying it all
      parallel_for(inner, 4 * kGrain, [&](int64_t b, int64_t e) {
        if (stream) {
          kernels::stream_bytes(ys + dbase + b, xs + sbase + b, size_t(e - b) * sizeof(E));
          _mm_sfence();
        } else {
          std::memcpy(ys + dbase + b, xs + sbase + b, size_t(e - b) * sizeof(E));
        }
      });
      return;
    }
    parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
      // The first row's index by division, the next ones by counting.
      std::vector<int64_t> idx(size_t(std::max(r, 1)), 0);
      int64_t rem = b, so = sbase, dof = dbase;
      for (int d = r - 2; d >= 0; --d) { idx[d] = rem % sh[d]; rem /= sh[d]; so += idx[d] * ss[d]; dof += idx[d] * ds[d]; }
      for (int64_t row = b; row < e; ++row) {
        if (stream) kernels::stream_bytes(ys + dof, xs + so, size_t(inner) * sizeof(E));
        else if (si == 1 && di == 1) std::memcpy(ys + dof, xs + so, size_t(inner) * sizeof(E));
        else for (int64_t j = 0; j < inner; ++j) ys[dof + j * di] = xs[so + j * si];
        for (int d = r - 2; d >= 0; --d) {
          so += ss[d];
          dof += ds[d];
          if (++idx[d] < sh[d]) break;
          so -= sh[d] * ss[d];
          dof -= sh[d] * ds[d];
          idx[d] = 0;
        }
      }
      if (stream) _mm_sfence();
    });
  };
  switch (isz) {
    case 1: body(uint8_t()); break; case 2: body(uint16_t()); break;
    case 4: body(uint32_t()); break; case 8: body(uint64_t()); break;
    default: throw Error(fmt("copy_strided: unsupported element size ", isz));
  }
}

void fill_elements(void* dst, int64_t n, const void* value, size_t isz) {
  auto body = [&](auto tag) {
    using E = decltype(tag);
    E v; std::memcpy(&v, value, sizeof(E));
    E* ys = static_cast<E*>(dst);
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) { std::fill(ys + b, ys + e, v); });
  };
  switch (isz) {
    case 1: body(uint8_t()); break; case 2: body(uint16_t()); break;
    case 4: body(uint32_t()); break; case 8: body(uint64_t()); break;
    default: throw Error(fmt("fill_elements: unsupported element size ", isz));
  }
}

int64_t read_index_scalar(const Array& a) {
  switch (a.dtype()) {
    case DType::i32: return a.data<int32_t>()[0];
    case DType::u32: return a.data<uint32_t>()[0];
    case DType::u8: return a.data<uint8_t>()[0];
    default: throw DTypeError(fmt("index must be an integer, got ", dtype_name(a.dtype())));
  }
}

}  // namespace podlet
