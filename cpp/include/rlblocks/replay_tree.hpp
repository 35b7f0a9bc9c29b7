// The sum tree of the replay buffer (rlblocks/replay.hpp): float64 leaves padded to a power
// of two, with an optional min tree over the positive leaves. Raw storage, no Python.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "rlblocks/checked.hpp"

namespace rlblocks {

// A sum tree over `n` leaves (padded to a power of two), with an optional min tree over the
// positive leaves (internal nodes only; the leaves are shared with the sum tree).
class SumTree {
 public:
  SumTree(std::int64_t n, bool with_min) : n_(n) {
    size_ = 1;
    while (size_ < n) size_ = checked_mul(size_, 2, "SumTree: size");
    sum_.assign(static_cast<std::size_t>(checked_mul(size_, 2, "SumTree: nodes")), 0.0);
    if (with_min) min_.assign(static_cast<std::size_t>(size_), kInf);
  }

  std::int64_t leaves() const { return n_; }
  std::int64_t nbytes() const { return static_cast<std::int64_t>((sum_.size() + min_.size()) * sizeof(double)); }
  double total() const { return sum_[1]; }
  double leaf(std::int64_t i) const { return sum_[static_cast<std::size_t>(size_ + i)]; }
  // Smallest positive leaf (+inf when none); needs the min tree.
  double min_positive() const { return min_.empty() ? kInf : min_[1]; }

  void set(std::int64_t i, double v) {
    std::int64_t p = size_ + i;
    sum_[static_cast<std::size_t>(p)] = v;
    for (p /= 2; p >= 1; p /= 2) update_node(p);
  }

  // Sets a leaf without updating its ancestors (call rebuild() after the last one).
  void set_leaf_only(std::int64_t i, double v) { sum_[static_cast<std::size_t>(size_ + i)] = v; }

  // Recomputes every internal node from the leaves (after a bulk load).
  void rebuild() {
    for (std::int64_t p = size_ - 1; p >= 1; --p) update_node(p);
  }

  // The leaf reached by descending with value v in [0, total()): right when v >= the left
  // sum and the right subtree holds weight (so a rounding error never ends on a 0 leaf).
  std::int64_t find(double v) const {
    std::int64_t idx = 1;
    while (idx < size_) {
      const std::int64_t l = 2 * idx;
      const double lv = sum_[static_cast<std::size_t>(l)];
      if (v >= lv && sum_[static_cast<std::size_t>(l + 1)] > 0.0) {
        v -= lv;
        idx = l + 1;
      } else {
        idx = l;
      }
    }
    return idx - size_;
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  double child_min(std::int64_t c) const {
    if (c >= size_) {
      const double v = sum_[static_cast<std::size_t>(c)];
      return v > 0.0 ? v : kInf;
    }
    return min_[static_cast<std::size_t>(c)];
  }

  void update_node(std::int64_t p) {
    const auto u = static_cast<std::size_t>(p);
    sum_[u] = sum_[2 * u] + sum_[2 * u + 1];
    if (!min_.empty()) min_[u] = std::min(child_min(2 * p), child_min(2 * p + 1));
  }

  std::int64_t n_, size_;
  std::vector<double> sum_, min_;
};

}  // namespace rlblocks
