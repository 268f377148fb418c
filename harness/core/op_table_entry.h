// op_table_entry.h — what every entry of the op table (op_table_entries.cpp)
// shares: seeded float32-representable inputs, outputs that start as NaN
// (overwritten) or seeded values (accumulated), the comparison of each
// output with its reference values within the deterministic error model's
// bound, and the release of every tensor. Private to the op table.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/core/op_table.h"
#include "harness/core/tolerance.h"
#include "reference/bounded.h"
#include "reference/tensor.h"

namespace gradeq::op_table_entry {

using ref::Bounded;
using ref::Matrix;

inline double bytes_of(DType t) { return t == DType::f32 ? 4.0 : 2.0; }

// One output compared against its reference values. `actual` holds values
// the op returned to the host (a loss sum, a norm); otherwise `tensor` is
// downloaded.
struct Expectation {
  Expectation(std::string n, Matrix<Bounded> e, const Tensor* t, bool zero = false)
      : name(std::move(n)), expected(std::move(e)), tensor(t), zero_allowed(zero) {}
  Expectation(std::string n, const Bounded& e, double returned)
      : name(std::move(n)), expected(Matrix<Bounded>::Constant(1, 1, e)), actual{returned} {}

  std::string name;
  Matrix<Bounded> expected;
  const Tensor* tensor = nullptr;
  std::vector<double> actual;
  // The same math in the op's dtype in natural order (the host kernel's
  // plain form), for OpVerdict::natural_order_ratio; empty: none.
  std::vector<double> natural;
  // Set only where an all-zero expectation can still fail: the output was
  // seeded with non-zero values before the op ran (zero()).
  bool zero_allowed = false;
};

// What every entry shares: seeded float32-representable inputs, outputs
// that start as NaN (overwritten) or seeded values (accumulated), the
// comparison, and the release of every tensor.
class TableOp : public PreparedOp {
 public:
  TableOp(Backend& backend, DType dtype, std::uint64_t seed)
      : backend_(backend), dtype_(dtype), rng_(seed),
        model_(rounding_model_for({dtype, DType::f32}, ErrorModel{ref::ReductionBound::deterministic, 6.0})) {}
  ~TableOp() override {
    for (Tensor& t : owned_) backend_.release(t);
  }
  TableOp(const TableOp&) = delete;
  TableOp& operator=(const TableOp&) = delete;

  OpVerdict verify() override {
    reset();
    run();
    const ref::ScopedRoundingModel scope(model_);
    return compare(expected());
  }

 protected:
  virtual std::vector<Expectation> expected() = 0;

  Matrix<double> random(long rows, long cols, double scale = 1.0, double offset = 0.0) {
    std::normal_distribution<double> normal(0.0, scale);
    Matrix<double> m(rows, cols);
    for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(offset + normal(rng_));
    return m;
  }
  // A tensor of dtype t holding m rounded to t.
  Tensor input(const Matrix<double>& m, DType t) {
    Tensor x = allocate(m.rows(), m.cols(), t);
    upload(x, m);
    return x;
  }
  // An output the op overwrites (NaN before every verification) or
  // accumulates into (seeded values of its dtype before every verification).
  Tensor output(long rows, long cols, DType t, bool accumulates, double scale = 1.0, double offset = 0.0) {
    Tensor x = allocate(rows, cols, t);
    outputs_.push_back({x, accumulates ? random(rows, cols, scale, offset) : Matrix<double>()});
    return x;
  }
  // The values a tensor holds, as exact reference inputs.
  Matrix<Bounded> held(const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.size()));
    backend_.download(t, v);
    Matrix<Bounded> m(t.rows, t.cols);
    for (long i = 0; i < m.size(); ++i) m.data()[i] = Bounded::with_bounds(v[static_cast<std::size_t>(i)], 0.0, 0.0);
    return m;
  }
  // An output's values before the op ran.
  Matrix<Bounded> initial(const Tensor& t) const {
    for (const auto& o : outputs_)
      if (o.tensor.data == t.data) return ref::lift<Bounded>(o.initial);
    throw std::logic_error("op table: not an accumulated output");
  }
  Matrix<Bounded> stored(const Matrix<Bounded>& m, ref::Storage where) const { return ref::stored(m, where); }

  void reset() {
    for (const auto& o : outputs_) {
      if (o.initial.size() == 0) {
        backend_.fill(o.tensor, std::numeric_limits<float>::quiet_NaN());
      } else {
        upload(o.tensor, o.initial);
      }
    }
  }

  Backend& backend_;
  const DType dtype_;
  std::mt19937_64 rng_;
  const ref::RoundingModel model_;

 private:
  struct Output {
    Tensor tensor;
    Matrix<double> initial;  // empty: overwritten
  };
  Tensor allocate(long rows, long cols, DType t) {
    owned_.push_back(backend_.allocate(rows, cols, t));
    return owned_.back();
  }
  void upload(const Tensor& t, const Matrix<double>& m) {
    std::vector<float> v(m.data(), m.data() + m.size());
    backend_.upload(t, v);
  }

 protected:
  OpVerdict compare(const std::vector<Expectation>& expectations) {
    OpVerdict verdict;
    auto fail = [&](const std::string& message) {
      if (verdict.passed) verdict.message = message;
      verdict.passed = false;
    };
    for (const Expectation& x : expectations) {
      std::vector<double> actual = x.actual;
      if (x.tensor) {
        std::vector<float> v(static_cast<std::size_t>(x.tensor->size()));
        backend_.download(*x.tensor, v);
        actual.assign(v.begin(), v.end());
      }
      if (static_cast<long>(actual.size()) != x.expected.size()) {
        fail(x.name + ": " + std::to_string(actual.size()) + " values, expected " + std::to_string(x.expected.size()));
        continue;
      }
      if (!x.natural.empty() && static_cast<long>(x.natural.size()) == x.expected.size()) {
        double kernel_error = 0.0, natural_error = 0.0;
        for (long i = 0; i < x.expected.size(); ++i) {
          const double e = x.expected.data()[i].value;
          kernel_error = std::max(kernel_error, std::abs(actual[static_cast<std::size_t>(i)] - e));
          natural_error = std::max(natural_error, std::abs(x.natural[static_cast<std::size_t>(i)] - e));
        }
        if (natural_error > 0.0)
          verdict.natural_order_ratio = std::max(verdict.natural_order_ratio.value_or(0.0), kernel_error / natural_error);
      }
      double nonzero = 0.0;
      for (long i = 0; i < x.expected.size(); ++i) {
        const Bounded& e = x.expected.data()[i];
        const double a = actual[static_cast<std::size_t>(i)];
        const double bound = kernel_bound(e.kernel_bound, e.reference);
        nonzero += std::abs(e.value);
        std::ostringstream where;
        where.precision(9);
        where << x.name << "[" << i / x.expected.cols() << ", " << i % x.expected.cols() << "]: kernel " << a
              << ", reference " << e.value;
        if (!std::isfinite(a)) {
          fail(where.str() + ": not finite");
        } else if (!std::isfinite(bound)) {
          fail(where.str() + ": the error model gives no finite bound");
        } else {
          const double d = std::abs(a - e.value);
          const double ratio = d == 0.0 ? 0.0 : (bound > 0.0 ? d / bound : HUGE_VAL);
          verdict.worst_ratio = std::max(verdict.worst_ratio, ratio);
          if (ratio > 1.0) {
            where << ", bound " << bound << " exceeded " << ratio << "x";
            fail(where.str());
          }
        }
      }
      if (nonzero == 0.0 && !x.zero_allowed) fail(x.name + ": every expected value is zero: the check proves nothing");
    }
    return verdict;
  }

 private:
  std::vector<Tensor> owned_;
  std::vector<Output> outputs_;
};

}  // namespace gradeq::op_table_entry
