// support.h — helpers shared by the unit tests: golden-file loading, random
// float32-representable matrices, and the finite-difference check. Test
// tolerances come from the error model (reference/bounded.h) or from the
// finite-difference error estimate documented in docs/NUMERICS.md §6.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/core/backends.h"
#include "harness/core/tolerance.h"
#include "reference/bounded.h"
#include "reference/tensor.h"

namespace gradeq::test {

// The backend `name`, or why this build or machine cannot provide it.
struct BackendOrReason {
  std::unique_ptr<Backend> backend;
  std::string reason;
};

inline BackendOrReason backend_or_reason(const std::string& name) {
  try {
    return {make_backend(name), ""};
  } catch (const EnvironmentError& e) {
    return {nullptr, e.what()};
  }
}

// Declares `var` as the backend `name`, or skips the test saying why (for
// cuda: "no CUDA device: ..."): a GPU test never passes silently.
#define GRADEQ_BACKEND_OR_SKIP(var, name)                                   \
  auto var##_or_reason = ::gradeq::test::backend_or_reason(name);           \
  if (!var##_or_reason.backend) GTEST_SKIP() << var##_or_reason.reason;     \
  std::unique_ptr<::gradeq::Backend> var = std::move(var##_or_reason.backend)

using ref::Bounded;
using ref::Matrix;

inline nlohmann::json golden(const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(GRADEQ_GOLDEN_DIR) / (name + ".json");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path.string());
  return nlohmann::json::parse(in);
}

// A nested JSON list as a row-major matrix; a flat list becomes 1 x n.
inline Matrix<double> matrix(const nlohmann::json& j) {
  if (!j.is_array() || j.empty()) throw std::runtime_error("golden: expected a non-empty list");
  if (!j[0].is_array()) {
    Matrix<double> m(1, static_cast<long>(j.size()));
    for (std::size_t i = 0; i < j.size(); ++i) m(0, static_cast<long>(i)) = j[i].get<double>();
    return m;
  }
  Matrix<double> m(static_cast<long>(j.size()), static_cast<long>(j[0].size()));
  for (std::size_t r = 0; r < j.size(); ++r)
    for (std::size_t c = 0; c < j[r].size(); ++c) m(static_cast<long>(r), static_cast<long>(c)) = j[r][c].get<double>();
  return m;
}

inline Matrix<double> random_matrix(std::mt19937_64& rng, long rows, long cols, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Matrix<double> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(normal(rng));
  return m;
}

// Our float64 result against PyTorch's: both are float64 evaluations of the
// same expression, ours bounded by `reference` (propagated), PyTorch's by
// the same model up to the formulation factor (another order of operations).
inline void expect_matches_golden(const Matrix<Bounded>& ours, const Matrix<double>& expected, const std::string& what) {
  ASSERT_EQ(ours.rows(), expected.rows()) << what;
  ASSERT_EQ(ours.cols(), expected.cols()) << what;
  for (long i = 0; i < ours.size(); ++i) {
    const double bound = (1.0 + kFormulationFactor) * ours.data()[i].reference;
    const double err = std::abs(ours.data()[i].value - expected.data()[i]);
    ASSERT_TRUE(std::isfinite(ours.data()[i].value)) << what << "[" << i << "]";
    EXPECT_LE(err, bound) << what << "[" << i << "]: ours " << ours.data()[i].value << ", golden "
                          << expected.data()[i] << ", bound " << bound;
  }
}

// The same, when the golden file's producer used another algorithm whose
// float64 error the reference bounds as `theirs` (same values, other bounds).
inline void expect_matches_golden(const Matrix<Bounded>& ours, const Matrix<Bounded>& theirs,
                                  const Matrix<double>& expected, const std::string& what) {
  ASSERT_EQ(ours.size(), expected.size()) << what;
  ASSERT_EQ(theirs.size(), expected.size()) << what;
  for (long i = 0; i < ours.size(); ++i) {
    const double bound = ours.data()[i].reference + kFormulationFactor * theirs.data()[i].reference;
    const double err = std::abs(ours.data()[i].value - expected.data()[i]);
    EXPECT_LE(err, bound) << what << "[" << i << "]: ours " << ours.data()[i].value << ", golden "
                          << expected.data()[i] << ", bound " << bound;
  }
}

inline void expect_matches_golden(const Bounded& ours, double expected, const std::string& what) {
  const double bound = (1.0 + kFormulationFactor) * ours.reference;
  EXPECT_LE(std::abs(ours.value - expected), bound) << what << ": ours " << ours.value << ", golden " << expected;
}

// Central finite differences of a scalar function f (a generic lambda
// taking Matrix<T> and returning T) against the analytic gradient, every
// element. Error of the difference quotient D(h) (NUMERICS §6): truncation,
// estimated by Richardson as |D(h) - D(h/2)| (x 4/3 for the h/2 quotient,
// doubled for safety), plus float64 rounding of f, 2 r_f / h, with r_f the
// reference's own bound on f.
template <class F>
void expect_gradient_matches(F&& f, const Matrix<double>& x, const Matrix<double>& analytic, const std::string& what) {
  ASSERT_EQ(x.rows(), analytic.rows());
  ASSERT_EQ(x.cols(), analytic.cols());
  double max_abs_gradient = 0.0;
  for (long i = 0; i < analytic.size(); ++i) max_abs_gradient = std::max(max_abs_gradient, std::abs(analytic.data()[i]));
  ASSERT_GT(max_abs_gradient, 0.0) << what << ": a zero gradient makes the check vacuous";
  auto value_at = [&](long i, double delta) {
    Matrix<Bounded> xb = ref::lift<Bounded>(x);
    xb.data()[i] = Bounded::with_bounds(x.data()[i] + delta, 0.0, 0.0);
    return f(xb);
  };
  for (long i = 0; i < x.size(); ++i) {
    const double h = std::ldexp(1.0, -14) * std::max(1.0, std::abs(x.data()[i]));
    const Bounded up = value_at(i, h), down = value_at(i, -h);
    const Bounded up2 = value_at(i, h / 2), down2 = value_at(i, -h / 2);
    const double d_h = (up.value - down.value) / (2 * h);
    const double d_h2 = (up2.value - down2.value) / h;
    const double rounding = 2.0 * std::max({up.reference, down.reference, up2.reference, down2.reference}) / (h / 2);
    const double tolerance = 2.0 * (4.0 / 3.0) * std::abs(d_h - d_h2) + rounding;
    EXPECT_NEAR(analytic.data()[i], d_h2, tolerance) << what << "[" << i << "] (h = " << h << ")";
  }
}

}  // namespace gradeq::test
