// The matrix form of the dot-product rule (reference/matmul.cpp, on float64
// GEMMs) computes what the scalar rule (reference/dot.h) specifies, element
// by element; and the rule's bound holds for float32 products.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>

#include "harness/core/reference_run.h"
#include "harness/core/suite.h"
#include "reference/dot.h"
#include "reference/layers.h"
#include "reference/matmul.h"
#include "reference/matmul_operands.h"
#include "reference/parallel.h"

namespace gradeq::ref {
namespace {

// Random operands in the shapes the reference meets: some exact elements,
// some zeros, every error part, and shared terms laid out as the layers lay
// them out — one source per row (a normalizer's statistics), one per column
// (BatchNorm's), one for a block of rows (GroupNorm's), one for the whole
// matrix (a clip coefficient), and a few scattered.
struct Shapes {
  std::mt19937_64 rng;
  std::uint64_t next_source = 1000000;
  explicit Shapes(std::uint64_t seed) : rng(seed) {}

  double normal(double s = 1.0) { return std::normal_distribution<double>(0.0, s)(rng); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }

  static bool carries_sources(const Matrix<Bounded>& m) {
    for (long i = 0; i < m.size(); ++i)
      if (m.data()[i].shared.count > 0) return true;
    return false;
  }

  Matrix<Bounded> operand(long rows, long cols, std::uint64_t base) {
    Matrix<Bounded> m(rows, cols);
    const bool rows_shared = chance(0.6), cols_shared = chance(0.4), block_shared = chance(0.3), global = chance(0.3),
               scattered = chance(0.3), exact = chance(0.15), zeros = chance(0.5);
    const std::uint64_t global_source = base + 999999;
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) {
        double v = static_cast<float>(normal());
        if (zeros && chance(0.3)) v = 0.0;
        if (exact) {
          m(r, c) = Bounded(std::ldexp(std::round(normal(8.0)), -3));
          continue;
        }
        const double mag = std::abs(v) + 0.1;
        Bounded b = Bounded::with_parts(
            v, {mag * 1e-7 * std::abs(normal()), mag * 1e-7 * std::abs(normal()), mag * 3e-8 * std::abs(normal())},
            mag * 1e-16);
        SharedTerms s;
        const auto add = [&](std::uint64_t source) {
          if (s.count < kSharedTerms) s.term[s.count++] = {source, normal(), 1e-7 * std::abs(normal()) + 1e-9};
        };
        // Sources are fixed per (layout, index); their bound must be too.
        if (rows_shared) add(base + static_cast<std::uint64_t>(r));
        if (cols_shared) add(base + 100000 + static_cast<std::uint64_t>(c));
        if (block_shared) add(base + 200000 + static_cast<std::uint64_t>(r / 3));
        if (global) add(global_source);
        if (scattered && chance(0.1)) add(base + 300000 + (rng() % 5));
        for (int i = 0; i < s.count; ++i) s.term[i].bound = 1e-8 * static_cast<double>(s.term[i].source % 7 + 1);
        m(r, c) = Bounded::with_shared(v, b.kernel_parts, s, b.reference);
      }
    return m;
  }
};

double relative_difference(double x, double y) {
  if (x == y) return 0.0;
  return std::abs(x - y) / std::max(std::abs(x), std::abs(y));
}

void expect_same(const Bounded& fast, const Bounded& rule, const std::string& where) {
  // The values differ only by float64 summation order: within both
  // references' own error bounds.
  EXPECT_LE(std::abs(fast.value - rule.value), fast.reference + rule.reference + 1e-300) << where;
  EXPECT_LE(relative_difference(fast.kernel_bound, rule.kernel_bound), 1e-9) << where;
  EXPECT_LE(relative_difference(fast.kernel_parts.systematic, rule.kernel_parts.systematic), 1e-9) << where;
  EXPECT_LE(relative_difference(fast.kernel_parts.random, rule.kernel_parts.random), 1e-9) << where;
  EXPECT_LE(relative_difference(fast.kernel_parts.scale, rule.kernel_parts.scale), 1e-9) << where;
  EXPECT_LE(relative_difference(fast.reference, rule.reference), 1e-9) << where;
  EXPECT_EQ(fast.shared.count, rule.shared.count) << where;
  EXPECT_LE(relative_difference(detail::shared_magnitude(fast.shared), detail::shared_magnitude(rule.shared)), 1e-9)
      << where;
}

TEST(Matmul, MatrixFormIsTheScalarRule) {
  Shapes g(7);
  long compared = 0, with_shared = 0, exact = 0, trials_with_common = 0, partly_folded = 0;
  for (int trial = 0; trial < 90; ++trial) {
    const long m = 1 + static_cast<long>(g.rng() % 9), n = 1 + static_cast<long>(g.rng() % 40),
               p = 1 + static_cast<long>(g.rng() % 9);
    // Every third pair of operands draws on the same sources (as a gradient
    // and the activation it meets both depend on one normalizer's statistics).
    const std::uint64_t base_b = trial % 3 == 0 ? 1u << 24 : 2u << 24;
    const Matrix<Bounded> a = g.operand(m, n, 1u << 24), b = g.operand(n, p, base_b);
    const ProductSums sums(a, b);
    const Matrix<Bounded> fast = sums.decide(), rule = matmul_by_rule(a, b);
    const long following = sums.outputs_following_sources();
    partly_folded += following > 0 && following < m * p;
    trials_with_common += base_b == (1u << 24) && g.carries_sources(a) && g.carries_sources(b);
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < p; ++j) {
        expect_same(fast(i, j), rule(i, j),
                    "trial " + std::to_string(trial) + " (" + std::to_string(i) + ", " + std::to_string(j) + ")");
        ++compared;
        with_shared += rule(i, j).shared.count > 0;
        exact += rule(i, j).kernel_bound == 0.0;
      }
  }
  // The cases the rule distinguishes all occurred.
  EXPECT_GT(compared, 1000);
  EXPECT_GT(trials_with_common, 5);
  EXPECT_GT(with_shared, 100);
  EXPECT_GT(exact, 10);
  EXPECT_GT(partly_folded, 5);  // some outputs folded every source, others of the same product followed them
}

// Where the bound sums run in float32 (with their margin), every bound is
// at least the scalar rule's and at most bound_sum_inflation(n) times it;
// values and shared terms are the rule's.
void expect_within_inflation(const Bounded& fast, const Bounded& rule, double inflation, const std::string& where) {
  EXPECT_LE(std::abs(fast.value - rule.value), fast.reference + rule.reference + 1e-300) << where;
  const auto within = [&](double f, double r, const char* part) {
    EXPECT_GE(f, r * (1.0 - 1e-12)) << where << " " << part;
    EXPECT_LE(f, r * inflation * (1.0 + 1e-12)) << where << " " << part;
  };
  within(fast.kernel_bound, rule.kernel_bound, "kernel bound");
  within(fast.kernel_parts.systematic, rule.kernel_parts.systematic, "systematic");
  within(fast.kernel_parts.random, rule.kernel_parts.random, "random");
  within(fast.kernel_parts.scale, rule.kernel_parts.scale, "scale");
  within(fast.reference, rule.reference, "reference");
  EXPECT_EQ(fast.shared.count, rule.shared.count) << where;
  EXPECT_LE(relative_difference(detail::shared_magnitude(fast.shared), detail::shared_magnitude(rule.shared)), 1e-9)
      << where;
}

TEST(Matmul, BoundSumsInFloat32AreTheScalarRuleOrUpToTheirMargin) {
  Shapes g(7);
  long compared = 0, looser = 0, exact = 0;
  double widest = 1.0;
  const ScopedBoundSumsInFloat32 float32;
  for (int trial = 0; trial < 90; ++trial) {
    const long m = 1 + static_cast<long>(g.rng() % 9), n = 1 + static_cast<long>(g.rng() % 40),
               p = 1 + static_cast<long>(g.rng() % 9);
    const std::uint64_t base_b = trial % 3 == 0 ? 1u << 24 : 2u << 24;
    const Matrix<Bounded> a = g.operand(m, n, 1u << 24), b = g.operand(n, p, base_b);
    const Matrix<Bounded> fast = matmul(a, b), rule = matmul_by_rule(a, b);
    const double inflation = matrix_form::bound_sum_inflation(n);
    for (long i = 0; i < fast.size(); ++i) {
      const Bounded &f = fast.data()[i], &r = rule.data()[i];
      expect_within_inflation(f, r, inflation, "trial " + std::to_string(trial) + " element " + std::to_string(i));
      ++compared;
      exact += r.kernel_bound == 0.0;
      looser += f.kernel_bound > r.kernel_bound * (1.0 + 1e-12);
      if (r.kernel_bound > 0.0) widest = std::max(widest, f.kernel_bound / r.kernel_bound);
    }
  }
  std::printf("  widest kernel bound over the scalar rule's: %.9f (margin at n = 40: %.9f)\n", widest,
              matrix_form::bound_sum_inflation(40));
  EXPECT_GT(compared, 1000);
  EXPECT_GT(exact, 10);    // exact products stay exact: M is then the float64 sum |a| |b|
  EXPECT_GT(looser, 500);  // the float32 path ran, and its margin shows
}

// The float32 bound sum against the exact sum of non-negative products
// (long double, 64 significand bits: within 2^-52 of exact at these
// lengths), over the ranges the reference meets: rows at magnitudes 2^-80
// to 2^80, rows of values near 2^-150, a row and a column spanning more
// than 2^60 (summed in float64), zeros, rows and columns of zeros, and a
// row and column that meet at no nonzero term. A float32 GEMM without the
// margin falls below the exact sum on many elements: the margin is what
// makes it a bound.
TEST(BoundSums, Float32SumIsNeverBelowTheExactSumAndWithinItsMargin) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  long compared = 0, raw_below = 0, fell_back = 0, zeros = 0;
  const ScopedBoundSumsInFloat32 float32;
  for (long k : {1L, 7L, 300L, 4096L}) {
    const long m = 40, p = 24;
    matrix_form::Dense x(m, k), y(k, p);
    for (long i = 0; i < m; ++i) {
      const int row_exponent = static_cast<int>(rng() % 121) - 60;
      for (long j = 0; j < k; ++j) {
        const double r = unit(rng);
        x(i, j) = r < 0.1 ? 0.0 : unit(rng) * std::ldexp(1.0, row_exponent + static_cast<int>(rng() % 41) - 20);
        if (i % 9 == 4) x(i, j) = std::ldexp(unit(rng), -140 - static_cast<int>(rng() % 20));  // tiny rows
        if (i == 7) x(i, j) = 0.0;                                                         // a row of zeros
        if (i == 2 && j % 2 == 1) x(i, j) = 0.0;  // row 2 meets column 2 nowhere: an exact 0
      }
    }
    x(4, 0) = 1.0;  // a tiny row with one large element: 2^140 and more between its elements
    for (long i = 0; i < k; ++i)
      for (long j = 0; j < p; ++j) {
        y(i, j) = j == 5 ? 0.0 : unit(rng) * std::ldexp(1.0, static_cast<int>(rng() % 41) - 20);
        if (j == 2 && i % 2 == 0) y(i, j) = 0.0;
      }
    if (k > 1) y(0, 3) = 0.0;  // row 4's one large element meets a zero
    y(k - 1, 9) = 0x1p-90;     // column 9 spans more than 2^60
    matrix_form::Dense upper = matrix_form::Dense::Constant(m, p, 0.0);
    matrix_form::add_bound_product(upper, x, y);
    const double inflation = matrix_form::bound_sum_inflation(k);
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < p; ++j) {
        long double exact = 0.0L;
        float raw = 0.0f;
        for (long t = 0; t < k; ++t) {
          exact += static_cast<long double>(x(i, t)) * static_cast<long double>(y(t, j));
          raw += static_cast<float>(x(i, t)) * static_cast<float>(y(t, j));
        }
        const double e = static_cast<double>(exact);
        const std::string where = "k " + std::to_string(k) + " (" + std::to_string(i) + ", " + std::to_string(j) + ")";
        ASSERT_GE(upper(i, j), e * (1.0 - 0x1p-52)) << where;
        ASSERT_LE(upper(i, j), e * inflation * (1.0 + 0x1p-52)) << where;
        if (e == 0.0) {
          ASSERT_EQ(upper(i, j), 0.0) << where;
        }
        zeros += e == 0.0 && i != 7 && j != 5;
        raw_below += static_cast<double>(raw) < e;
        fell_back += e != 0.0 && upper(i, j) <= e * (1.0 + 0x1p-40);  // no margin: summed in float64
        ++compared;
      }
  }
  std::printf("  %ld sums: a float32 GEMM without the margin below the exact sum at %ld\n", compared, raw_below);
  EXPECT_GT(raw_below, compared / 10);
  EXPECT_GT(fell_back, 0);  // the rows and columns of too wide a span were summed in float64
  EXPECT_GT(zeros, 0);      // and sums with no nonzero product stayed exactly 0
}

TEST(Matmul, OperandsSharingASourceFollowTheRule) {
  // A source carried by both operands (a normalizer's statistics in a
  // gradient and in the activation it meets): one entry on each side.
  Shapes g(11);
  Matrix<Bounded> a = g.operand(4, 6, 1u << 24), b = g.operand(6, 3, 2u << 24);
  SharedTerms s;
  s.term[0] = {77, 0.5, 1e-7};
  s.count = 1;
  a(0, 0) = Bounded::with_shared(a(0, 0).value, a(0, 0).kernel_parts, s, 0.0);
  b(0, 0) = Bounded::with_shared(b(0, 0).value, b(0, 0).kernel_parts, s, 0.0);
  const Matrix<Bounded> fast = matmul(a, b), rule = matmul_by_rule(a, b);
  for (long i = 0; i < fast.size(); ++i) expect_same(fast.data()[i], rule.data()[i], std::to_string(i));
  // The source meets itself in output (0, 0): kept shared, with both entries.
  bool kept = false;
  for (int t = 0; t < rule(0, 0).shared.count; ++t) kept = kept || rule(0, 0).shared.term[t].source == 77;
  EXPECT_TRUE(kept);
}

// A weight gradient after a normalizer, dW = dy^T x: every row of the
// reduction carries its statistics in both operands, so each output sees
// one source per row, more than the rule follows: all are folded, which the
// matrix form decides from the operands without the per-source sums.
TEST(Matmul, ProductsOverManyRowsStatisticsFoldThemAll) {
  Shapes g(13);
  for (const long rows : {17L, 40L}) {
    const long out = 5, in = 7;
    Matrix<Bounded> dy_t(out, rows), x(rows, in);
    const auto with_source = [&](double v, std::uint64_t source, double c) {
      SharedTerms s;
      s.term[0] = {source, c, 1e-7};
      s.term[1] = {source + 500000, -0.5 * c, 2e-7};
      s.count = 2;
      const double mag = std::abs(v) + 0.1;
      return Bounded::with_shared(v, {mag * 1e-7, mag * 2e-7, mag * 5e-8}, s, mag * 1e-16);
    };
    for (long r = 0; r < rows; ++r) {
      for (long o = 0; o < out; ++o) dy_t(o, r) = with_source(static_cast<float>(g.normal()) + 3.0, 7000 + r, g.normal());
      for (long i = 0; i < in; ++i) x(r, i) = with_source(static_cast<float>(g.normal()) - 3.0, 7000 + r, g.normal());
    }
    const Matrix<Bounded> fast = matmul(dy_t, x), rule = matmul_by_rule(dy_t, x);
    for (long i = 0; i < fast.size(); ++i) {
      expect_same(fast.data()[i], rule.data()[i], "rows " + std::to_string(rows) + ", element " + std::to_string(i));
      EXPECT_EQ(rule.data()[i].shared.count, 0) << "more than 16 sources: all folded";
    }
  }
}

// The same weight gradient where both operands hold exact zeros: x after a
// ReLU (an RMSNorm of it keeps them), dy on padded tokens. An output then
// meets a row's statistics only where both elements are nonzero, which
// the matrix form counts per output (reference/matmul_sources.cpp,
// outputs_that_fold) to fold them all without the per-source sums. Where
// a unit is all but dead (nonzero in a few rows: a column of x, or a row
// of dy^T before a ReLU) its outputs meet few sources, the rule follows
// them, and the sums are kept for those outputs alone.
TEST(Matmul, ProductsOverManyRowsStatisticsFoldThemAllWhereBothOperandsHoldZeros) {
  Shapes g(29);
  for (const bool nearly_dead_unit : {false, true}) {
    const long rows = 64, out = 5, in = 7;
    Matrix<Bounded> dy_t(out, rows), x(rows, in);
    // Each row's statistics in both operands; in x also a sample's (16 rows).
    const auto with_source = [&](double v, long r, bool sample) {
      if (v == 0.0) return Bounded(0.0);
      SharedTerms s;
      s.term[s.count++] = {static_cast<std::uint64_t>(7000 + r), g.normal(), 1e-7};
      if (sample) s.term[s.count++] = {static_cast<std::uint64_t>(9000 + r / 16), g.normal(), 2e-7};
      const double mag = std::abs(v) + 0.1;
      return Bounded::with_shared(v, {mag * 1e-7, mag * 2e-7, mag * 5e-8}, s, mag * 1e-16);
    };
    for (long r = 0; r < rows; ++r) {
      const bool padded = r % 4 == 3;
      for (long o = 0; o < out; ++o) {
        const bool zero = padded || (nearly_dead_unit && o == 0 && r > 2);
        dy_t(o, r) = with_source(zero ? 0.0 : static_cast<float>(g.normal()), r, false);
      }
      for (long i = 0; i < in; ++i) {
        const bool relu_zero = r <= 2 ? false : (nearly_dead_unit && i == 0) || g.chance(0.5);
        x(r, i) = with_source(relu_zero ? 0.0 : static_cast<float>(g.normal()), r, true);
      }
    }
    const ProductSums sums(dy_t, x);
    // The nearly dead units' outputs: row 0 of dy^T and column 0 of x.
    EXPECT_EQ(sums.outputs_following_sources(), nearly_dead_unit ? out + in - 1 : 0);
    const Matrix<Bounded> fast = sums.decide(), rule = matmul_by_rule(dy_t, x);
    for (long i = 0; i < fast.size(); ++i) expect_same(fast.data()[i], rule.data()[i], "element " + std::to_string(i));
    // The rule itself folds every source (more than 16 an output), but the
    // nearly dead units': rows 0-2 and their sample's statistics, kept.
    for (long o = 0; o < out; ++o)
      for (long i = 0; i < in; ++i)
        EXPECT_EQ(rule(o, i).shared.count > 0, nearly_dead_unit && (o == 0 || i == 0)) << "(" << o << ", " << i << ")";
  }
}

// A product taken in slices of its reduction (ProductSums: a weight
// gradient over row chunks).
Matrix<Bounded> sliced_product(const Matrix<Bounded>& a, const Matrix<Bounded>& b, const std::vector<long>& slices) {
  long k = 0;
  std::optional<ProductSums> sums;
  for (long s : slices) {
    const Matrix<Bounded> as = a.middleCols(k, s), bs = b.middleRows(k, s);
    if (sums) {
      sums->add(as, bs);
    } else {
      sums.emplace(as, bs);
    }
    k += s;
  }
  EXPECT_EQ(k, a.cols());
  EXPECT_EQ(sums->reduction(), a.cols());
  return sums->decide();
}

// Random slices of a random reduction of length n.
std::vector<long> random_slices(Shapes& g, long n) {
  std::vector<long> slices;
  for (long left = n; left > 0;) {
    const long s = std::min(left, 1 + static_cast<long>(g.rng() % static_cast<std::uint64_t>(n)));
    slices.push_back(s);
    left -= s;
  }
  return slices;
}

// Where no shared source spans two slices, slices give the whole product's
// result: values within the references' own bounds, every part to 1e-9.
// Sources here are laid out as a weight gradient's are: per row of the
// reduction (a token's statistics, in both operands) and per block of
// three rows (a sample's), with slices on block boundaries; at 12 rows the
// rule follows them one by one, at 60 it folds them all.
TEST(Matmul, ProductSlicedWhereNoSourceSpansSlicesIsTheWholeProduct) {
  Shapes g(17);
  long compared = 0, with_shared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const long blocks = trial % 2 == 0 ? 4 : 20, rows = 3 * blocks, out = 1 + static_cast<long>(g.rng() % 6),
               in = 1 + static_cast<long>(g.rng() % 6);
    Matrix<Bounded> dy_t(out, rows), x(rows, in);
    const auto with_sources = [&](double v, long r) {
      SharedTerms s;
      if (g.chance(0.8)) s.term[s.count++] = {static_cast<std::uint64_t>(7000 + r), g.normal(), 1e-7};
      if (g.chance(0.8)) s.term[s.count++] = {static_cast<std::uint64_t>(9000 + r / 3), g.normal(), 2e-7};
      const double mag = std::abs(v) + 0.1;
      return Bounded::with_shared(v, {mag * 1e-7, mag * 2e-7, mag * 5e-8}, s, mag * 1e-16);
    };
    for (long r = 0; r < rows; ++r) {
      for (long o = 0; o < out; ++o) dy_t(o, r) = with_sources(static_cast<float>(g.normal()), r);
      for (long i = 0; i < in; ++i) x(r, i) = with_sources(static_cast<float>(g.normal()), r);
    }
    std::vector<long> slices;
    for (long b : random_slices(g, blocks)) slices.push_back(3 * b);
    const Matrix<Bounded> whole = matmul(dy_t, x), sliced = sliced_product(dy_t, x, slices);
    for (long i = 0; i < whole.size(); ++i) {
      expect_same(sliced.data()[i], whole.data()[i], "trial " + std::to_string(trial) + ", element " + std::to_string(i));
      ++compared;
      with_shared += whole.data()[i].shared.count > 0;
    }
  }
  EXPECT_GT(compared, 200);
  EXPECT_GT(with_shared, 20);  // the rule followed sources one by one, not only folded them
}

// A source along the whole reduction (one row of A's statistics, met at
// every term) spans every slice; carried at several terms of each slice,
// its entries from all slices merge into one coefficient, as in one product.
TEST(Matmul, ASourceAtSeveralTermsOfEverySliceMergesAcrossSlices) {
  Shapes g(19);
  long kept = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const long m = 1 + static_cast<long>(g.rng() % 5), n = 8 + static_cast<long>(g.rng() % 30),
               p = 1 + static_cast<long>(g.rng() % 5);
    Matrix<Bounded> a(m, n), b(n, p);
    for (long i = 0; i < m; ++i)
      for (long k = 0; k < n; ++k) {
        SharedTerms s;
        s.term[s.count++] = {static_cast<std::uint64_t>(100 + i), g.normal(), 1e-7};
        const double v = static_cast<float>(g.normal()), mag = std::abs(v) + 0.1;
        a(i, k) = Bounded::with_shared(v, {mag * 1e-7, mag * 2e-7, mag * 5e-8}, s, mag * 1e-16);
      }
    for (long i = 0; i < b.size(); ++i) b.data()[i] = Bounded(static_cast<float>(g.normal()));
    std::vector<long> slices;
    for (long left = n; left > 0;) {  // at least two terms a slice
      const long s = left < 4 ? left : 2 + static_cast<long>(g.rng() % static_cast<std::uint64_t>(left - 3));
      slices.push_back(s);
      left -= s;
    }
    const Matrix<Bounded> whole = matmul(a, b), sliced = sliced_product(a, b, slices);
    for (long i = 0; i < whole.size(); ++i) {
      expect_same(sliced.data()[i], whole.data()[i], "trial " + std::to_string(trial) + ", element " + std::to_string(i));
      kept += whole.data()[i].shared.count;
    }
  }
  EXPECT_GT(kept, 50);
}

// Any operands, any slices: the sums that do not involve shared sources are
// the whole product's, and the bound is never smaller (a source that spans
// slices is followed per slice, which can only fold more of it).
TEST(Matmul, ProductSlicedAnyhowBoundsNoLessThanTheWholeProduct) {
  Shapes g(23);
  long compared = 0, looser = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const long m = 1 + static_cast<long>(g.rng() % 8), n = 2 + static_cast<long>(g.rng() % 40),
               p = 1 + static_cast<long>(g.rng() % 8);
    const std::uint64_t base_b = trial % 3 == 0 ? 1u << 24 : 2u << 24;
    const Matrix<Bounded> a = g.operand(m, n, 1u << 24), b = g.operand(n, p, base_b);
    const Matrix<Bounded> whole = matmul(a, b), sliced = sliced_product(a, b, random_slices(g, n));
    for (long i = 0; i < whole.size(); ++i) {
      const Bounded &s = sliced.data()[i], &w = whole.data()[i];
      const std::string where = "trial " + std::to_string(trial) + ", element " + std::to_string(i);
      EXPECT_LE(std::abs(s.value - w.value), s.reference + w.reference + 1e-300) << where;
      EXPECT_LE(relative_difference(s.kernel_parts.random, w.kernel_parts.random), 1e-9) << where;
      EXPECT_LE(relative_difference(s.kernel_parts.scale, w.kernel_parts.scale), 1e-9) << where;
      EXPECT_LE(relative_difference(s.reference, w.reference), 1e-9) << where;
      EXPECT_GE(s.kernel_bound, w.kernel_bound * (1.0 - 1e-9)) << where;
      ++compared;
      looser += s.kernel_bound > w.kernel_bound * (1.0 + 1e-9);
    }
  }
  EXPECT_GT(compared, 500);
  EXPECT_GT(looser, 10);  // sources that span slices occurred, and cost bound
}

// The rule's bound holds for float32 GEMMs of exact float32 operands, in
// two summation orders, with and without fused multiply-add.
TEST(Matmul, BoundHoldsForFloat32Products) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 50; ++trial) {
    const long n = 1 + static_cast<long>(rng() % 3000);
    Matrix<Bounded> a(1, n), b(n, 1);
    std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
    for (long k = 0; k < n; ++k) {
      x[k] = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 16) - 8);
      y[k] = normal(rng);
      a(0, k) = Bounded(x[k]);
      b(k, 0) = Bounded(y[k]);
    }
    const Bounded d = matmul(a, b)(0, 0);
    float forward = 0.0f, backward = 0.0f, fused = 0.0f;
    for (long k = 0; k < n; ++k) forward += x[k] * y[k];
    for (long k = n; k-- > 0;) backward += x[k] * y[k];
    for (long k = 0; k < n; ++k) fused = std::fma(x[k], y[k], fused);
    for (float f : {forward, backward, fused}) EXPECT_LE(std::abs(static_cast<double>(f) - d.value), d.kernel_bound);
  }
}

// The probabilistic bound of a long reduction is not vacuous. A correct
// float32 kernel may sum in any order: one that adds every positive
// product first, the largest first, then the negative ones, the smallest
// first, keeps its partial sums as large as they get, and its roundings
// (each within u of a partial sum, their signs as they fall) use a
// sizeable part of the bound, λ √(n + 1) u Σ|a_k b_k|. The order of the
// operands, whose partial sums stay near √k, uses about √n times less:
// that is the slack on long reductions at scale (docs/NUMERICS.md §8), and
// the bound must allow the other order. The sorted order's partial sums
// rise to about Σ|a_k b_k| / 2 and fall back, so its error's standard
// deviation is about Σ|a_k b_k| u √n / 6 (each rounding uniform within
// u |s_k|): 1 / (6λ) = 0.028 of the bound, and the worst of 64 about 2.5
// times that. A bound 20 times a correct kernel's error (0.05) fails.
TEST(Matmul, LongReductionsApproachTheProbabilisticBoundInSomeOrder) {
  RoundingModel model;
  model.reduction = ReductionBound::probabilistic;
  const ScopedRoundingModel scope(model);
  std::mt19937_64 rng(31);
  std::normal_distribution<float> normal;
  const long n = 4097;
  double worst_sorted = 0.0, worst_natural = 0.0;
  for (int trial = 0; trial < 64; ++trial) {
    Matrix<Bounded> a(1, n), b(n, 1);
    std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
    std::vector<long> order(static_cast<std::size_t>(n));
    for (long k = 0; k < n; ++k) {
      x[k] = normal(rng);
      y[k] = normal(rng);
      a(0, k) = Bounded(x[k]);
      b(k, 0) = Bounded(y[k]);
      order[k] = k;
    }
    const auto product = [&](long k) { return x[k] * y[k]; };
    // Descending: the positive products, largest first, then the negative
    // ones, smallest in magnitude first.
    std::sort(order.begin(), order.end(), [&](long i, long j) { return product(i) > product(j); });
    const Bounded d = matmul(a, b)(0, 0);
    float natural = 0.0f, sorted = 0.0f;
    for (long k = 0; k < n; ++k) natural += product(k);
    for (long k : order) sorted += product(k);
    const double bound = d.kernel_bound;
    worst_natural = std::max(worst_natural, std::abs(static_cast<double>(natural) - d.value) / bound);
    worst_sorted = std::max(worst_sorted, std::abs(static_cast<double>(sorted) - d.value) / bound);
  }
  std::printf("  n = %ld, 64 dot products: worst err/bound %.3g in the operands' order, %.3g sorted by sign\n", n,
              worst_natural, worst_sorted);
  EXPECT_LE(worst_sorted, 1.0);
  EXPECT_GE(worst_sorted, 0.05);
}

TEST(Matmul, DyadicProductsAreExact) {
  Matrix<Bounded> a(2, 3), b(3, 2);
  for (long i = 0; i < a.size(); ++i) a.data()[i] = Bounded(0.25 * static_cast<double>(i + 1));
  for (long i = 0; i < b.size(); ++i) b.data()[i] = Bounded(-2.0 * static_cast<double>(i));
  const Matrix<Bounded> c = matmul(a, b);
  for (long i = 0; i < c.size(); ++i) {
    EXPECT_EQ(c.data()[i].kernel_bound, 0.0);
    EXPECT_EQ(c.data()[i].reference, 0.0);
  }
  // One operand whose bits do not fit beside the other's: a rounding.
  a(0, 0) = Bounded(1.0 + 0x1p-20);
  b(0, 0) = Bounded(1.0 + 0x1p-10);
  EXPECT_GT(matmul(a, b)(0, 0).kernel_bound, 0.0);
}

// Products big enough to be split over threads give the same bits with one
// thread as with several (GRADEQ_THREADS; panels of fixed size).
TEST(Matmul, ResultsDoNotDependOnTheThreadCount) {
  Shapes g(13);
  const Matrix<Bounded> a = g.operand(300, 120, 1u << 24), b = g.operand(120, 200, 2u << 24);
  ::setenv("GRADEQ_THREADS", "1", 1);
  const Matrix<Bounded> one = matmul(a, b);
  ::setenv("GRADEQ_THREADS", "3", 1);
  const Matrix<Bounded> three = matmul(a, b);
  ::unsetenv("GRADEQ_THREADS");
  for (long i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one.data()[i].value, three.data()[i].value);
    ASSERT_EQ(one.data()[i].kernel_bound, three.data()[i].kernel_bound);
    ASSERT_EQ(one.data()[i].reference, three.data()[i].reference);
  }
}

// Every default scenario's reference run (values and kernel bounds of every
// gradient, parameter, optimizer state and statistic, every window) is the
// same with the matrix form as with the scalar rule element by element.
// The float64 reference's own bound is not held to 1e-9: it depends on
// whether float64 operations were exact, which the last bit of a value
// (summed in another order) can change; it is printed.
//
// A model holding attention is held to the same since the reference sets
// dS on a row that sees one key to its exact 0 (reference/attention.h): in
// float64 it came out 0 or +-1e-19 as the summation orders fell, and the
// later products' decisions counted the nonzero terms (the bounds differed
// by up to 8e-4 on gpt_attention_block before).
TEST(Matmul, DefaultScenariosAgreeWithTheScalarRule) {
  long tensors = 0;
  for (const ScenarioSpec& spec : default_scenarios()) {
    const Scenario s = materialize(spec);
    const ReferenceRun fast = run_reference(s, s.spec.split, ErrorModel{});
    ReferenceRun rule;
    {
      const ScopedMatmulByRule scope;
      rule = run_reference(s, s.spec.split, ErrorModel{});
    }
    ASSERT_EQ(fast.windows.size(), rule.windows.size()) << spec.name;
    long elements = 0;
    double worst = 0.0, worst_reference = 0.0;
    for (std::size_t w = 0; w < fast.windows.size(); ++w) {
      ASSERT_EQ(fast.windows[w].tensors.size(), rule.windows[w].tensors.size()) << spec.name;
      for (std::size_t t = 0; t < fast.windows[w].tensors.size(); ++t) {
        const ReferenceTensor &f = fast.windows[w].tensors[t], &r = rule.windows[w].tensors[t];
        ASSERT_EQ(f.value.size(), r.value.size()) << spec.name << " " << f.name;
        for (std::size_t i = 0; i < f.value.size(); ++i) {
          const std::string where = spec.name + " window " + std::to_string(w) + " " + f.name + "[" + std::to_string(i) + "]";
          ASSERT_LE(std::abs(f.value[i] - r.value[i]), f.reference_bound[i] + r.reference_bound[i]) << where;
          const double d = relative_difference(f.kernel_bound[i], r.kernel_bound[i]);
          ASSERT_LE(d, 1e-9) << where << " matrix " << f.kernel_bound[i] << " rule " << r.kernel_bound[i];
          ++elements;
          worst = std::max(worst, d);
          worst_reference = std::max(worst_reference, relative_difference(f.reference_bound[i], r.reference_bound[i]));
        }
        ++tensors;
      }
    }
    std::printf("  %-28s %6ld elements, kernel bounds differ by at most %.3g, reference bounds %.3g\n",
                spec.name.c_str(), elements, worst, worst_reference);
  }
  EXPECT_GT(tensors, 100);
}

}  // namespace
}  // namespace gradeq::ref

namespace gradeq::ref {
namespace {

// The one loop the reference (and the campaign) runs in parallel: every
// index exactly once, on at most the threads asked for, and an exception
// in any thread comes back to the caller.
TEST(Parallel, EveryIndexOnceAndExceptionsComeBack) {
  for (long threads : {1L, 2L, 5L}) {
    std::vector<std::atomic<int>> seen(1000);
    std::atomic<long> highest_thread{0};
    parallel_for(1000, threads, [&](long i, long t) {
      ++seen[static_cast<std::size_t>(i)];
      long h = highest_thread.load();
      while (t > h && !highest_thread.compare_exchange_weak(h, t)) {
      }
    });
    for (const auto& s : seen) EXPECT_EQ(s.load(), 1);
    EXPECT_LT(highest_thread.load(), threads);
    EXPECT_THROW(parallel_for(100, threads,
                              [](long i, long) {
                                if (i == 37) throw std::runtime_error("item 37");
                              }),
                 std::runtime_error);
  }
}

}  // namespace
}  // namespace gradeq::ref
