// The Bounded scalar's bounds hold: random expressions evaluated in float32
// stay within the propagated kernel bound of the exact (float64) value, and
// exact float32 arithmetic is recognised as exact.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>

#include <gtest/gtest.h>

#include "harness/core/tolerance.h"
#include "kernels/element_math.h"
#include "reference/bounded.h"
#include "reference/dot.h"
#include "reference/layers.h"
#include "reference/losses.h"

namespace gradeq::ref {
namespace {

// Evaluate the same expression in float and in Bounded.
struct Pair {
  float f;
  Bounded b;
};

Pair leaf(double v) {
  const float f = static_cast<float>(v);
  return {f, Bounded(static_cast<double>(f))};
}

// The exactness facts read a double's bits: its lowest set bit
// (granularity_exponent), its significant bits, and whether it is a value
// of a narrower format (representable). Checked against their definitions
// in arithmetic, on normal and subnormal doubles of every sign and scale.
TEST(Bounded, BitLevelFactsMatchTheirDefinitions) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> exponent(-1080, 1000), bits(1, 53);
  for (int trial = 0; trial < 200000; ++trial) {
    // A random odd integer of `b` bits times 2^e: its lowest set bit is at
    // e, it has b significant bits (fewer where 2^e underflows).
    const int b = bits(rng);
    const std::uint64_t odd = (rng() >> (64 - b)) | 1 | (std::uint64_t{1} << (b - 1));
    const double x = std::ldexp(static_cast<double>(odd), exponent(rng)) * (trial % 2 ? -1.0 : 1.0);
    if (x == 0.0 || !std::isfinite(x)) continue;
    int e = 0;
    const double m = std::frexp(std::abs(x), &e);
    const auto mantissa = static_cast<std::uint64_t>(std::ldexp(m, 53));  // x = mantissa 2^(e-53), exactly
    const int lowest = std::countr_zero(mantissa);
    ASSERT_EQ(granularity_exponent(x), e - 53 + lowest) << x;
    ASSERT_EQ(significant_bits(x), 53 - lowest) << x;
    // x is a multiple of its ulp in a format of p bits whose smallest
    // normal exponent is e_min (float32, bfloat16, float16).
    for (const auto& [p, e_min] : {std::pair{24, -126}, std::pair{8, -126}, std::pair{11, -14}}) {
      const double scaled = std::ldexp(x, p - 1 - std::max(e - 1, e_min));  // x / ulp, exact
      ASSERT_EQ(representable(x, p, e_min), scaled == std::trunc(scaled)) << x << " p=" << p;
    }
    if (std::abs(x) <= static_cast<double>(std::numeric_limits<float>::max())) {
      ASSERT_EQ(representable(x, 24, -126), static_cast<double>(static_cast<float>(x)) == x) << x;
    }
  }
  EXPECT_TRUE(representable(0.0, 24, -126));
  EXPECT_FALSE(representable(std::numeric_limits<double>::infinity(), 24, -126));
  EXPECT_EQ(significant_bits(0.0), 0);
  EXPECT_EQ(granularity_exponent(std::numeric_limits<double>::denorm_min()), -1074);
  EXPECT_EQ(granularity_exponent(0.75), -2);
  EXPECT_EQ(significant_bits(0.75), 2);
}

TEST(Bounded, RandomExpressionsStayWithinTheirBound) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> op(0, 7);
  int checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    Pair a = leaf(normal(rng)), b = leaf(normal(rng) * 4.0);
    for (int step = 0; step < 6; ++step) {
      const Pair c = leaf(normal(rng));
      switch (op(rng)) {
        case 0: a = {a.f + c.f, a.b + c.b}; break;
        case 1: a = {a.f - b.f, a.b - b.b}; break;
        case 2: a = {a.f * c.f, a.b * c.b}; break;
        case 3: a = {a.f / (std::abs(c.f) + 0.5f), a.b / (abs(c.b) + Bounded(0.5))}; break;
        case 4: a = {std::exp(c.f), exp(c.b)}; break;
        case 5: a = {std::tanh(a.f), tanh(a.b)}; break;
        case 6: a = {std::sqrt(std::abs(a.f)), sqrt(abs(a.b))}; break;
        case 7: a = {std::log(std::abs(a.f) + 1.0f), log(abs(a.b) + Bounded(1.0))}; break;
      }
      std::swap(a, b);
    }
    for (const Pair& p : {a, b}) {
      if (!std::isfinite(p.b.kernel_bound)) continue;
      ASSERT_LE(std::abs(static_cast<double>(p.f) - p.b.value), p.b.kernel_bound) << "trial " << trial;
      ++checked;
    }
  }
  EXPECT_GT(checked, 30000);
}

TEST(Bounded, ReductionBoundHoldsForEveryOrder) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> x(257);
    for (double& v : x) v = static_cast<float>(normal(rng) * std::ldexp(1.0, static_cast<int>(rng() % 20) - 10));
    const Bounded s = reduce<Bounded>(static_cast<long>(x.size()), [&](long i) { return Bounded(x[i]); });
    float forward = 0.0f, backward = 0.0f;
    for (double v : x) forward += static_cast<float>(v);
    for (auto it = x.rbegin(); it != x.rend(); ++it) backward += static_cast<float>(*it);
    EXPECT_LE(std::abs(forward - s.value), s.kernel_bound);
    EXPECT_LE(std::abs(backward - s.value), s.kernel_bound);
  }
}

// n equal terms summed in float32 round alike at every step of a binade:
// their error grows like n u, not sqrt(n) u (a global pool hands every
// position the same gradient, so the bias gradient before it is such a
// sum). The probabilistic form must hold them, nearly equal terms (within
// an ulp of the partial sums) and equal terms among zeros too; and the
// error does exceed what sqrt(n) u M would have allowed, which is what the
// grouping of a sum's own roundings (reductions.h, rounding_groups) is for.
TEST(Bounded, EqualTermsRoundAlike) {
  const ScopedRoundingModel scope(gradeq::rounding_model_for({DType::f32, DType::f32}, gradeq::ErrorModel{}));
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> jitter(-1.0, 1.0);
  double worst_over_sqrt_n = 0.0;
  for (double c : {0.1, 1.0 / 3.0, 0.7071067811865476, 0.001 * 3.141592653589793, -0.0118})
    for (long n : {1024L, 4096L, 65536L})
      for (int variant = 0; variant < 3; ++variant) {
        std::vector<double> x(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < x.size(); ++i) {
          double v = c;
          if (variant == 1) v = c * (1.0 + 1e-9 * jitter(rng));  // nearly equal: within an ulp of the partial sums
          if (variant == 2 && i % 3 == 1) v = 0.0;               // equal or zero: behind a ReLU
          x[i] = static_cast<float>(v);
        }
        const Bounded s = reduce<Bounded>(n, [&](long i) { return Bounded(x[static_cast<std::size_t>(i)]); });
        float forward = 0.0f;
        for (double v : x) forward += static_cast<float>(v);
        const double error = std::abs(forward - s.value);
        EXPECT_LE(error, s.kernel_bound) << "c " << c << ", n " << n << ", variant " << variant;
        const double magnitude = std::abs(s.value);
        const double sqrt_n_rule = 6.0 * std::sqrt(static_cast<double>(n)) * 0x1p-24 * magnitude;
        worst_over_sqrt_n = std::max(worst_over_sqrt_n, error / sqrt_n_rule);
      }
  EXPECT_GT(worst_over_sqrt_n, 1.0) << "equal terms never exceeded lambda sqrt(n) u M: the test shows nothing";
  std::printf("equal terms: worst error / (6 sqrt(n) u M) = %.2f\n", worst_over_sqrt_n);
}

// The chunked head's softmax denominator (losses.h, online_denominator):
// float32 as the host kernel forms it (each chunk's terms against the
// running max, summed, then added to the running sum rescaled by exp(m_old
// - m)), with the logits ascending so that the max moves at every chunk
// and every rescale happens, lies within the rule's bound, in the
// deterministic and the probabilistic form. (The rule may be smaller than
// one reduction's over the whole row: that one holds for any order, and
// the online form's order across the chunks is fixed.)
TEST(Bounded, OnlineDenominatorCoversEveryRescaling) {
  for (ReductionBound form : {ReductionBound::deterministic, ReductionBound::probabilistic}) {
  const ScopedRoundingModel scope(gradeq::rounding_model_for({DType::f32, DType::f32}, gradeq::ErrorModel{form, 6.0}));
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (int trial = 0; trial < 50; ++trial) {
    const long d = 97;
    std::vector<double> z(static_cast<std::size_t>(d));
    for (double& v : z) v = static_cast<float>(normal(rng));
    if (trial % 2 == 0) std::sort(z.begin(), z.end());  // ascending: a new max in every chunk
    Matrix<Bounded> logits(1, d);
    for (long j = 0; j < d; ++j) logits(0, j) = Bounded(z[static_cast<std::size_t>(j)]);
    const double row_max = *std::max_element(z.begin(), z.end());
    const Bounded whole = reduce<Bounded>(d, [&](long j) { return exp(logits(0, j) - Bounded(row_max)); });
    for (long chunk : {1L, 5L, 32L, 96L}) {
      const Bounded online = online_denominator(logits, 0, chunk);
      float m = -INFINITY, s = 0.0f;
      for (long c0 = 0; c0 < d; c0 += chunk) {
        const long nc = std::min(chunk, d - c0);
        float next = m, part = 0.0f;
        for (long j = c0; j < c0 + nc; ++j) next = std::max(next, static_cast<float>(z[static_cast<std::size_t>(j)]));
        for (long j = c0; j < c0 + nc; ++j) part += std::exp(static_cast<float>(z[static_cast<std::size_t>(j)]) - next);
        s = c0 == 0 ? part : s * std::exp(m - next) + part;
        m = next;
      }
      EXPECT_NEAR(online.value, whole.value, 1e-12 * whole.value) << chunk;
      EXPECT_LE(std::abs(static_cast<double>(s) - online.value), online.kernel_bound) << chunk;
    }
  }
  }
}

TEST(Bounded, ExactArithmeticHasNoError) {
  const Bounded a(3.0), b(0.25), c(-7.0);
  const Bounded r = (a * b + c) / Bounded(2.0);
  EXPECT_EQ(r.kernel_bound, 0.0);
  EXPECT_EQ(r.reference, 0.0);
  const Bounded s = reduce<Bounded>(100, [&](long i) { return Bounded(static_cast<double>(i)) * b; });
  EXPECT_EQ(s.value, 0.25 * 4950);
  EXPECT_EQ(s.kernel_bound, 0.0);
  // 2^24 + 1 is not a float32: the sum is not exact and gets a bound.
  const Bounded big = reduce<Bounded>(2, [&](long i) { return Bounded(i == 0 ? 16777216.0 : 1.0); });
  EXPECT_GT(big.kernel_bound, 0.0);
}

TEST(Bounded, InexactConstantsCarryTheirFloat32Rounding) {
  const Bounded tenth(0.1);
  EXPECT_EQ(tenth.kernel_bound, std::abs(static_cast<double>(0.1f) - 0.1));
  EXPECT_EQ(Bounded(0.5).kernel_bound, 0.0);
}

TEST(Bounded, StepIsUncertainOnlyWithinItsError) {
  EXPECT_EQ(positive_step(Bounded(0.0)).kernel_bound, 0.0);  // exact zero: branch is certain
  EXPECT_EQ(positive_step(Bounded::with_bounds(1e-9, 1e-8, 0.0)).kernel_bound, 1.0);
  EXPECT_EQ(positive_step(Bounded::with_bounds(1e-7, 1e-8, 0.0)).kernel_bound, 0.0);
}

TEST(Bounded, DivisionByAnUncertainZeroIsUnbounded) {
  const Bounded r = Bounded(1.0) / Bounded::with_bounds(1e-9, 1e-8, 0.0);
  EXPECT_TRUE(std::isinf(r.kernel_bound));
}

TEST(Bounded, StorageRoundingFollowsTheModel) {
  RoundingModel m;
  m.compute = {0x1p-8, 0x1p-134, 8, -126};
  const ScopedRoundingModel scope(m);
  EXPECT_EQ(store(Bounded(1.5), Storage::compute).kernel_bound, 0.0);  // bf16 holds 1.5 exactly
  const Bounded third = store(Bounded(1.0) / Bounded(3.0), Storage::compute);
  EXPECT_GT(third.kernel_bound, 0x1p-8 / 3.0);
  EXPECT_LE(std::abs(static_cast<double>(static_cast<float>(1.0 / 3.0)) - 1.0 / 3.0), third.kernel_bound);
}

// element::kahan_add of float32 terms into a bfloat16 / float16 buffer
// stays within the compensated-sum bound, on random terms of mixed sign and
// spread with an occasional dominant one. The same terms exceed the
// textbook (2u + 4nu^2) sum|t| (which assumes terms in the buffer's
// format): the check can tell the two models apart.
TEST(Bounded, KahanIntoNarrowBuffersStaysWithinItsBound) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (DType d : {DType::bf16, DType::f16}) {
    const ScopedRoundingModel scope(
        gradeq::rounding_model_for({DType::f32, d}, gradeq::ErrorModel{ReductionBound::deterministic, 6.0}));
    const double u = rounding_model().accumulate.unit_roundoff;
    double worst_over_textbook = 0.0;
    for (long n : {2L, 3L, 4L, 8L, 64L}) {
      for (int trial = 0; trial < 40000 / static_cast<int>(n); ++trial) {
        std::vector<float> t(static_cast<std::size_t>(n));
        const int spread = 1 + trial % 5;
        for (long i = 0; i < n; ++i) {
          double m = std::ldexp(1.0 + 0.5 * uniform(rng), static_cast<int>(std::lround(spread * uniform(rng))));
          if (trial % 4 == 3 && i == n / 2) m *= 16.0;  // one dominant term
          const double sign = trial % 4 == 0 ? 1.0 : trial % 4 == 1 ? (uniform(rng) < 0 ? -1.0 : 1.0) : (i % 2 ? -1.0 : 1.0);
          t[static_cast<std::size_t>(i)] = static_cast<float>(sign * m);
        }
        float sum = 0.0f, comp = 0.0f;
        double exact = 0.0, magnitude = 0.0;
        for (float v : t) {
          element::kahan_add(sum, comp, v, d);
          exact += v;
          magnitude += std::abs(v);
        }
        const Bounded b = compensated<Bounded>(n, [&](long i) { return Bounded(t[static_cast<std::size_t>(i)]); },
                                               Storage::accumulate);
        ASSERT_NEAR(b.value, exact, 1e-12 * magnitude);
        const double error = std::abs(sum - exact);
        ASSERT_LE(error, b.kernel_bound) << dtype_name(d) << " n = " << n << " trial " << trial;
        const double nd = static_cast<double>(n);
        worst_over_textbook = std::max(worst_over_textbook, error / ((2.0 * u + 4.0 * nd * u * u) * magnitude));
      }
    }
    EXPECT_GT(worst_over_textbook, 1.0) << dtype_name(d);
  }
}

}  // namespace
}  // namespace gradeq::ref

namespace gradeq::ref {
namespace {

// A row normalized in float32 (two-pass mean and variance, as the kernels
// do) and summed with weights, like a linear layer after LayerNorm: the
// float32 result stays within the bound, and the bound follows the shared
// 1/sigma and mean with their signs: it is far below what adding their
// errors in magnitude gives.
TEST(Bounded, SharedStatisticsCancelInTheNextLinearLayer) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  const long n = 64;
  const NormShape shape{NormKind::layer, 1, 1, static_cast<double>(1e-5f)};
  double shared_total = 0.0, magnitude_total = 0.0;
  for (int trial = 0; trial < 200; ++trial) {
    Matrix<double> x(1, n), w(1, n);
    for (long k = 0; k < n; ++k) {
      x(0, k) = static_cast<float>(normal(rng) * 3.0 + 1.0);
      w(0, k) = static_cast<float>(normal(rng) / 8.0);
    }
    // The kernel, in float32.
    float mean = 0.0f, sq = 0.0f;
    for (long k = 0; k < n; ++k) mean += static_cast<float>(x(0, k));
    mean /= static_cast<float>(n);
    for (long k = 0; k < n; ++k) sq += (static_cast<float>(x(0, k)) - mean) * (static_cast<float>(x(0, k)) - mean);
    const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(n) + 1e-5f);
    float y = 0.0f;
    for (long k = 0; k < n; ++k) y += static_cast<float>(w(0, k)) * ((static_cast<float>(x(0, k)) - mean) * rstd);
    // The reference, and the same with the statistics' errors in magnitude.
    const Matrix<Bounded> xb = lift<Bounded>(x);
    const NormStatistics<Bounded> st = norm_statistics(shape, xb);
    NormStatistics<Bounded> magnitude = st;
    for (Bounded* v : {&magnitude.mean[0], &magnitude.rstd[0]}) *v = Bounded::with_bounds(v->value, v->kernel_bound, v->reference);
    auto linear = [&](const NormStatistics<Bounded>& s) {
      return reduce<Bounded>(n, [&](long k) { return Bounded(w(0, k)) * normalized(shape, n, xb(0, k), s, 0); });
    };
    const Bounded with_shared = linear(st), with_magnitudes = linear(magnitude);
    ASSERT_LE(std::abs(static_cast<double>(y) - with_shared.value), with_shared.kernel_bound) << "trial " << trial;
    shared_total += with_shared.kernel_bound;
    magnitude_total += with_magnitudes.kernel_bound;
  }
  EXPECT_LT(shared_total, 0.5 * magnitude_total);
}

// A sum's shared terms (SumOfTerms, behind reduce): a source met in one
// term only is folded into it; sources met in several keep one signed
// coefficient; once more than 16 distinct sources are met, every shared
// term of every term, those already added included, is folded. The terms
// are exact dyadic values with systematic errors only, so the sum's
// systematic part is exactly the folded magnitudes' sum.
TEST(Bounded, SumsFoldSingleSourcesAndAllSourcesBeyondSixteen) {
  const auto term = [](double v, double systematic, std::initializer_list<SharedTerm> shared) {
    SharedTerms s;
    for (const SharedTerm& t : shared) s.term[s.count++] = t;
    return Bounded::with_shared(v, {systematic, 0.0, 0.0}, s, 0.0);
  };
  // Few sources: 7 in terms 0..3 (merged: 0.5 + 0.25 - 1 + 2 = 1.75), 9 in
  // term 2 only (folded: 3 x 2^-20).
  SumOfTerms few;
  few.add(term(1.0, 0x1p-24, {{7, 0.5, 0x1p-22}}));
  few.add(term(2.0, 0x1p-24, {{7, 0.25, 0x1p-22}}));
  few.add(term(0.5, 0x1p-24, {{7, -1.0, 0x1p-22}, {9, 3.0, 0x1p-20}}));
  few.add(term(0.25, 0x1p-24, {{7, 2.0, 0x1p-22}}));
  const Bounded f = std::move(few).result();
  ASSERT_EQ(f.shared.count, 1);
  EXPECT_EQ(f.shared.term[0].source, 7u);
  EXPECT_EQ(f.shared.term[0].coefficient, 1.75);
  EXPECT_EQ(f.kernel_parts.systematic, 4 * 0x1p-24 + 3.0 * 0x1p-20);
  // Many: 17 terms, each with its own source and one they share; the
  // 17th source folds every shared term, the first 16 terms' included.
  SumOfTerms many;
  double folded = 0.0;
  for (int k = 0; k < 17; ++k) {
    const double c = 1.0 + k, common = -0.5;
    many.add(term(1.0, 0x1p-24, {{100u + static_cast<std::uint64_t>(k), c, 0x1p-22}, {99, common, 0x1p-21}}));
    folded += 0x1p-24 + c * 0x1p-22 + 0.5 * 0x1p-21;
  }
  EXPECT_EQ(many.terms(), 17);
  const Bounded m = std::move(many).result();
  EXPECT_EQ(m.shared.count, 0);
  EXPECT_EQ(m.kernel_parts.systematic, folded);
  EXPECT_EQ(m.value, 17.0);
}

// Quantities bounded a priori keep a finite bound however ill-conditioned
// their inputs: a normalized value within sqrt(n), 1/sigma within
// 1/sqrt(eps), a softmax probability within [0, 1].
TEST(Bounded, APrioriIntervalsKeepIllConditionedGroupsBounded) {
  const ScopedRoundingModel scope(rounding_model_for({DType::bf16, DType::f32}, ErrorModel{}));
  const long n = 8;
  const NormShape shape{NormKind::layer, 1, 1, 1e-5};
  Matrix<Bounded> x(1, n);
  // A constant row known only to bfloat16 precision: its variance lies
  // within its own error.
  for (long k = 0; k < n; ++k) x(0, k) = Bounded::with_bounds(1.0 + 1e-6 * static_cast<double>(k), 4e-3, 0.0);
  const NormStatistics<Bounded> st = norm_statistics(shape, x);
  ASSERT_TRUE(std::isfinite(st.rstd[0].kernel_bound));
  EXPECT_LE(st.rstd[0].kernel_bound, a_priori_margin(n) / std::sqrt(1e-5));
  for (long k = 0; k < n; ++k) {
    const Bounded h = normalized(shape, n, x(0, k), st, 0);
    ASSERT_TRUE(std::isfinite(h.kernel_bound));
    EXPECT_LE(h.kernel_bound, std::sqrt(static_cast<double>(n)) * a_priori_margin(n) + std::abs(h.value));
  }
  Matrix<Bounded> logits(1, 3);
  for (long j = 0; j < 3; ++j) logits(0, j) = Bounded::with_bounds(static_cast<double>(j), 50.0, 0.0);
  const auto ce = cross_entropy_loss(logits, {1}, Bounded(1.0));
  // p's reach (at most p_max) plus two float32 roundings after it (p - 1,
  // then the scale), each at most u (|dy| + bound) <= 2u.
  const double p_max = a_priori_margin(3), u = rounding_model().arithmetic_u;
  for (long j = 0; j < 3; ++j) EXPECT_LE(ce.dy(0, j).kernel_bound, p_max + 4.0 * u * (1.0 + p_max)) << j;
}

// The second-order terms e_a e_b in parts (NUMERICS §3). Deterministic
// form: the parts add up to the product of the hard bounds. Probabilistic
// form, a dot product of n errors with themselves (values 0, so e^2 is all
// there is): the bound covers a realized sum of squared uniform roundings,
// n h^2 / 3 on average, which the spread alone (lambda^2 sqrt(n) h^2) would
// not; and where the hard bound is far above the scale (many roundings) it
// is far below the old n (S + R)^2.
TEST(Bounded, SecondOrderTermsCoverTheirMeanAndStaySharp) {
  const ErrorParts a{3e-4, 2e-3, 5e-4}, b{1e-4, 7e-3, 1e-3};
  {
    ScopedRoundingModel deterministic(RoundingModel{});
    const ErrorParts e = detail::second_order(a, b);
    EXPECT_DOUBLE_EQ(e.systematic + e.random, (a.systematic + a.random) * (b.systematic + b.random));
  }
  RoundingModel probabilistic;
  probabilistic.reduction = ReductionBound::probabilistic;
  const ScopedRoundingModel scope(probabilistic);
  const long n = 100000;
  const double h = 0x1p-9;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> rounding(-h, h);
  double realized = 0.0;
  for (long k = 0; k < n; ++k) {
    const double r = rounding(rng);
    realized += r * r;
  }
  const std::vector<Bounded> once(static_cast<std::size_t>(n), Bounded::with_parts(0.0, {0.0, h, h}, 0.0));
  const auto at = [&](const std::vector<Bounded>& x) { return [&x](long k) -> const Bounded& { return x[static_cast<std::size_t>(k)]; }; };
  const Bounded squares = dot<Bounded>(n, at(once), at(once));
  EXPECT_LE(realized, squares.kernel_bound);
  EXPECT_GT(realized, 0.3 * static_cast<double>(n) * h * h);
  const double hard = 100.0 * h;  // an error of many roundings: hard bound 100 times its scale
  const std::vector<Bounded> many(static_cast<std::size_t>(n), Bounded::with_parts(0.0, {0.0, hard, h}, 0.0));
  const Bounded sharp = dot<Bounded>(n, at(many), at(many));
  EXPECT_LT(sharp.kernel_bound, 1e-3 * static_cast<double>(n) * hard * hard);
  EXPECT_GE(sharp.kernel_bound, static_cast<double>(n) * h * h);
}

// An a priori interval holds the exact value and a kernel's finite one, not
// Inf or NaN. Where the rules give no bound the kernel may hold either: the
// float32 GELU slope at x = 2^66 is 0 * Inf (3 c x^2 overflows), NaN, though the
// exact slope is 1. The reference must then stay unbounded, and a quotient
// by a floored denominator without a bound too (the denominator may be NaN).
TEST(Bounded, NoIntervalHoldsAValueThatMayBeNonFinite) {
  const double x = 0x1p66;
  EXPECT_TRUE(std::isnan(element::gelu_tanh_grad(static_cast<float>(x), 1.0f)));
  Matrix<Bounded> xs(1, 1), dy(1, 1);
  xs(0, 0) = Bounded(x);
  dy(0, 0) = Bounded(1.0);
  const Matrix<Bounded> dx = gelu_backward(xs, dy);
  EXPECT_EQ(dx(0, 0).value, 1.0);
  EXPECT_FALSE(std::isfinite(dx(0, 0).kernel_bound));
  const Bounded unbounded = Bounded::with_bounds(0.5, kInf, 0.0);
  EXPECT_FALSE(std::isfinite(within_interval(unbounded, 0.0, 1.0).kernel_bound));
  EXPECT_FALSE(std::isfinite(within_radius(unbounded, 1.0).kernel_bound));
  EXPECT_FALSE(std::isfinite(divide_by_positive(Bounded(1.0), Bounded::with_bounds(2.0, kInf, 0.0), 1.0).kernel_bound));
  // A bounded denominator above its floor: never unbounded, however loose.
  EXPECT_TRUE(std::isfinite(divide_by_positive(Bounded(1.0), Bounded::with_bounds(2.0, 1e30, 0.0), 1.0).kernel_bound));
  EXPECT_LE(within_interval(Bounded::with_bounds(0.5, 1e30, 0.0), 0.0, 1.0).kernel_bound, 0.5);
  // A dot product whose products overflow float32 though their sum is 0:
  // the kernel holds Inf - Inf.
  const std::vector<Bounded> a = {Bounded(0x1p100), Bounded(-0x1p100)}, b = {Bounded(0x1p30), Bounded(0x1p30)};
  const float kernel = static_cast<float>(0x1p100) * static_cast<float>(0x1p30) - static_cast<float>(0x1p100) * static_cast<float>(0x1p30);
  EXPECT_TRUE(std::isnan(kernel));
  const Bounded cancelled = dot<Bounded>(2, [&](long k) -> const Bounded& { return a[static_cast<std::size_t>(k)]; },
                                         [&](long k) -> const Bounded& { return b[static_cast<std::size_t>(k)]; });
  EXPECT_EQ(cancelled.value, 0.0);
  EXPECT_FALSE(std::isfinite(cancelled.kernel_bound));
}

// GELU's derivative, as the kernels compute it, lies within the interval
// the reference assumes for it, and the interval is no wider than it needs
// to be: the sweep over [-20, 20] comes within 1e-3 of both ends.
void expect_slope_within(float (*slope)(float, float), double reach) {
  float lowest = 1.0f, highest = 0.0f;
  for (int i = -200000; i <= 200000; ++i) {
    const float g = slope(static_cast<float>(i) * 1e-4f, 1.0f);
    lowest = std::min(lowest, g);
    highest = std::max(highest, g);
  }
  EXPECT_GE(lowest, -reach);
  EXPECT_LE(highest, 1.0 + reach);
  EXPECT_LT(lowest, -reach + 1e-3);
  EXPECT_GT(highest, 1.0 + reach - 1e-3);
}

TEST(Bounded, GeluSlopeLiesWithinItsInterval) { expect_slope_within(element::gelu_tanh_grad, kGeluSlopeReach); }

// The erf form's slope reaches -0.1289041 at x = -sqrt 2; far out it stays
// finite (no 0 * Inf as in the tanh form's x^3).
TEST(Bounded, GeluErfSlopeLiesWithinItsInterval) {
  expect_slope_within(element::gelu_erf_grad, kGeluErfSlopeReach);
  EXPECT_EQ(element::gelu_erf_grad(1e30f, 1.0f), 1.0f);
  EXPECT_EQ(element::gelu_erf_grad(-1e30f, 1.0f), 0.0f);
}

// erf's rule holds where the kernel's erff is evaluated on a perturbed
// operand: |erff(x') - erf(x)| within the propagated bound, over a sweep.
TEST(Bounded, ErfBoundsTheKernelsErf) {
  for (int i = -4000; i <= 4000; ++i) {
    const double x = i * 1e-3;
    const Bounded b = Bounded::with_bounds(x, 1e-6, 0.0);
    const Bounded y = erf(b);
    for (const double e : {-1e-6, 0.0, 1e-6}) {
      const double kernel = erff(static_cast<float>(x + e));
      EXPECT_LE(std::abs(kernel - y.value), y.kernel_bound) << "x = " << x << ", e = " << e;
    }
  }
}

}  // namespace
}  // namespace gradeq::ref

namespace gradeq::ref {
namespace {

// A sum whose terms hold NaN (a run that diverged) ends, and has no finite
// bound.
TEST(Bounded, SumsWithNaNTermsEndUnbounded) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> values = {1.0, nan, 2.0, nan, 1.0};
  const Bounded s = reduce<Bounded>(5, [&](long i) { return Bounded::with_bounds(values[static_cast<std::size_t>(i)], 1e-3, 0.0); });
  EXPECT_FALSE(std::isfinite(s.kernel_bound) && std::isfinite(s.value));
  // Infinities of both signs, with NaN, in every grouping the sum makes of
  // equal values: it ends too, unbounded.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> mixed = {inf, 1.0, -inf, nan, inf, nan, -inf, 1.0};
  for (int shift = 0; shift < 8; ++shift) {
    const Bounded m = reduce<Bounded>(8, [&](long i) {
      return Bounded::with_bounds(mixed[static_cast<std::size_t>((i + shift) % 8)], 1e-3, 0.0);
    });
    EXPECT_FALSE(std::isfinite(m.kernel_bound) && std::isfinite(m.value));
  }
}

}  // namespace
}  // namespace gradeq::ref
