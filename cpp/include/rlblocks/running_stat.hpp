// Running mean / variance with exact batched updates and exact merges (RLlib's RunningStat).
//
// State per feature (float64): mean, S (sum of squared deviations from the mean), plus the
// "delta" copies RLlib keeps for its distributed sync protocol (mean_delta, S_delta,
// n_delta), which record what was pushed since the stat was created.
//
// * push_batch(x, rows): two-pass moments of the batch (per block of rows, blocks merged in
//   order with Chan's formula), then one Chan merge into the stat. In exact arithmetic this
//   equals pushing the rows one at a time with Welford's update; in floating point it
//   agrees to about 1e-15 relative. Block boundaries do not depend on the thread count,
//   so results are identical for any number of threads.
// * update(other): merges other's *delta* state (RLlib semantics); self's delta fields do
//   not change.
// * Overflow: huge finite values never poison the state. A batch whose plain sums overflow
//   is summed again scaled by a power of two per feature (exact), so only moments that
//   truly do not fit float64 fail; a merge whose new mean or S would not be finite (e.g.
//   1e308 after -1e308: the deviation is not representable, or +-1e300: its square is not)
//   is refused before anything changes (try_merge returns the feature), so a refused push
//   leaves the state exactly as it was.
// * Tracked values: every value pushed must lie within +-kMaxTracked = 2**479 (callers
//   check it with first_untracked before pushing). Inside it no deviation exceeds 2**480,
//   so S <= n * 2**960 < 2**1023 for any int64 count and no push of tracked values can
//   overflow (update() merges RLlib's delta drift, which is not bounded so: it is still
//   checked). One value beyond it (1e300) would become the mean of a fresh
//   stat, and every later ordinary value's squared deviation from it would overflow: the
//   stat could take nothing more. Such a value is refused when it arrives.
// * var is S/(n-1) rounded to float32 (zero while n <= 1); std = sqrt(max(0, var)) in
//   float32, as in RLlib.
//
// Every public member function takes the object's mutex, so concurrent calls from several
// threads never race (ordering between them is whatever the callers produce).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "rlblocks/checked.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks {

// Count, mean and M2 (sum of squared deviations) per feature.
struct Moments {
  std::int64_t n = 0;
  std::vector<double> mean, m2;

  explicit Moments(std::int64_t dim = 0)
      : mean(static_cast<std::size_t>(dim), 0.0), m2(static_cast<std::size_t>(dim), 0.0) {}
};

// Chan et al.: merges (nb, mean_b, m2_b) into (n, mean, m2), feature by feature.
inline void chan_merge(std::int64_t& n, double* mean, double* m2, std::int64_t nb, const double* mean_b,
                       const double* m2_b, std::int64_t dim) {
  if (nb == 0) return;
  if (n == 0) {
    std::copy(mean_b, mean_b + dim, mean);
    std::copy(m2_b, m2_b + dim, m2);
    n = nb;
    return;
  }
  const double n1 = static_cast<double>(n), n2 = static_cast<double>(nb);
  const double w = n2 / (n1 + n2), c = n1 * n2 / (n1 + n2);
  for (std::int64_t d = 0; d < dim; ++d) {
    const double delta = mean_b[d] - mean[d];
    mean[d] += delta * w;
    m2[d] += m2_b[d] + delta * delta * c;
  }
  n += nb;
}

// Two-pass moments of column d of rows [r0, r1) with every value scaled by 2**-e, where
// 2**e bounds the column's largest magnitude: the sums cannot overflow, and scaling by a
// power of two is exact. Returns false when the unscaled M2 does not fit float64 (or a
// value is not finite).
template <class T>
bool scaled_column_moments(const T* x, std::int64_t r0, std::int64_t r1, std::int64_t dim, std::int64_t d, double& mean,
                           double& m2) {
  double big = 0.0;
  for (std::int64_t r = r0; r < r1; ++r) big = std::max(big, std::fabs(static_cast<double>(x[r * dim + d])));
  if (!std::isfinite(big)) return false;
  int e = 0;
  std::frexp(big, &e);  // big < 2**e; ldexp scales exactly (2**e itself may not be finite)
  double sum = 0.0;
  for (std::int64_t r = r0; r < r1; ++r) sum += std::ldexp(static_cast<double>(x[r * dim + d]), -e);
  const double ms = sum / static_cast<double>(r1 - r0);
  double ss = 0.0;
  for (std::int64_t r = r0; r < r1; ++r) {
    const double dev = std::ldexp(static_cast<double>(x[r * dim + d]), -e) - ms;
    ss += dev * dev;
  }
  mean = std::ldexp(ms, e);
  m2 = std::ldexp(ss, 2 * e);
  return std::isfinite(mean) && std::isfinite(m2);
}

// Two-pass moments of rows [r0, r1) of x (row-major, `dim` values per row), written to
// mean/m2. Columns whose plain sums overflow are redone scaled (scaled_column_moments).
// Returns false when a value is not finite (NaN/inf) or a column's M2 exceeds float64.
template <class T>
bool block_moments(const T* x, std::int64_t r0, std::int64_t r1, std::int64_t dim, double* mean, double* m2) {
  std::fill(mean, mean + dim, 0.0);
  std::fill(m2, m2 + dim, 0.0);
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * dim;
    for (std::int64_t d = 0; d < dim; ++d) mean[d] += static_cast<double>(row[d]);
  }
  const double rows = static_cast<double>(r1 - r0);
  for (std::int64_t d = 0; d < dim; ++d) mean[d] /= rows;
  if (r1 - r0 > 1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * dim;
      for (std::int64_t d = 0; d < dim; ++d) {
        const double dev = static_cast<double>(row[d]) - mean[d];
        m2[d] += dev * dev;
      }
    }
  }  // else: m2 of one row is 0
  bool ok = true;
  for (std::int64_t d = 0; d < dim; ++d) {
    if (std::isfinite(mean[d]) && std::isfinite(m2[d])) continue;
    ok = scaled_column_moments(x, r0, r1, dim, d, mean[d], m2[d]) && ok;
  }
  return ok;
}

// The first column whose moments over rows [0, rows) do not fit float64, or -1.
template <class T>
std::int64_t first_overflowing_column(const T* x, std::int64_t rows, std::int64_t dim) {
  for (std::int64_t d = 0; d < dim && rows > 0; ++d) {
    double mean = 0.0, m2 = 0.0;
    if (!scaled_column_moments(x, 0, rows, dim, d, mean, m2)) return d;
  }
  return -1;
}

// Index of the first NaN/inf element of x (n elements), or -1.
template <class T>
std::int64_t first_nonfinite(const T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(static_cast<double>(x[i]))) return i;
  }
  return -1;
}

// The largest magnitude a tracked value may have (see the header comment).
constexpr double kMaxTracked = 0x1p479;

// Index of the first element of x (n elements) that is NaN/inf or beyond +-kMaxTracked, or -1.
template <class T>
std::int64_t first_untracked(const T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!(std::fabs(static_cast<double>(x[i])) <= kMaxTracked)) return i;
  }
  return -1;
}

// Rows per block for the batched moments: about 16K values, independent of threads.
inline std::int64_t moment_block_rows(std::int64_t dim) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, dim));
}

// Moments of a whole batch (rows x dim). Blocks are computed in parallel and merged in
// block order. Returns false if any value is not finite or a sum overflows.
template <class T>
bool batch_moments(const T* x, std::int64_t rows, std::int64_t dim, Moments& out) {
  out.n = 0;
  out.mean.assign(static_cast<std::size_t>(dim), 0.0);
  out.m2.assign(static_cast<std::size_t>(dim), 0.0);
  if (rows == 0) return true;
  const std::int64_t block = moment_block_rows(dim);
  const std::int64_t nblocks = (rows + block - 1) / block;
  if (nblocks == 1) {
    if (!block_moments(x, 0, rows, dim, out.mean.data(), out.m2.data())) return false;
    out.n = rows;
    return true;
  }
  std::vector<double> scratch(static_cast<std::size_t>(2 * nblocks * dim));
  std::vector<char> ok(static_cast<std::size_t>(nblocks), 1);
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / (block * dim));
  parallel_for(nblocks, grain, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      double* mean = scratch.data() + 2 * b * dim;
      const std::int64_t r0 = b * block, r1 = std::min(rows, r0 + block);
      ok[static_cast<std::size_t>(b)] = block_moments(x, r0, r1, dim, mean, mean + dim) ? 1 : 0;
    }
  });
  for (std::int64_t b = 0; b < nblocks; ++b) {
    if (!ok[static_cast<std::size_t>(b)]) return false;
    const double* mean = scratch.data() + 2 * b * dim;
    const std::int64_t r0 = b * block, r1 = std::min(rows, r0 + block);
    chan_merge(out.n, out.mean.data(), out.m2.data(), r1 - r0, mean, mean + dim, dim);
  }
  for (std::size_t d = 0; d < static_cast<std::size_t>(dim); ++d) {
    if (!std::isfinite(out.mean[d]) || !std::isfinite(out.m2[d])) return false;
  }
  return true;
}

// out[r, d] = clip((x[r, d] - mean[d]) / denom[d], -clip, clip) as float32, computed in
// float64. demean=False is mean 0, destd=False is denom 1, no clipping is clip = +inf:
// those are exact identities, so one loop serves every configuration.
template <class T>
void normalize_rows(const T* x, std::int64_t rows, std::int64_t dim, const double* mean, const double* denom,
                    double clip, float* out) {
  const std::int64_t grain = grain_for_bytes(dim * static_cast<std::int64_t>(sizeof(T) + sizeof(float)), 256 * 1024);
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * dim;
      float* o = out + r * dim;
      for (std::int64_t d = 0; d < dim; ++d) {
        double v = (static_cast<double>(row[d]) - mean[d]) / denom[d];
        v = v < -clip ? -clip : v;
        v = v > clip ? clip : v;
        o[d] = static_cast<float>(v);
      }
    }
  });
}

// A snapshot of the delta state another stat contributes in update().
struct DeltaState {
  std::int64_t n = 0;
  std::vector<double> mean, ssd;
};

class RunningStat {
 public:
  explicit RunningStat(std::int64_t dim)
      : dim_(dim),
        mean_(static_cast<std::size_t>(dim), 0.0),
        mean_delta_(static_cast<std::size_t>(dim), 0.0),
        ssd_(static_cast<std::size_t>(dim), 0.0),
        ssd_delta_(static_cast<std::size_t>(dim), 0.0) {}

  RunningStat(const RunningStat& other) : dim_(other.dim_) {
    std::lock_guard<std::mutex> lk(other.mu_);
    n_ = other.n_;
    n_delta_ = other.n_delta_;
    mean_ = other.mean_;
    mean_delta_ = other.mean_delta_;
    ssd_ = other.ssd_;
    ssd_delta_ = other.ssd_delta_;
  }
  RunningStat& operator=(const RunningStat&) = delete;

  std::int64_t dim() const { return dim_; }

  // Adds a batch summarised by its moments. Same result (to rounding) as pushing the rows
  // one by one with RLlib's push: the first push sets mean = mean_delta = x, and every later
  // increment of mean / S is applied to mean_delta / S_delta too.
  // Returns -1, or (changing nothing) the first feature whose new state would not be finite;
  // -2 when the count would overflow int64.
  std::int64_t try_merge(const Moments& b) {
    std::lock_guard<std::mutex> lk(mu_);
    const std::int64_t bad = check_merge_locked(b);
    if (bad == -1) merge_locked(b);
    return bad;
  }

  // try_merge into both `running` and `buffer` (atomically: both locks are held, and
  // neither changes unless both can take the batch), then running's float64 mean and
  // float32-derived denominators used to normalise, i.e. the stats right after this batch.
  // Without a batch (b == nullptr) only the normalisation parameters are read. Returns -1,
  // or the bad feature (-2: count overflow) and `in_buffer` = whether buffer refused it.
  static std::int64_t merge_pair_and_norm_params(RunningStat& running, RunningStat& buffer, const Moments* b,
                                                 bool demean, bool destd, double* mean, double* denom,
                                                 bool& in_buffer) {
    std::unique_lock<std::mutex> l1(running.mu_, std::defer_lock), l2(buffer.mu_, std::defer_lock);
    if (&running == &buffer) l1.lock();
    else std::lock(l1, l2);
    in_buffer = false;
    if (b) {
      std::int64_t bad = running.check_merge_locked(*b);
      if (bad == -1 && &buffer != &running) {
        bad = buffer.check_merge_locked(*b);
        in_buffer = bad != -1;
      }
      if (bad != -1) return bad;
      if (&buffer != &running) buffer.merge_locked(*b);
      running.merge_locked(*b);
    }
    running.norm_params_locked(demean, destd, mean, denom);
    return -1;
  }

  void norm_params(bool demean, bool destd, double* mean, double* denom) const {
    std::lock_guard<std::mutex> lk(mu_);
    norm_params_locked(demean, destd, mean, denom);
  }

  DeltaState delta() const {
    std::lock_guard<std::mutex> lk(mu_);
    return DeltaState{n_delta_, mean_delta_, ssd_delta_};
  }

  // RLlib's update(other): merges other's delta state; self's delta fields are unchanged.
  // Returns -1, or (changing nothing) the first feature whose merged mean or S would not be
  // finite; -2 when the count would overflow int64.
  std::int64_t update(const DeltaState& o) {
    std::lock_guard<std::mutex> lk(mu_);
    const std::int64_t n1 = n_, n2 = o.n;
    if (n2 == 0) return -1;
    std::int64_t n = 0;
    if (add_overflows(n1, n2, n)) return -2;
    std::vector<double> mean(mean_.size()), ssd(ssd_.size());
    const double a = static_cast<double>(n1), b = static_cast<double>(n2);
    const double w = b / (a + b), c = a * b / (a + b);
    for (std::size_t d = 0; d < mean_.size(); ++d) {
      double delta = 0.0;
      if (n1 == 0) {
        mean[d] = o.mean[d];
        ssd[d] = ssd_[d] + o.ssd[d];
      } else {
        delta = o.mean[d] - mean_[d];
        mean[d] = mean_[d] + delta * w;
        ssd[d] = ssd_[d] + (o.ssd[d] + delta * delta * c);
      }
      if (!std::isfinite(delta) || !std::isfinite(mean[d]) || !std::isfinite(ssd[d])) {
        return static_cast<std::int64_t>(d);
      }
    }
    mean_.swap(mean);
    ssd_.swap(ssd);
    n_ = n;
    return -1;
  }

  struct State {
    std::int64_t n = 0, n_delta = 0;
    std::vector<double> mean, mean_delta, ssd, ssd_delta;
  };

  State state() const {
    std::lock_guard<std::mutex> lk(mu_);
    return State{n_, n_delta_, mean_, mean_delta_, ssd_, ssd_delta_};
  }

  // The caller has checked that every vector has dim() entries.
  void set_state(const State& s) {
    std::lock_guard<std::mutex> lk(mu_);
    n_ = s.n;
    n_delta_ = s.n_delta;
    mean_ = s.mean;
    mean_delta_ = s.mean_delta;
    ssd_ = s.ssd;
    ssd_delta_ = s.ssd_delta;
  }

  void reset() {
    std::lock_guard<std::mutex> lk(mu_);
    n_ = n_delta_ = 0;
    std::fill(mean_.begin(), mean_.end(), 0.0);
    std::fill(mean_delta_.begin(), mean_delta_.end(), 0.0);
    std::fill(ssd_.begin(), ssd_.end(), 0.0);
    std::fill(ssd_delta_.begin(), ssd_delta_.end(), 0.0);
  }

  std::int64_t n() const {
    std::lock_guard<std::mutex> lk(mu_);
    return n_;
  }

  // var (float32) and std (float32) per feature.
  void var_std(float* var, float* std_out) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (std::size_t d = 0; d < mean_.size(); ++d) {
      const float v = var_locked(d);
      if (var) var[d] = v;
      if (std_out) std_out[d] = std::sqrt(std::max(0.0f, v));
    }
  }

 private:
  float var_locked(std::size_t d) const {
    return n_ > 1 ? static_cast<float>(ssd_[d] / static_cast<double>(n_ - 1)) : 0.0f;
  }

  // -1 when merge_locked(b) keeps every field finite and the counts in int64; otherwise
  // the first feature that would overflow (-2: a count).
  std::int64_t check_merge_locked(const Moments& b) const {
    if (b.n == 0) return -1;
    std::int64_t n = 0;
    if (add_overflows(n_, b.n, n) || add_overflows(n_delta_, b.n, n)) return -2;
    const double n1 = static_cast<double>(n_), n2 = static_cast<double>(b.n);
    const double w = n2 / (n1 + n2), c = n1 * n2 / (n1 + n2);
    for (std::size_t d = 0; d < mean_.size(); ++d) {
      const double bm = b.mean[d], b2 = b.m2[d];
      bool ok;
      if (n_ == 0) {
        ok = std::isfinite(bm) && std::isfinite(b2) && std::isfinite(ssd_[d] + b2) && std::isfinite(ssd_delta_[d] + b2);
      } else {
        const double delta = bm - mean_[d];
        const double inc = delta * w;
        const double s_inc = b2 + delta * delta * c;
        ok = std::isfinite(delta) && std::isfinite(s_inc) && std::isfinite(mean_[d] + inc) &&
             std::isfinite(mean_delta_[d] + inc) && std::isfinite(ssd_[d] + s_inc) &&
             std::isfinite(ssd_delta_[d] + s_inc);
      }
      if (!ok) return static_cast<std::int64_t>(d);
    }
    return -1;
  }

  // The caller has checked the merge with check_merge_locked.
  void merge_locked(const Moments& b) {
    if (b.n == 0) return;
    const double* bm = b.mean.data();
    const double* b2 = b.m2.data();
    if (n_ == 0) {
      for (std::size_t d = 0; d < mean_.size(); ++d) {
        mean_[d] = bm[d];
        mean_delta_[d] = bm[d];
        ssd_[d] += b2[d];
        ssd_delta_[d] += b2[d];
      }
    } else {
      const double n1 = static_cast<double>(n_), n2 = static_cast<double>(b.n);
      const double w = n2 / (n1 + n2), c = n1 * n2 / (n1 + n2);
      for (std::size_t d = 0; d < mean_.size(); ++d) {
        const double delta = bm[d] - mean_[d];
        const double inc = delta * w;
        const double s_inc = b2[d] + delta * delta * c;
        mean_[d] += inc;
        mean_delta_[d] += inc;
        ssd_[d] += s_inc;
        ssd_delta_[d] += s_inc;
      }
    }
    n_ += b.n;
    n_delta_ += b.n;
  }

  void norm_params_locked(bool demean, bool destd, double* mean, double* denom) const {
    for (std::size_t d = 0; d < mean_.size(); ++d) {
      mean[d] = demean ? mean_[d] : 0.0;
      if (destd) {
        const float sd = std::sqrt(std::max(0.0f, var_locked(d)));
        denom[d] = static_cast<double>(sd + 1e-6f);  // float32 sum, as numpy does
        // A spread beyond float32 (var or std > 3.4e38): the float64 std, so the feature is
        // still normalised (float32 would divide by inf and zero it from then on).
        if (!std::isfinite(denom[d])) denom[d] = std::sqrt(ssd_[d] / static_cast<double>(n_ - 1));
      } else {
        denom[d] = 1.0;
      }
    }
  }

  const std::int64_t dim_;
  std::int64_t n_ = 0, n_delta_ = 0;
  std::vector<double> mean_, mean_delta_, ssd_, ssd_delta_;
  mutable std::mutex mu_;
};

}  // namespace rlblocks
