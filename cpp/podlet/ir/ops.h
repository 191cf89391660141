// Graph-building helpers for VJP rules: each appends one primitive to g and returns the
// new value id. They read like the math the rule implements.
#pragma once
#include "podlet/ir/graph.h"

namespace podlet::ops {

inline int bin(Graph& g, const char* p, int a, int b) { return g.add1(p, {a, b}); }
inline int un(Graph& g, const char* p, int a) { return g.add1(p, {a}); }
inline int add(Graph& g, int a, int b) { return bin(g, "add", a, b); }
inline int sub(Graph& g, int a, int b) { return bin(g, "sub", a, b); }
inline int mul(Graph& g, int a, int b) { return bin(g, "mul", a, b); }
inline int div(Graph& g, int a, int b) { return bin(g, "div", a, b); }
inline int neg(Graph& g, int a) { return un(g, "neg", a); }
// A 0-d constant of x's dtype.
int scalar_like(Graph& g, int x, double v);
int full_like(Graph& g, int x, double v);  // same shape and dtype as x
int zeros_like(Graph& g, int x);
int convert(Graph& g, int x, DType d);
int select(Graph& g, int pred, int a, int b);
int reshape(Graph& g, int x, const Shape& s);
int transpose(Graph& g, int x, const std::vector<int64_t>& perm);
int reduce_sum(Graph& g, int x, const std::vector<int64_t>& axes);
int broadcast_in_dim(Graph& g, int x, const Shape& shape, const std::vector<int64_t>& dims);
// Sums a broadcast result back to `shape` (NumPy broadcasting rules): the VJP of an
// implicit broadcast.
int sum_to_shape(Graph& g, int x, Shape shape);  // by value: callers pass g.aval(..).shape, which add() may move
// Makes x's dtype match `d` when they differ (cotangent dtypes follow primal dtypes).
int cast_if_needed(Graph& g, int x, DType d);

}  // namespace podlet::ops
