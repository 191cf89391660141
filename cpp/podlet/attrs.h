// Attributes of a primitive application: a small, ordered, hashable map. Python passes
// a dict of int / float / str / bool / list[int] / list[float] (lists of pairs are
// flattened by the Python wrapper, which documents the layout per primitive).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>
#include <cstdint>
#include "podlet/error.h"

namespace podlet {

class Graph;
// A sub-graph held by a control-flow or custom-rule node (scan's body, cond's branches,
// custom_vjp's fwd/bwd). Shared and immutable: transformations build new graphs.
using GraphRef = std::shared_ptr<const Graph>;
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                               GraphRef, std::vector<GraphRef>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> l) : m_(l) {}
  void set(const std::string& k, AttrValue v) { m_[k] = std::move(v); }
  bool has(const std::string& k) const { return m_.count(k) != 0; }
  const std::map<std::string, AttrValue>& items() const { return m_; }

  int64_t i(const std::string& k) const { return get<int64_t>(k); }
  int64_t i(const std::string& k, int64_t dflt) const { return has(k) ? i(k) : dflt; }
  double f(const std::string& k) const {
    const AttrValue& v = at(k);
    if (auto p = std::get_if<int64_t>(&v)) return double(*p);
    return get<double>(k);
  }
  double f(const std::string& k, double dflt) const { return has(k) ? f(k) : dflt; }
  const std::string& s(const std::string& k) const { return get<std::string>(k); }
  std::string s(const std::string& k, const std::string& dflt) const { return has(k) ? s(k) : dflt; }
  std::vector<int64_t> ints(const std::string& k) const {
    const AttrValue& v = at(k);
    if (auto p = std::get_if<int64_t>(&v)) return {*p};
    return get<std::vector<int64_t>>(k);
  }
  std::vector<int64_t> ints(const std::string& k, std::vector<int64_t> dflt) const { return has(k) ? ints(k) : dflt; }
  std::vector<double> floats(const std::string& k) const { return get<std::vector<double>>(k); }
  const GraphRef& graph(const std::string& k) const { return get<GraphRef>(k); }
  const std::vector<GraphRef>& graphs(const std::string& k) const { return get<std::vector<GraphRef>>(k); }

  bool operator==(const Attrs& o) const { return m_ == o.m_; }
  size_t hash() const;
  std::string repr() const;

 private:
  const AttrValue& at(const std::string& k) const {
    auto it = m_.find(k);
    if (it == m_.end()) throw ValueError(fmt("missing attribute '", k, "'"));
    return it->second;
  }
  template <class T> const T& get(const std::string& k) const {
    const AttrValue& v = at(k);
    if (auto p = std::get_if<T>(&v)) return *p;
    throw ValueError(fmt("attribute '", k, "' has the wrong type"));
  }
  std::map<std::string, AttrValue> m_;
};

}  // namespace podlet
