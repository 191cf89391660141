// Dense linear algebra (jax.lax.linalg): cholesky, triangular_solve, lu, eigh, eig, qr, svd.
// Shape rules, Eigen kernels, FLOP counts and batching rules side by side.
//
// Every primitive takes matrices in the last two dims and maps over any leading dims
// (one Eigen call per matrix, matrices in parallel: each is computed alone, so the bits
// do not depend on the thread count). float32 and float64 only (the Python wrappers
// upcast or refuse bfloat16, as JAX does). Like LAPACK through JAX, bad input is not
// an exception: a matrix that is not positive definite gives a NaN Cholesky factor, a
// singular one an inf/NaN solve, a non-finite one NaN factors.
//
//   cholesky(a)                                      -> l        lower factor, a's lower triangle read
//   triangular_solve(a, b; lower, transpose_a, unit_diagonal)
//                                                    -> x        op(a) x = b, b (..., n, k); op = a or a^T
//   lu(a)                                            -> lu, pivots (int32, min(m,n)), permutation (int32, m)
//   eigh(a; lower)                                   -> v, w     w ascending, a = v diag(w) v^T
//   eig(a; compute_right_eigenvectors)               -> wr, wi[, vr, vi]   a real, a v = v diag(w):
//        real and imaginary parts of the eigenvalues (..., n) and right eigenvectors (..., n, n), as
//        LAPACK geev: conjugate pairs adjacent, positive imaginary part first; each eigenvector of
//        unit 2-norm, a complex one turned to make its largest component real and positive
//   qr(a; full_matrices)                             -> q, r
//   svd(a; full_matrices, compute_uv)                -> s[, u, vt]   s descending
//
// Only triangular_solve has a VJP here (it is linear in b, and every other VJP and JVP
// is built on it). The others are differentiated by custom_jvp rules in Python
// (python/podlet/_src/linalg.py: the formulas of jax/_src/lax/linalg.py), so they have
// no VJP rule: a gradient through a bare primitive is an error naming it, never zero.
#include "podlet/prims/common.h"
#include <Eigen/Dense>
#include <cmath>
#include <complex>
#include <limits>

namespace podlet {
namespace {
using namespace ops;

template <class T> using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using MapM = Eigen::Map<Mat<T>>;
template <class T> using CMapM = Eigen::Map<const Mat<T>>;

bool flag(const Attrs& a, const char* k, bool dflt) { return a.i(k, dflt ? 1 : 0) != 0; }

// Checks a float32/float64 operand of rank >= 2 (square if asked); returns its batch shape.
Shape matrix_operand(const AVal& x, const char* what, bool square) {
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    throw DTypeError(fmt(what, " must be float32 or float64, got ", dtype_name(x.dtype)));
  const size_t r = x.shape.size();
  if (r < 2) throw ShapeError(fmt(what, " must have rank >= 2 (a matrix or a batch of matrices), got shape ", shape_str(x.shape)));
  if (square && x.shape[r - 1] != x.shape[r - 2])
    throw ShapeError(fmt(what, " must be square in its last two dims, got shape ", shape_str(x.shape)));
  return Shape(x.shape.begin(), x.shape.end() - 2);
}

Shape with(Shape b, std::initializer_list<int64_t> tail) {
  b.insert(b.end(), tail.begin(), tail.end());
  return b;
}

template <class T> bool all_finite(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) if (!std::isfinite(p[i])) return false;
  return true;
}
template <class T> void fill_nan(T* p, int64_t n) { std::fill(p, p + n, std::numeric_limits<T>::quiet_NaN()); }

// f(b) for every matrix b of the batch, in parallel; each matrix alone.
template <class F> void for_each_matrix(int64_t batch, F&& f) {
  parallel_for(batch, 1, [&](int64_t b0, int64_t b1) { for (int64_t b = b0; b < b1; ++b) f(b); });
}

// f(T{}) with T the C++ type of a float32 / float64 dtype (the shape rules let no other through).
template <class F> void for_float_type(DType d, F&& f) {
  if (d == DType::f32) f(float{});
  else if (d == DType::f64) f(double{});
  else throw DTypeError(fmt("expected float32 or float64, got ", dtype_name(d)));
}

int64_t batch_of(const Array& a) {
  const Shape& s = a.shape();
  return numel(Shape(s.begin(), s.end() - 2));
}

// ---- cholesky ------------------------------------------------------------------------
std::vector<AVal> cholesky_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 1);
  matrix_operand(in[0], "cholesky operand", true);
  return {in[0]};
}

void cholesky_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
  const int64_t n = in[0].shape().back(), B = batch_of(in[0]);
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      for_each_matrix(B, [&](int64_t b) {
        CMapM<T> A(in[0].data<T>() + b * n * n, n, n);
        MapM<T> L(out[0].data<T>() + b * n * n, n, n);
        Eigen::LLT<Mat<T>, Eigen::Lower> llt(A);
        if (llt.info() != Eigen::Success || !all_finite(A.data(), n * n)) { fill_nan(L.data(), n * n); return; }
        L = llt.matrixL();
      });
    }
  });
}

double cholesky_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  const double n = double(in[0].shape.back());
  return double(numel(in[0].shape)) / (n * n > 0 ? n * n : 1) * n * n * n / 3.0;
}

// ---- triangular_solve ----------------------------------------------------------------
std::vector<AVal> trisolve_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 2);
  Shape ba = matrix_operand(in[0], "triangular_solve a", true);
  Shape bb = matrix_operand(in[1], "triangular_solve b", false);
  if (in[0].dtype != in[1].dtype)
    throw DTypeError(fmt("a and b must have the same dtype, got ", dtype_name(in[0].dtype), " and ", dtype_name(in[1].dtype)));
  if (ba != bb)
    throw ShapeError(fmt("a and b must have the same batch dims, got a ", shape_str(in[0].shape), " and b ", shape_str(in[1].shape)));
  if (in[1].shape[in[1].shape.size() - 2] != in[0].shape.back())
    throw ShapeError(fmt("b must have as many rows as a (", in[0].shape.back(), "), got b ", shape_str(in[1].shape)));
  return {in[1]};
}

template <class T, int Mode> void trisolve_one(const CMapM<T>& A, MapM<T>& X, bool transpose) {
  constexpr int TMode = (Mode & Eigen::Lower) ? ((Mode & ~Eigen::Lower) | Eigen::Upper) : ((Mode & ~Eigen::Upper) | Eigen::Lower);
  if (transpose) A.transpose().template triangularView<TMode>().solveInPlace(X);
  else A.template triangularView<Mode>().solveInPlace(X);
}

void trisolve_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const bool lower = flag(a, "lower", true), trans = flag(a, "transpose_a", false), unit = flag(a, "unit_diagonal", false);
  const int64_t n = in[0].shape().back(), k = in[1].shape().back(), B = batch_of(in[0]);
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      for_each_matrix(B, [&](int64_t b) {
        CMapM<T> A(in[0].data<T>() + b * n * n, n, n);
        MapM<T> X(out[0].data<T>() + b * n * k, n, k);
        X = CMapM<T>(in[1].data<T>() + b * n * k, n, k);
        if (n == 0 || k == 0) return;
        if (lower && unit) trisolve_one<T, Eigen::UnitLower>(A, X, trans);
        else if (lower) trisolve_one<T, Eigen::Lower>(A, X, trans);
        else if (unit) trisolve_one<T, Eigen::UnitUpper>(A, X, trans);
        else trisolve_one<T, Eigen::Upper>(A, X, trans);
      });
    }
  });
}

// The (n, n) mask of the triangle a solve reads: lower (or upper), without the diagonal
// when it is a unit one.
int triangle_mask(Graph& g, int64_t n, bool lower, bool unit) {
  const Attrs r{{"shape", Shape{n, n}}, {"dimension", int64_t(0)}, {"dtype", std::string("int32")}};
  const Attrs c{{"shape", Shape{n, n}}, {"dimension", int64_t(1)}, {"dtype", std::string("int32")}};
  const int rows = g.add1("iota", {}, r), cols = g.add1("iota", {}, c);
  const char* cmp = lower ? (unit ? "gt" : "ge") : (unit ? "lt" : "le");
  return bin(g, cmp, rows, cols);
}

// Batched matmul over the leading dims: x (..., p, q) times y (..., q, r), either
// operand transposed in its last two dims first.
int bmm(Graph& g, int x, int y, bool tx, bool ty) {
  const int64_t r = int64_t(g.aval(x).shape.size()), nb = r - 2;
  std::vector<int64_t> batch;
  for (int64_t i = 0; i < nb; ++i) batch.push_back(i);
  Attrs a;
  a.set("lhs_contracting", std::vector<int64_t>{tx ? nb : nb + 1});
  a.set("rhs_contracting", std::vector<int64_t>{ty ? nb + 1 : nb});
  a.set("lhs_batch", batch);
  a.set("rhs_batch", batch);
  return g.add1("dot_general", {x, y}, a);
}

// op(A) X = B. ct_b = op(A)^-T ct (one more solve); ct_op(A) = -ct_b X^T, transposed
// back when op(A) = A^T, and kept on the triangle the solve read (JAX's
// triangular_solve_transpose_rule and triangular_solve_jvp_rule_a).
std::vector<int> trisolve_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  if (ct[0] < 0) return {-1, -1};
  const int a = n.in[0], x = n.out[0];
  const bool lower = flag(n.attrs, "lower", true), trans = flag(n.attrs, "transpose_a", false),
             unit = flag(n.attrs, "unit_diagonal", false);
  Attrs at = n.attrs;
  at.set("transpose_a", int64_t(trans ? 0 : 1));
  const int ct_b = g.add1("triangular_solve", {a, ct[0]}, at);
  const int prod = trans ? bmm(g, x, ct_b, false, true) : bmm(g, ct_b, x, false, true);  // (n, n)
  const int mask = triangle_mask(g, g.aval(a).shape.back(), lower, unit);
  const int ct_a = select(g, mask, neg(g, prod), zeros_like(g, prod));
  return {ct_a, ct_b};
}

double trisolve_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  const double n = double(in[0].shape.back());
  return double(numel(in[1].shape)) * n;  // n^2 k per matrix
}

// ---- lu --------------------------------------------------------------------------------
std::vector<AVal> lu_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 1);
  Shape b = matrix_operand(in[0], "lu operand", false);
  const int64_t m = in[0].shape[b.size()], n = in[0].shape[b.size() + 1];
  return {in[0], AVal{DType::i32, with(b, {std::min(m, n)})}, AVal{DType::i32, with(b, {m})}};
}

// Unblocked right-looking LU with partial pivoting, as LAPACK's getf2: the pivot is the
// first entry of largest magnitude; a zero column is skipped (the factor is singular).
template <class T> void lu_one(MapM<T>& A, int32_t* piv, int32_t* perm) {
  const int64_t m = A.rows(), n = A.cols(), k = std::min(m, n);
  for (int64_t i = 0; i < m; ++i) perm[i] = int32_t(i);
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;
    T best = std::abs(A(j, j));
    for (int64_t i = j + 1; i < m; ++i) {
      const T v = std::abs(A(i, j));
      if (v > best || (std::isnan(v) && !std::isnan(best))) { best = v; p = i; }
    }
    piv[j] = int32_t(p);
    if (p != j) { A.row(p).swap(A.row(j)); std::swap(perm[p], perm[j]); }
    const T d = A(j, j);
    if (d != T(0)) {
      for (int64_t i = j + 1; i < m; ++i) A(i, j) /= d;
    }
    if (j + 1 < m && j + 1 < n)
      A.bottomRightCorner(m - j - 1, n - j - 1).noalias() -= A.col(j).tail(m - j - 1) * A.row(j).tail(n - j - 1);
  }
}

void lu_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
  const Shape& s = in[0].shape();
  const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n), B = batch_of(in[0]);
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      for_each_matrix(B, [&](int64_t b) {
        MapM<T> A(out[0].data<T>() + b * m * n, m, n);
        A = CMapM<T>(in[0].data<T>() + b * m * n, m, n);
        lu_one<T>(A, out[1].data<int32_t>() + b * k, out[2].data<int32_t>() + b * m);
      });
    }
  });
}

double lu_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  const Shape& s = in[0].shape;
  const double m = double(s[s.size() - 2]), n = double(s.back()), k = std::min(m, n);
  const double B = m * n > 0 ? double(numel(s)) / (m * n) : 0;
  return B * (m * n * k - (m + n) * k * k / 2.0 + k * k * k / 3.0);
}

// ---- eigh ----------------------------------------------------------------------------
std::vector<AVal> eigh_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 1);
  Shape b = matrix_operand(in[0], "eigh operand", true);
  return {in[0], AVal{in[0].dtype, with(b, {in[0].shape.back()})}};
}

void eigh_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const bool lower = flag(a, "lower", true);
  const int64_t n = in[0].shape().back(), B = batch_of(in[0]);
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      for_each_matrix(B, [&](int64_t b) {
        CMapM<T> A(in[0].data<T>() + b * n * n, n, n);
        MapM<T> V(out[0].data<T>() + b * n * n, n, n);
        Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> w(out[1].data<T>() + b * n, n);
        if (n == 0) return;
        Mat<T> S = lower ? Mat<T>(A) : Mat<T>(A.transpose());  // the solver reads the lower triangle
        if (!all_finite(S.data(), n * n)) { fill_nan(V.data(), n * n); fill_nan(w.data(), n); return; }
        Eigen::SelfAdjointEigenSolver<Mat<T>> es(S);
        if (es.info() != Eigen::Success) { fill_nan(V.data(), n * n); fill_nan(w.data(), n); return; }
        V = es.eigenvectors();
        w = es.eigenvalues();
      });
    }
  });
}

double cubic_flops(const std::vector<AVal>& in, double c) {
  const Shape& s = in[0].shape;
  const double m = double(s[s.size() - 2]), n = double(s.back());
  const double B = m * n > 0 ? double(numel(s)) / (m * n) : 0;
  return B * c * std::max(m, n) * std::min(m, n) * std::min(m, n);
}

// ---- eig (nonsymmetric, real input) ------------------------------------------------------
std::vector<AVal> eig_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  Shape b = matrix_operand(in[0], "eig operand", true);
  const AVal w{in[0].dtype, with(b, {in[0].shape.back()})};
  if (!flag(a, "compute_right_eigenvectors", true)) return {w, w};
  return {w, w, in[0], in[0]};
}

// Eigen's EigenSolver (Hessenberg reduction, then the Francis double-shift QR to the real
// Schur form, as LAPACK's dgeev). Its eigenvectors have unit norm; a complex one is then
// multiplied by the conjugate phase of its largest component (the first of equal ones),
// as geev makes that component real, and its partner is set to its exact conjugate.
// Non-finite input or no convergence: all NaN.
template <class T>
void eig_one(const T* a, int64_t n, T* wr, T* wi, T* vr, T* vi) {
  using CM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major, what EigenSolver takes
  const bool vec = vr != nullptr;
  auto all_nan = [&] {
    fill_nan(wr, n); fill_nan(wi, n);
    if (vec) { fill_nan(vr, n * n); fill_nan(vi, n * n); }
  };
  if (!all_finite(a, n * n)) { all_nan(); return; }
  const CM A = CMapM<T>(a, n, n);
  Eigen::EigenSolver<CM> es(A, vec);
  if (es.info() != Eigen::Success) { all_nan(); return; }
  const auto& w = es.eigenvalues();
  for (int64_t i = 0; i < n; ++i) { wr[i] = w(i).real(); wi[i] = w(i).imag(); }
  if (!vec) return;
  const Eigen::Matrix<std::complex<T>, Eigen::Dynamic, Eigen::Dynamic> V = es.eigenvectors();
  MapM<T> VR(vr, n, n), VI(vi, n, n);
  for (int64_t j = 0; j < n; ++j) {
    if (wi[j] == T(0)) {  // a real eigenvalue: Eigen's real unit vector
      for (int64_t i = 0; i < n; ++i) { VR(i, j) = V(i, j).real(); VI(i, j) = T(0); }
      continue;
    }
    // a pair (w, conj w), w first: turn w's vector so its largest component is real and
    // positive (exactly: its imaginary part is set to 0, as geev does); conj w's is its conjugate.
    int64_t k = 0;
    T best = -1;
    for (int64_t i = 0; i < n; ++i) {
      const T m = std::norm(V(i, j));
      if (m > best) { best = m; k = i; }
    }
    const std::complex<T> phase = best > 0 ? std::conj(V(k, j)) / std::abs(V(k, j)) : std::complex<T>(1);
    for (int64_t i = 0; i < n; ++i) {
      const std::complex<T> z = V(i, j) * phase;
      VR(i, j) = z.real();
      VI(i, j) = i == k ? T(0) : z.imag();
    }
    if (j + 1 < n) {
      VR.col(j + 1) = VR.col(j);
      VI.col(j + 1) = -VI.col(j);
      ++j;
    }
  }
}

void eig_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const bool vec = flag(a, "compute_right_eigenvectors", true);
  const int64_t n = in[0].shape().back(), B = batch_of(in[0]);
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_matrix(B, [&](int64_t b) {
      if (n == 0) return;
      eig_one<T>(in[0].data<T>() + b * n * n, n, out[0].data<T>() + b * n, out[1].data<T>() + b * n,
                 vec ? out[2].data<T>() + b * n * n : nullptr, vec ? out[3].data<T>() + b * n * n : nullptr);
    });
  });
}

// ---- qr --------------------------------------------------------------------------------
std::vector<AVal> qr_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  Shape b = matrix_operand(in[0], "qr operand", false);
  const int64_t m = in[0].shape[b.size()], n = in[0].shape[b.size() + 1];
  const int64_t kq = flag(a, "full_matrices", false) ? m : std::min(m, n);
  return {AVal{in[0].dtype, with(b, {m, kq})}, AVal{in[0].dtype, with(b, {kq, n})}};
}

void qr_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Shape& s = in[0].shape();
  const int64_t m = s[s.size() - 2], n = s.back(), B = batch_of(in[0]);
  const int64_t kq = flag(a, "full_matrices", false) ? m : std::min(m, n);
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      for_each_matrix(B, [&](int64_t b) {
        CMapM<T> A(in[0].data<T>() + b * m * n, m, n);
        MapM<T> Q(out[0].data<T>() + b * m * kq, m, kq);
        MapM<T> R(out[1].data<T>() + b * kq * n, kq, n);
        if (!all_finite(A.data(), m * n)) { fill_nan(Q.data(), m * kq); fill_nan(R.data(), kq * n); return; }
        Eigen::HouseholderQR<Mat<T>> qr(A);
        Q = qr.householderQ() * Mat<T>::Identity(m, kq);
        R = qr.matrixQR().topRows(kq).template triangularView<Eigen::Upper>();
      });
    }
  });
}

// ---- svd -------------------------------------------------------------------------------
std::vector<AVal> svd_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  Shape b = matrix_operand(in[0], "svd operand", false);
  const int64_t m = in[0].shape[b.size()], n = in[0].shape[b.size() + 1], k = std::min(m, n);
  std::vector<AVal> out = {AVal{in[0].dtype, with(b, {k})}};
  if (flag(a, "compute_uv", true)) {
    const bool full = flag(a, "full_matrices", true);
    out.push_back(AVal{in[0].dtype, with(b, {m, full ? m : k})});
    out.push_back(AVal{in[0].dtype, with(b, {full ? n : k, n})});
  }
  return out;
}

void svd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Shape& s = in[0].shape();
  const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n), B = batch_of(in[0]);
  const bool uv = flag(a, "compute_uv", true), full = flag(a, "full_matrices", true);
  const int64_t ku = full ? m : k, kv = full ? n : k;
  for_float_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      for_each_matrix(B, [&](int64_t b) {
        CMapM<T> A(in[0].data<T>() + b * m * n, m, n);
        Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> sv(out[0].data<T>() + b * k, k);
        T* u = uv ? out[1].data<T>() + b * m * ku : nullptr;
        T* vt = uv ? out[2].data<T>() + b * kv * n : nullptr;
        if (!all_finite(A.data(), m * n)) {
          fill_nan(sv.data(), k);
          if (uv) { fill_nan(u, m * ku); fill_nan(vt, kv * n); }
          return;
        }
        if (k == 0) {  // no singular values: U and V^T are identities
          if (uv) { MapM<T>(u, m, ku).setIdentity(); MapM<T>(vt, kv, n).setIdentity(); }
          return;
        }
        const unsigned opts = !uv ? 0u : full ? unsigned(Eigen::ComputeFullU | Eigen::ComputeFullV)
                                              : unsigned(Eigen::ComputeThinU | Eigen::ComputeThinV);
        Eigen::JacobiSVD<Mat<T>, Eigen::ColPivHouseholderQRPreconditioner> svd(A, opts);
        sv = svd.singularValues();
        if (uv) {
          MapM<T>(u, m, ku) = svd.matrixU();
          MapM<T>(vt, kv, n) = svd.matrixV().transpose();
        }
      });
    }
  });
}

// ---- batching: the mapped axis is one more leading batch dim ----------------------------
std::vector<int> batch_leading(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                               std::vector<int>& ob) {
  std::vector<int> args;
  for (size_t k = 0; k < in.size(); ++k) {
    if (bd[k] >= 0) { args.push_back(in[k]); continue; }
    const Shape s = g.aval(in[k]).shape;
    Shape bs = {c.size};
    bs.insert(bs.end(), s.begin(), s.end());
    std::vector<int64_t> dims;
    for (size_t i = 0; i < s.size(); ++i) dims.push_back(int64_t(i) + 1);
    args.push_back(broadcast_in_dim(g, in[k], bs, dims));
  }
  std::vector<int> out = g.add(*c.n.prim, args, c.n.attrs);
  ob.assign(out.size(), 0);
  return out;
}

static Register reg_cholesky("cholesky", PrimDef{.shape = cholesky_shape, .kernel = cholesky_kernel,
                                                 .flops = cholesky_flops, .batch = batch_leading});
static Register reg_trisolve("triangular_solve", PrimDef{.shape = trisolve_shape, .kernel = trisolve_kernel,
                                                         .vjp = trisolve_vjp, .flops = trisolve_flops,
                                                         .batch = batch_leading});
static Register reg_lu("lu", PrimDef{.shape = lu_shape, .kernel = lu_kernel, .flops = lu_flops, .batch = batch_leading});
static Register reg_eigh("eigh", PrimDef{.shape = eigh_shape, .kernel = eigh_kernel,
                                         .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&,
                                                     const Attrs&) { return cubic_flops(in, 9.0); },
                                         .batch = batch_leading});
// LAPACK's operation counts for dgeev: about 10 n^3 for the eigenvalues, 26 n^3 with the
// right eigenvectors.
static Register reg_eig("eig", PrimDef{.shape = eig_shape, .kernel = eig_kernel,
                                       .flops = [](const std::vector<AVal>& in, const std::vector<AVal>& out,
                                                   const Attrs&) { return cubic_flops(in, out.size() > 2 ? 26.0 : 10.0); },
                                       .batch = batch_leading});
static Register reg_qr("qr", PrimDef{.shape = qr_shape, .kernel = qr_kernel,
                                     .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&,
                                                 const Attrs&) { return cubic_flops(in, 4.0); },
                                     .batch = batch_leading});
static Register reg_svd("svd", PrimDef{.shape = svd_shape, .kernel = svd_kernel,
                                       .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&,
                                                   const Attrs&) { return cubic_flops(in, 12.0); },
                                       .batch = batch_leading});

}  // namespace
}  // namespace podlet
