// matmul.cpp — the dot-product rule of reference/dot.h for whole matrices:
// the GEMMs by row panels, the rule's sums over a product's slices
// (ProductSums) and its decisions per element. The operands' shared
// sources are gathered and summed in reference/matmul_sources.cpp.
// GCC 12 reports _mm512_undefined_pd() in Eigen's AVX-512 packing as
// maybe-uninitialized (a false positive: GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include "reference/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "reference/dot.h"
#include "reference/matmul_operands.h"

namespace gradeq::ref {
namespace matrix_form {
namespace {

bool all_zero(const Dense& x) { return (x.array() == 0.0).all(); }

}  // namespace

void gemm_panels(Dense& acc, const Dense& x, const Dense& y) {
  for_panels(x.rows(), static_cast<double>(x.rows()) * static_cast<double>(x.cols()) * static_cast<double>(y.cols()),
             [&](long r0, long r1) { acc.middleRows(r0, r1 - r0).noalias() += x.middleRows(r0, r1 - r0) * y; });
}

void add_product(Dense& acc, const Dense& x, const Dense& y) {
  if (all_zero(x) || all_zero(y)) return;
  gemm_panels(acc, x, y);
}

Dense product(const Dense& x, const Dense& y) {
  Dense out = Dense::Zero(x.rows(), y.cols());
  add_product(out, x, y);
  return out;
}

namespace {

thread_local bool bounds_in_float32_always = false;

constexpr double kFloat32Unit = 0x1p-24;  // u: float32's unit roundoff
// The span of a row's or column's nonzero elements that the float32 path
// takes: 2 (kFloat32Span + 1) < 126, so no nonzero product is subnormal.
constexpr int kFloat32Span = 60;

bool bounds_in_float32(long m, long k, long p) {
  if (k > kFloat32BoundTerms) return false;
  return bounds_in_float32_always ||
         static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(p) >= kFloat32BoundWork;
}

// 1 / (1 - gamma_{k+2}), gamma_j = j u / (1 - j u), times 1 + 2^-50 for the
// float64 operations that apply it: the float32 sum of k non-negative
// products, each operand and product rounded once, is at least
// (1 - gamma_{k+2}) times the exact sum, less the underflow allowance.
double float32_sum_margin(long k) {
  const double ju = static_cast<double>(k + 2) * kFloat32Unit;
  return (1.0 - ju) / (1.0 - 2.0 * ju) * (1.0 + 0x1p-50);
}

using Float32 = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The exponent e that brings a largest element m into [1/2, 1) times 2^-e.
int exponent_of(double m) {
  int e = 0;
  std::frexp(m, &e);
  return e;
}

// Largest elements within these powers of two are scaled into float32's
// range: the scales, and a product's scale back, are float64 values.
constexpr double kScaledMin = 0x1p-500, kScaledMax = 0x1p500;
bool scalable(const Eigen::VectorXd& largest) {
  for (double m : largest)
    if (m != 0.0 && !(m >= kScaledMin && m <= kScaledMax)) return false;
  return true;
}

}  // namespace

// The float32 sum may itself be up to 1/(1 - (k+2)u) above the exact sum;
// with the margin, 1/(1 - 2(k+2)u), and a float64 rounding applying it.
double bound_sum_inflation(long k) {
  if (k > kFloat32BoundTerms) return 1.0;
  const double ju = static_cast<double>(k + 2) * kFloat32Unit;
  return float32_sum_margin(k) / (1.0 - ju) * (1.0 + 0x1p-50);
}

void add_bound_product(Dense& acc, const Dense& x, const Dense& y) {
  const long m = x.rows(), k = x.cols(), p = y.cols();
  if (!bounds_in_float32(m, k, p)) return add_product(acc, x, y);
  if (all_zero(x) || all_zero(y)) return;
  // Each row of x and each column of y scaled by a power of two to a
  // largest element in [1/2, 1): products are at most 1, sums at most k,
  // and scaling back is exact.
  const Eigen::VectorXd row_max = x.rowwise().maxCoeff(), column_max = y.colwise().maxCoeff().transpose();
  if (!scalable(row_max) || !scalable(column_max)) return add_product(acc, x, y);
  // A row or column whose nonzero elements span more than 2^kFloat32Span
  // is summed in float64; in the others every nonzero element, once
  // scaled, is at least 2^-(kFloat32Span + 1), every nonzero product at
  // least 2^-(2 kFloat32Span + 2): float32 normal numbers, so nothing
  // underflows, and a sum is 0 exactly where every product is.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const Eigen::VectorXd row_min = (x.array() > 0.0).select(x.array(), kInf).rowwise().minCoeff(),
                        column_min = (y.array() > 0.0).select(y.array(), kInf).colwise().minCoeff().transpose();
  const auto narrow = [](double largest, double smallest) {
    return largest == 0.0 || largest <= std::ldexp(smallest, kFloat32Span);
  };
  std::vector<long> wide_rows, wide_columns;
  const auto to_scale = [](double largest) { return largest == 0.0 ? 0.0 : std::ldexp(1.0, -exponent_of(largest)); };
  Eigen::VectorXd row_scale(m), column_scale(p);
  for (long i = 0; i < m; ++i) {
    row_scale(i) = narrow(row_max(i), row_min(i)) ? to_scale(row_max(i)) : 0.0;
    if (row_scale(i) == 0.0 && row_max(i) != 0.0) wide_rows.push_back(i);
  }
  for (long j = 0; j < p; ++j) {
    column_scale(j) = narrow(column_max(j), column_min(j)) ? to_scale(column_max(j)) : 0.0;
    if (column_scale(j) == 0.0 && column_max(j) != 0.0) wide_columns.push_back(j);
  }
  const Float32 x32 = (row_scale.asDiagonal() * x).cast<float>(), y32 = (y * column_scale.asDiagonal()).cast<float>();
  // Every operand, product and partial sum of the float32 GEMM rounds
  // once, relatively: exact <= float32 sum * margin. Scaling back,
  // 2^(e_i + f_j), is exact (the scales are within 2^±500). The float64
  // sums take their own gamma.
  const double margin = float32_sum_margin(k), margin64 = 1.0 + static_cast<double>(2 * k + 4) * 0x1p-53;
  const Eigen::VectorXd row_back = margin * row_scale.unaryExpr([](double s) { return s == 0.0 ? 0.0 : 1.0 / s; }),
                        column_back = column_scale.unaryExpr([](double s) { return s == 0.0 ? 0.0 : 1.0 / s; });
  for_panels(m, static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(p), [&](long r0, long r1) {
    const long rows = r1 - r0;
    const Float32 sums = x32.middleRows(r0, rows) * y32;
    acc.middleRows(r0, rows) +=
        row_back.segment(r0, rows).asDiagonal() * sums.cast<double>() * column_back.asDiagonal();
  });
  for (long i : wide_rows) acc.row(i) += (x.row(i) * y) * margin64;
  if (!wide_columns.empty()) {
    const Dense narrow_rows = row_scale.unaryExpr([](double s) { return s == 0.0 ? 0.0 : 1.0; }).asDiagonal() * x;
    const Dense sums = product(narrow_rows, Dense(y(Eigen::all, wide_columns)));
    for (std::size_t c = 0; c < wide_columns.size(); ++c) acc.col(wide_columns[c]) += sums.col(static_cast<long>(c)) * margin64;
  }
}

Dense bound_product(const Dense& x, const Dense& y) {
  Dense out = Dense::Zero(x.rows(), y.cols());
  add_bound_product(out, x, y);
  return out;
}

}  // namespace matrix_form

ScopedBoundSumsInFloat32::ScopedBoundSumsInFloat32() : previous_(matrix_form::bounds_in_float32_always) {
  matrix_form::bounds_in_float32_always = true;
}
ScopedBoundSumsInFloat32::~ScopedBoundSumsInFloat32() { matrix_form::bounds_in_float32_always = previous_; }

using namespace matrix_form;

namespace {

thread_local bool by_rule = false;

// What one slice of the reduction leaves for the per-element decisions on
// shared sources, for the outputs that may still follow theirs: the rows of
// A and columns of B that have one (renumbered), their pairs, and the
// pairs' sums over the other operand's kept vectors.
struct SliceSources {
  Sources a, b;                                // the kept rows' and columns' pairs
  Dense merged_a, terms_a, merged_b, terms_b;  // [pairs_a, kept columns], [pairs_b, kept rows]
  std::vector<long> row_at, column_at;         // per row of A / column of B: its kept index, or -1
};

void merge_facts(std::vector<VectorFacts>& into, const std::vector<VectorFacts>& from) {
  for (std::size_t v = 0; v < into.size(); ++v) {
    VectorFacts& f = into[v];
    const VectorFacts& g = from[v];
    f.max_bits = std::max(f.max_bits, g.max_bits);
    f.min_exponent = std::min(f.min_exponent, g.min_exponent);
    f.exact = f.exact && g.exact;
    f.exact_reference = f.exact_reference && g.exact_reference;
    f.finite = f.finite && g.finite;
  }
}

}  // namespace

ScopedMatmulByRule::ScopedMatmulByRule() : previous_(by_rule) { by_rule = true; }
ScopedMatmulByRule::~ScopedMatmulByRule() { by_rule = previous_; }

Matrix<double> matmul(const Matrix<double>& a, const Matrix<double>& b) {
  Dense out = Dense::Zero(a.rows(), b.cols());
  gemm_panels(out, a, b);
  return out;
}

Matrix<Bounded> matmul_by_rule(const Matrix<Bounded>& a, const Matrix<Bounded>& b) {
  Matrix<Bounded> out(a.rows(), b.cols());
  for (long i = 0; i < a.rows(); ++i)
    for (long j = 0; j < b.cols(); ++j)
      out(i, j) = dot<Bounded>(
          a.cols(), [&](long k) -> const Bounded& { return a(i, k); },
          [&](long k) -> const Bounded& { return b(k, j); });
  return out;
}

struct ProductSums::State {
  long m = 0, n = 0, p = 0;
  // The rule's sums over the slices so far, one float64 GEMM per slice each.
  Dense value, abs_product, systematic, random, scale_a, scale_b, reference, magnitude;
  Dense single_folded, multi_folded, single_count;
  std::vector<VectorFacts> fa, fb;
  // 1 where an output has met more sources than the rule follows in some
  // slice (sources only add up over slices): it folds all of them, and no
  // later slice keeps its pairs' sums. Where every output does, no slice's
  // pairs are kept.
  Dense folds;
  std::vector<SliceSources> slices;
  // Under ScopedMatmulByRule, or where an operand has an unbounded part, the
  // scalar rule decides over the whole reduction: the slices themselves are
  // kept.
  std::vector<Matrix<Bounded>> kept_a, kept_b;

  void add_sums(Dense& into, Dense&& slice) {
    if (into.size() == 0) {
      into = std::move(slice);
    } else {
      into += slice;
    }
  }
  void add(const Matrix<Bounded>& a, const Matrix<Bounded>& b);
  Matrix<Bounded> decide() const;
};

void ProductSums::State::add(const Matrix<Bounded>& a, const Matrix<Bounded>& b) {
  if (a.cols() != b.rows() || (n > 0 && (a.rows() != m || b.cols() != p)))
    throw std::invalid_argument("a slice of a product has the wrong shape");
  const bool first = n == 0;
  m = a.rows();
  p = b.cols();
  n += a.cols();
  if (first && by_rule) {
    kept_a.push_back(a);
    kept_b.push_back(b);
    return;
  }
  if (!kept_a.empty()) {
    kept_a.push_back(a);
    kept_b.push_back(b);
    return;
  }
  const Parts pa(a, true), pb(b, false);
  if (!pa.finite || !pb.finite) {
    if (!first)
      throw std::runtime_error(
          "a slice of a row-sliced product holds an unbounded error part (an overflow): the rule would need every "
          "slice at once");
    kept_a.push_back(a);
    kept_b.push_back(b);
    return;
  }
  // The values and the sums of the rule, one GEMM each.
  add_sums(value, matmul(pa.value, pb.value));
  // sum |a| |b| decides exactness (in float64, and in float32 through M)
  // where a row and a column are both exact: it is then summed in float64
  // as the scalar rule sums it; elsewhere it scales the reference's own
  // rounding, a bound sum. Exactness only ends over later slices, so a
  // slice with no such pair leaves none in the whole product.
  const auto exact_somewhere = [](const std::vector<VectorFacts>& facts) {
    return std::any_of(facts.begin(), facts.end(), [](const VectorFacts& f) { return f.exact || f.exact_reference; });
  };
  if (exact_somewhere(pa.facts) && exact_somewhere(pb.facts)) {
    add_sums(abs_product, product(pa.abs, pb.abs));
  } else {
    add_sums(abs_product, bound_product(pa.abs, pb.abs));
  }
  // First order and the second-order terms e_a e_b in parts
  // (detail::second_order), grouped by operand as ref::dot groups them.
  const RoundingModel& model = rounding_model();
  Dense sys = bound_product(pa.systematic, pb.abs);
  add_bound_product(sys, pa.abs, pb.systematic);
  add_bound_product(sys, pa.systematic_total, pb.systematic_total);
  if (model.reduction == ReductionBound::probabilistic) add_bound_product(sys, pa.scale, pb.scale);
  add_sums(systematic, std::move(sys));
  Dense rnd = bound_product(pa.random, Dense(pb.abs + pb.hard));
  add_bound_product(rnd, Dense(pa.abs + pa.systematic_total), pb.random);
  add_sums(random, std::move(rnd));
  add_sums(scale_a, bound_product(Dense(pa.scale.array().square()),
                                  Dense((pb.abs + pb.systematic_total + model.confidence * pb.scale).array().square())));
  add_sums(scale_b,
           bound_product(Dense((pa.abs + pa.systematic_total).array().square()), Dense(pb.scale.array().square())));
  Dense ref = bound_product(pa.reference, pb.abs);
  add_bound_product(ref, pa.abs, pb.reference);
  add_bound_product(ref, pa.reference, pb.reference);
  add_sums(reference, std::move(ref));

  // Shared sources: singletons folded by GEMMs; each pair's merged
  // coefficient and its number of terms, by GEMMs over coefficient rows
  // (or, where the other operand has no zero, the pair's own count).
  const std::vector<std::uint64_t> common = common_sources(pa, pb);
  Sources sa = gather_sources(pa, true, common), sb = gather_sources(pb, false, common);
  Dense folded = bound_product(sa.single_folded, pb.abs);
  add_bound_product(folded, pa.abs, sb.single_folded);
  add_sums(single_folded, std::move(folded));
  Dense multi = bound_product(sa.multi_folded, pb.abs);
  add_bound_product(multi, pa.abs, sb.multi_folded);
  add_sums(multi_folded, std::move(multi));
  Dense count = product(sa.single_count, pb.nonzero);
  add_product(count, pa.nonzero, sb.single_count);
  // Where an output sees more than kDotSources distinct sources, the rule
  // folds them all (single_folded + multi_folded), and the per-pair sums
  // below are not needed for it: a weight gradient after a normalizer (two
  // sources per row of the reduction) would otherwise hold [pairs x
  // outputs] sums, rows x in x out. They are kept for the rows and columns
  // of the outputs that may still follow sources (all of them in a short
  // reduction; a nearly dead unit's in a long one).
  if (!sa.term.empty() || !sb.term.empty()) {
    const Dense slice_folds = outputs_that_fold(sa, sb, pa.nonzero, pb.nonzero, count);
    folds = folds.size() == 0 ? slice_folds : Dense(folds.cwiseMax(slice_folds));
  } else if (folds.size() == 0) {
    folds = Dense::Zero(m, p);
  }
  add_sums(single_count, std::move(count));
  if ((folds.array() != 0.0).all()) {
    slices.clear();
  } else {
    const auto open = (folds.array() == 0.0);
    SliceSources sl;
    std::vector<long> rows, columns;
    sl.row_at.assign(static_cast<std::size_t>(m), -1);
    sl.column_at.assign(static_cast<std::size_t>(p), -1);
    for (long i = 0; i < m; ++i)
      if (open.row(i).any()) {
        sl.row_at[static_cast<std::size_t>(i)] = static_cast<long>(rows.size());
        rows.push_back(i);
      }
    for (long j = 0; j < p; ++j)
      if (open.col(j).any()) {
        sl.column_at[static_cast<std::size_t>(j)] = static_cast<long>(columns.size());
        columns.push_back(j);
      }
    if (static_cast<long>(rows.size()) == m && static_cast<long>(columns.size()) == p) {  // every output
      sl.a = std::move(sa);
      sl.b = std::move(sb);
      std::tie(sl.merged_a, sl.terms_a) = pair_sums(sl.a, pb.value, pb.nonzero);
      std::tie(sl.merged_b, sl.terms_b) = pair_sums(sl.b, pa.value.transpose(), pa.nonzero.transpose());
    } else {
      sl.a = select_vectors(sa, rows);
      sl.b = select_vectors(sb, columns);
      std::tie(sl.merged_a, sl.terms_a) =
          pair_sums(sl.a, pb.value(Eigen::all, columns), pb.nonzero(Eigen::all, columns));
      std::tie(sl.merged_b, sl.terms_b) =
          pair_sums(sl.b, pa.value(rows, Eigen::all).transpose(), pa.nonzero(rows, Eigen::all).transpose());
    }
    slices.push_back(std::move(sl));  // [pairs_a, kept columns], [pairs_b, kept rows]
  }
  // M = sum (|a| + H_a)(|b| + H_b), with H = systematic + random + shared
  // magnitude.
  add_sums(magnitude, bound_product(Dense(pa.abs + pa.hard), Dense(pb.abs + pb.hard)));
  if (first) {
    fa = pa.facts;
    fb = pb.facts;
  } else {
    merge_facts(fa, pa.facts);
    merge_facts(fb, pb.facts);
  }
}

Matrix<Bounded> ProductSums::State::decide() const {
  if (!kept_a.empty()) {
    Matrix<Bounded> a(m, n), b(n, p);
    long k = 0;
    for (std::size_t s = 0; s < kept_a.size(); ++s) {
      a.middleCols(k, kept_a[s].cols()) = kept_a[s];
      b.middleRows(k, kept_b[s].rows()) = kept_b[s];
      k += kept_a[s].cols();
    }
    return matmul_by_rule(a, b);
  }
  Matrix<Bounded> out(m, p);
  for_panels(m, static_cast<double>(m) * static_cast<double>(p) * 64.0, [&](long i0, long i1) {
    struct Candidate {
      SharedTerm term;
      double coefficient, entries;
    };
    std::vector<Candidate> candidates;
    std::vector<SharedTerm> kept;
    // Each source's merged coefficient and entries in the dot product
    // (i, j) over one slice; a source both operands carry has a pair on
    // each side.
    const auto slice_candidates = [&](const SliceSources& sl, long row, long column) {
      const Sources &sa = sl.a, &sb = sl.b;
      const long i = sl.row_at[static_cast<std::size_t>(row)], j = sl.column_at[static_cast<std::size_t>(column)];
      const std::pair<long, long> pairs_a = sa.pairs_of(i), pairs_b = sb.pairs_of(j);
      const auto other_side = [&](const Sources& other, std::pair<long, long> pairs, std::uint64_t source) {
        for (long q = pairs.first; q < pairs.second; ++q)
          if (other.term[q].source == source) return q;
        return -1L;
      };
      for (long q = pairs_a.first; q < pairs_a.second; ++q) {
        Candidate c{sa.term[q], sl.merged_a(q, j), sl.terms_a(q, j)};
        if (sa.common[q]) {
          const long qb = other_side(sb, pairs_b, c.term.source);
          if (qb >= 0) {
            c.coefficient += sl.merged_b(qb, i);
            c.entries += sl.terms_b(qb, i);
          }
        }
        candidates.push_back(c);
      }
      for (long q = pairs_b.first; q < pairs_b.second; ++q)
        if (!sb.common[q] || other_side(sa, pairs_a, sb.term[q].source) < 0)
          candidates.push_back({sb.term[q], sl.merged_b(q, i), sl.terms_b(q, i)});
    };
    for (long i = i0; i < i1; ++i)
      for (long j = 0; j < p; ++j) {
        detail::DotSums s;
        s.value = value(i, j);
        s.systematic = systematic(i, j);
        s.random = random(i, j);
        s.scale_a = scale_a(i, j);
        s.scale_b = scale_b(i, j);
        s.abs_product = abs_product(i, j);
        s.reference = reference(i, j);
        if (folds(i, j) != 0.0) {
          s.shared_systematic = single_folded(i, j) + multi_folded(i, j);
        } else {
          candidates.clear();
          for (const SliceSources& sl : slices) {
            const std::size_t before = candidates.size();
            slice_candidates(sl, i, j);
            // A source met in an earlier slice too: one candidate, its
            // coefficients and entries added.
            if (before == 0) continue;
            for (std::size_t c = candidates.size(); c-- > before;) {
              const auto same = std::find_if(candidates.begin(), candidates.begin() + static_cast<long>(before),
                                             [&](const Candidate& e) { return e.term.source == candidates[c].term.source; });
              if (same == candidates.begin() + static_cast<long>(before)) continue;
              same->coefficient += candidates[c].coefficient;
              same->entries += candidates[c].entries;
              candidates.erase(candidates.begin() + static_cast<long>(c));
            }
          }
          // Distinct sources, as ref::dot counts them.
          double sources = single_count(i, j);
          for (const Candidate& c : candidates) sources += c.entries > 0.0;
          if (sources > static_cast<double>(detail::kDotSources)) {
            s.shared_systematic = single_folded(i, j) + multi_folded(i, j);
          } else {
            s.shared_systematic = single_folded(i, j);
            kept.clear();
            for (const Candidate& c : candidates) {
              if (c.entries == 1.0) {
                s.shared_systematic += std::abs(c.coefficient) * c.term.bound;
              } else if (c.entries > 1.0 && c.coefficient != 0.0) {
                kept.push_back({c.term.source, c.coefficient, c.term.bound});
              }
            }
            detail::DotSources::keep_largest(kept, s);
          }
        }
        detail::DotExactness x;
        const VectorFacts &ra = fa[static_cast<std::size_t>(i)], &cb = fb[static_cast<std::size_t>(j)];
        x.max_bits_a = ra.max_bits;
        x.max_bits_b = cb.max_bits;
        x.min_exponent_a = ra.min_exponent;
        x.min_exponent_b = cb.min_exponent;
        x.exact_operands = ra.exact && cb.exact;
        x.exact_references = ra.exact_reference && cb.exact_reference;
        x.finite = ra.finite && cb.finite;
        // M decides exactness only where every operand is exact: it is then
        // sum |a| |b|, whose float64 sum the exactness test reads, as the
        // scalar rule's. Elsewhere it scales roundings, as a bound sum.
        s.magnitude = x.exact_operands ? abs_product(i, j) : magnitude(i, j);
        out(i, j) = detail::dot_result(n, s, x);
      }
  });
  return out;
}

ProductSums::ProductSums(const Matrix<Bounded>& a, const Matrix<Bounded>& b) : state_(std::make_unique<State>()) {
  state_->add(a, b);
}
ProductSums::ProductSums(ProductSums&&) noexcept = default;
ProductSums& ProductSums::operator=(ProductSums&&) noexcept = default;
ProductSums::~ProductSums() = default;
void ProductSums::add(const Matrix<Bounded>& a, const Matrix<Bounded>& b) { state_->add(a, b); }
Matrix<Bounded> ProductSums::decide() const { return state_->decide(); }
long ProductSums::reduction() const { return state_->n; }
long ProductSums::outputs_following_sources() const {
  if (!state_->kept_a.empty()) return state_->m * state_->p;
  return static_cast<long>((state_->folds.array() == 0.0).count());
}

Matrix<Bounded> matmul(const Matrix<Bounded>& a, const Matrix<Bounded>& b) {
  if (by_rule) return matmul_by_rule(a, b);
  return ProductSums(a, b).decide();
}

}  // namespace gradeq::ref
