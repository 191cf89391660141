#include "podlet/prims/common.h"

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

}  // namespace podlet
