// matmul.cpp — the dot-product rule of reference/dot.h for whole matrices.
// GCC 12 reports _mm512_undefined_pd() in Eigen's AVX-512 packing as
// maybe-uninitialized (a false positive: GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include "reference/matmul.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "reference/dot.h"
#include "reference/parallel.h"

namespace gradeq::ref {
namespace {

using Dense = Matrix<double>;

bool all_zero(const Dense& x) { return (x.array() == 0.0).all(); }

// Work is split into panels of kPanelRows rows, each computed alone and in
// the same way whatever the number of threads: results are bitwise
// independent of it. Threads are used once a product is large enough to
// repay starting them; every worker runs under the caller's rounding model.
constexpr long kPanelRows = 64;
constexpr double kParallelWork = 0x1p22;  // multiply-adds

template <class F>
void for_panels(long rows, double work, F&& panel) {
  const long panels = (rows + kPanelRows - 1) / kPanelRows;
  parallel_for(panels, work < kParallelWork ? 1 : thread_limit(),
               [&](long q, long) { panel(q * kPanelRows, std::min(rows, (q + 1) * kPanelRows)); });
}

// acc += x y, by row panels.
void gemm_panels(Dense& acc, const Dense& x, const Dense& y) {
  for_panels(x.rows(), static_cast<double>(x.rows()) * static_cast<double>(x.cols()) * static_cast<double>(y.cols()),
             [&](long r0, long r1) { acc.middleRows(r0, r1 - r0).noalias() += x.middleRows(r0, r1 - r0) * y; });
}

// acc += x y, skipped when a factor is zero everywhere (operands finite).
void add_product(Dense& acc, const Dense& x, const Dense& y) {
  if (all_zero(x) || all_zero(y)) return;
  gemm_panels(acc, x, y);
}

Dense product(const Dense& x, const Dense& y) {
  Dense out = Dense::Zero(x.rows(), y.cols());
  add_product(out, x, y);
  return out;
}

// What the exactness test needs of one operand's vector of the reduction.
struct VectorFacts {
  int max_bits = 0, min_exponent = 1 << 20;
  bool exact = true, exact_reference = true, finite = true;
};

struct SourceEntry {
  std::uint64_t source;
  long k;
  double coefficient, bound;
};

// One operand in parts, element by element, with the facts of each vector
// of the reduction (rows of A, columns of B) and whether every part is
// finite, and its shared terms: one pass over the operand.
struct Parts {
  // systematic_total: with the shared magnitude (collapsed), as the
  // second-order terms read it; hard = systematic_total + random.
  Dense value, abs, systematic, systematic_total, random, scale, reference, hard, nonzero;
  std::vector<VectorFacts> facts;
  bool finite = true;  // GEMMs would turn 0 * Inf into NaN where the rule gives 0
  std::vector<SourceEntry> entries;    // every shared term, by vector, each vector's in reduction order
  std::vector<long> first_entry;       // per vector, into entries; one past the end last
  std::vector<std::uint64_t> sources;  // the distinct sources, sorted
  Parts(const Matrix<Bounded>& x, bool by_rows)
      : value(x.rows(), x.cols()),
        abs(x.rows(), x.cols()),
        systematic(x.rows(), x.cols()),
        systematic_total(x.rows(), x.cols()),
        random(x.rows(), x.cols()),
        scale(x.rows(), x.cols()),
        reference(x.rows(), x.cols()),
        hard(x.rows(), x.cols()),
        nonzero(x.rows(), x.cols()),
        facts(static_cast<std::size_t>(by_rows ? x.rows() : x.cols())),
        first_entry(facts.size() + 1, 0) {
    for (long r = 0; r < x.rows(); ++r)
      for (long c = 0; c < x.cols(); ++c) {
        const long i = r * x.cols() + c;
        const Bounded& b = x.data()[i];
        finite = finite && std::isfinite(b.value) && std::isfinite(b.kernel_bound) && std::isfinite(b.reference);
        value.data()[i] = b.value;
        abs.data()[i] = std::abs(b.value);
        systematic.data()[i] = b.kernel_parts.systematic;
        systematic_total.data()[i] = detail::collapsed_parts(b).systematic;
        random.data()[i] = b.kernel_parts.random;
        scale.data()[i] = b.kernel_parts.scale;
        reference.data()[i] = b.reference;
        hard.data()[i] = detail::hard_total(b);
        nonzero.data()[i] = b.value != 0.0 ? 1.0 : 0.0;
        VectorFacts& f = facts[static_cast<std::size_t>(by_rows ? r : c)];
        detail::DotExactness d;
        d.add_a(b);
        f.max_bits = std::max(f.max_bits, d.max_bits_a);
        f.min_exponent = std::min(f.min_exponent, d.min_exponent_a);
        f.exact = f.exact && d.exact_operands;
        f.exact_reference = f.exact_reference && d.exact_references;
        f.finite = f.finite && d.finite;
        for (int t = 0; t < b.shared.count; ++t) {
          const SharedTerm& st = b.shared.term[t];
          entries.push_back({st.source, by_rows ? c : r, st.coefficient, st.bound});
          // A row's few sources repeat along it: the last ones met are
          // checked before anything else.
          const std::size_t recent = std::min<std::size_t>(sources.size(), 2 * kSharedTerms);
          if (std::find(sources.end() - static_cast<long>(recent), sources.end(), st.source) == sources.end())
            sources.push_back(st.source);
        }
        if (!by_rows) column_of.insert(column_of.end(), static_cast<std::size_t>(b.shared.count), c);
        if (by_rows && c + 1 == x.cols()) first_entry[static_cast<std::size_t>(r) + 1] = static_cast<long>(entries.size());
      }
    std::sort(sources.begin(), sources.end());
    sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
    by_vector(by_rows);
  }

 private:
  std::vector<long> column_of;  // by columns: each entry's column, until they are grouped

  // Entries grouped by vector in a stable counting sort (by rows they
  // already are).
  void by_vector(bool by_rows) {
    const std::size_t vectors = facts.size();
    if (by_rows) return;
    for (long c : column_of) ++first_entry[static_cast<std::size_t>(c) + 1];
    for (std::size_t v = 1; v <= vectors; ++v) first_entry[v] += first_entry[v - 1];
    std::vector<long> next(first_entry.begin(), first_entry.end() - 1);
    std::vector<SourceEntry> grouped(entries.size());
    for (std::size_t e = 0; e < entries.size(); ++e)
      grouped[static_cast<std::size_t>(next[static_cast<std::size_t>(column_of[e])]++)] = entries[e];
    entries.swap(grouped);
    column_of.clear();
  }
};

// The shared sources of one operand, per vector of the reduction (a row
// of A, a column of B). A source met at one element of its vector is a
// singleton there: in every dot product of that vector it is in one term
// at most, so it is folded (its |coefficient| bound per element, and a count
// of such sources per element). A source met at several elements gets a
// coefficient row over the reduction (a "pair": vector and source).
struct Sources {
  Dense single_folded, single_count, multi_folded;  // the operand's shape
  std::vector<long> first;                          // per pair, into entry_k / entry_c; one past the end last
  std::vector<long> entry_k;                        // the pair's elements along the reduction
  std::vector<double> entry_c;                      // and their coefficients
  std::vector<SharedTerm> term;                     // per pair: source and bound
  std::vector<char> common;                         // per pair: the other operand carries the source too
  // Per vector, into the pairs (a vector's pairs are consecutive); one past
  // the end last.
  std::vector<long> first_pair;

  // The pairs of vector v: [begin, end).
  std::pair<long, long> pairs_of(long v) const {
    const auto i = static_cast<std::size_t>(v);
    return {first_pair[i], first_pair[i + 1]};
  }
};

// The entries in a stable order by source: grouped by source, ascending,
// each group in the order of the reduction. The order of the groups only
// decides which of two equally large shared terms a result keeps (the
// rule's ties); ascending ids make that the same in both paths below. A
// vector usually carries few distinct sources (a row's statistics): they
// are counted into place, in time linear in the entries; many are sorted.
void group_by_source(std::vector<SourceEntry>& entries, std::vector<SourceEntry>& scratch) {
  constexpr std::size_t kFew = 16;
  std::array<std::uint64_t, kFew> ids;
  std::array<long, kFew + 1> start{};
  std::size_t distinct = 0;
  for (const SourceEntry& e : entries) {
    std::size_t g = 0;
    while (g < distinct && ids[g] != e.source) ++g;
    if (g == distinct) {
      if (distinct == kFew) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const SourceEntry& a, const SourceEntry& b) { return a.source < b.source; });
        return;
      }
      ids[distinct++] = e.source;
    }
  }
  if (distinct <= 1) return;
  std::sort(ids.begin(), ids.begin() + static_cast<long>(distinct));
  const auto rank = [&](std::uint64_t source) {
    std::size_t g = 0;
    while (ids[g] != source) ++g;
    return g;
  };
  for (const SourceEntry& e : entries) ++start[rank(e.source) + 1];
  for (std::size_t g = 1; g <= distinct; ++g) start[g] += start[g - 1];
  scratch.resize(entries.size());
  for (const SourceEntry& e : entries) scratch[static_cast<std::size_t>(start[rank(e.source)]++)] = e;
  entries.swap(scratch);
}

Sources gather_sources(const Parts& x, bool by_rows, const std::vector<std::uint64_t>& common) {
  const long vectors = static_cast<long>(x.facts.size());
  Sources s;
  s.single_folded = Dense::Zero(x.value.rows(), x.value.cols());
  s.single_count = Dense::Zero(x.value.rows(), x.value.cols());
  s.multi_folded = Dense::Zero(x.value.rows(), x.value.cols());
  s.first_pair.reserve(static_cast<std::size_t>(vectors) + 1);
  std::vector<SourceEntry> entries, scratch;
  for (long v = 0; v < vectors; ++v) {
    s.first_pair.push_back(static_cast<long>(s.term.size()));
    entries.assign(x.entries.begin() + x.first_entry[static_cast<std::size_t>(v)],
                   x.entries.begin() + x.first_entry[static_cast<std::size_t>(v) + 1]);
    group_by_source(entries, scratch);
    for (std::size_t i = 0; i < entries.size();) {
      std::size_t j = i;
      while (j < entries.size() && entries[j].source == entries[i].source) ++j;
      const auto at = [&](long k) -> std::pair<long, long> { return by_rows ? std::pair{v, k} : std::pair{k, v}; };
      const bool shared_by_both = std::binary_search(common.begin(), common.end(), entries[i].source);
      if (j - i == 1 && !shared_by_both) {
        const auto [r, c] = at(entries[i].k);
        s.single_folded(r, c) += std::abs(entries[i].coefficient) * entries[i].bound;
        s.single_count(r, c) += 1.0;
      } else {
        s.term.push_back({entries[i].source, 0.0, entries[i].bound});
        s.common.push_back(shared_by_both);
        s.first.push_back(static_cast<long>(s.entry_k.size()));
        for (std::size_t e = i; e < j; ++e) {
          const auto [r, c] = at(entries[e].k);
          s.multi_folded(r, c) += std::abs(entries[e].coefficient) * entries[e].bound;
          s.entry_k.push_back(entries[e].k);
          s.entry_c.push_back(entries[e].coefficient);
        }
      }
      i = j;
    }
  }
  s.first.push_back(static_cast<long>(s.entry_k.size()));
  s.first_pair.push_back(static_cast<long>(s.term.size()));
  return s;
}

// Per pair q and output column j: the merged coefficient sum_k c_qk y(k, j)
// and the number of terms that carry the source, #{k : c_qk y(k, j) != 0}.
// A pair that spans much of its vector (a row's statistics) goes into one
// GEMM with the others like it; a sparse one (a source of a few elements)
// is a sum of rows of y over its entries.
std::pair<Dense, Dense> pair_sums(const Sources& s, const Dense& y, const Dense& y_nonzero) {
  const long pairs = static_cast<long>(s.term.size()), n = y.rows(), outputs = y.cols();
  Dense merged = Dense::Zero(pairs, outputs), terms = Dense::Zero(pairs, outputs);
  const auto entries_of = [&](long q) { return s.first[q + 1] - s.first[q]; };
  std::vector<long> dense, sparse;
  for (long q = 0; q < pairs; ++q) (4 * entries_of(q) >= n ? dense : sparse).push_back(q);
  if (!dense.empty()) {
    Dense c = Dense::Zero(static_cast<long>(dense.size()), n);
    for (std::size_t d = 0; d < dense.size(); ++d)
      for (long e = s.first[dense[d]]; e < s.first[dense[d] + 1]; ++e) c(static_cast<long>(d), s.entry_k[e]) = s.entry_c[e];
    Dense m = Dense::Zero(c.rows(), outputs);
    gemm_panels(m, c, y);
    Dense t = Dense::Zero(c.rows(), outputs);
    if ((y_nonzero.array() != 0.0).all()) {
      t = (c.array() != 0.0).cast<double>().rowwise().sum().replicate(1, outputs);
    } else {
      gemm_panels(t, Dense((c.array() != 0.0).cast<double>()), y_nonzero);
    }
    for (std::size_t d = 0; d < dense.size(); ++d) {
      merged.row(dense[d]) = m.row(static_cast<long>(d));
      terms.row(dense[d]) = t.row(static_cast<long>(d));
    }
  }
  double work = 0.0;
  for (long q : sparse) work += static_cast<double>(entries_of(q)) * static_cast<double>(outputs);
  for_panels(static_cast<long>(sparse.size()), work, [&](long q0, long q1) {
    for (long i = q0; i < q1; ++i) {
      const long q = sparse[static_cast<std::size_t>(i)];
      for (long e = s.first[q]; e < s.first[q + 1]; ++e) {
        const double c = s.entry_c[e];
        if (c == 0.0) continue;
        merged.row(q) += c * y.row(s.entry_k[e]);
        terms.row(q) += y_nonzero.row(s.entry_k[e]);
      }
    }
  });
  return {std::move(merged), std::move(terms)};
}

// The sources both operands carry, sorted.
std::vector<std::uint64_t> common_sources(const Parts& a, const Parts& b) {
  std::vector<std::uint64_t> out;
  std::set_intersection(a.sources.begin(), a.sources.end(), b.sources.begin(), b.sources.end(), std::back_inserter(out));
  return out;
}

thread_local bool by_rule = false;

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

namespace {

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

long live_entries(const Sources& s, long q) {
  long live = 0;
  for (long e = s.first[q]; e < s.first[q + 1]; ++e) live += s.entry_c[e] != 0.0;
  return live;
}

// Per vector of an operand, its pairs with a live entry (a nonzero
// coefficient): the most an output of that vector can meet.
Eigen::VectorXd live_pairs(const Sources& s, long vectors) {
  Eigen::VectorXd live = Eigen::VectorXd::Zero(vectors);
  if (s.term.empty()) return live;
  for (long v = 0; v < vectors; ++v) {
    const auto [q0, q1] = s.pairs_of(v);
    for (long q = q0; q < q1; ++q) live(v) += live_entries(s, q) > 0 ? 1.0 : 0.0;
  }
  return live;
}

// For each output of a [m, n] x [n, p] product, a lower bound on how many
// pairs of one operand's vector (row i of A, or column j of B) it meets: a
// pair counts where one of its live entries meets a nonzero element of the
// other operand (pair_sums' term count). Where the other operand has no
// zero, that is the vector's number of live pairs. Otherwise each live
// entry is weighted 1 / its pair's live entries and summed against the
// other operand's nonzero pattern: a pair met adds at most 1 and more than
// 0, one not met adds 0.
Dense pairs_met(const Sources& s, bool by_rows, long m, long n, long p, const Dense& other_nonzero,
                const Eigen::VectorXd& live) {
  if (s.term.empty()) return Dense::Zero(m, p);
  if ((other_nonzero.array() != 0.0).all())
    return by_rows ? Dense(live.replicate(1, p)) : Dense(live.transpose().replicate(m, 1));
  Dense shares = by_rows ? Dense::Zero(m, n) : Dense::Zero(n, p);
  for (long v = 0; v < (by_rows ? m : p); ++v) {
    const auto [q0, q1] = s.pairs_of(v);
    for (long q = q0; q < q1; ++q) {
      const double share = 1.0 / static_cast<double>(live_entries(s, q));
      for (long e = s.first[q]; e < s.first[q + 1]; ++e)
        if (s.entry_c[e] != 0.0) (by_rows ? shares(v, s.entry_k[e]) : shares(s.entry_k[e], v)) += share;
    }
  }
  return by_rows ? product(shares, other_nonzero) : product(other_nonzero, shares);
}

// The pairs of some vectors of an operand (by their index), renumbered
// 0, 1, ... in that order.
Sources select_vectors(const Sources& s, const std::vector<long>& vectors) {
  Sources out;
  out.first_pair.reserve(vectors.size() + 1);
  for (long v : vectors) {
    out.first_pair.push_back(static_cast<long>(out.term.size()));
    const auto [q0, q1] = s.pairs_of(v);
    for (long q = q0; q < q1; ++q) {
      out.term.push_back(s.term[q]);
      out.common.push_back(s.common[q]);
      out.first.push_back(static_cast<long>(out.entry_k.size()));
      out.entry_k.insert(out.entry_k.end(), s.entry_k.begin() + s.first[q], s.entry_k.begin() + s.first[q + 1]);
      out.entry_c.insert(out.entry_c.end(), s.entry_c.begin() + s.first[q], s.entry_c.begin() + s.first[q + 1]);
    }
  }
  out.first.push_back(static_cast<long>(out.entry_k.size()));
  out.first_pair.push_back(static_cast<long>(out.term.size()));
  return out;
}

// 1 where an output (i, j) of this slice of a x b meets more distinct
// shared sources than the rule follows (kDotSources), which it then folds
// all, else 0; decided without the per-pair sums. The pairs met on either
// side (above) are distinct sources, and the singletons (`singles`, this
// slice's count per output) others besides. Where the other operand has no
// zero the count is exact (a weight gradient after a normalizer); where
// both hold zeros (after a ReLU, on padded tokens) the lower bound still
// decides it. The threshold is half a source past the limit: the bound is
// summed in float64.
Dense outputs_that_fold(const Sources& sa, const Sources& sb, const Dense& nonzero_a, const Dense& nonzero_b,
                        const Dense& singles) {
  const long m = nonzero_a.rows(), n = nonzero_a.cols(), p = nonzero_b.cols();
  const double limit = static_cast<double>(detail::kDotSources) + 0.5;
  // No output can meet more than its row's and its column's live pairs: in
  // a short reduction none folds, and nothing more is counted.
  const Eigen::VectorXd live_a = live_pairs(sa, m), live_b = live_pairs(sb, p);
  const auto most = singles.array() + live_a.replicate(1, p).array() + live_b.transpose().replicate(m, 1).array();
  if ((most <= limit).all()) return Dense::Zero(m, p);
  const Dense met_a = pairs_met(sa, true, m, n, p, nonzero_b, live_a),
              met_b = pairs_met(sb, false, m, n, p, nonzero_a, live_b);
  return (singles.array() + met_a.array().max(met_b.array()) > limit).cast<double>();
}

}  // namespace

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
  add_sums(abs_product, product(pa.abs, pb.abs));
  // First order and the second-order terms e_a e_b in parts
  // (detail::second_order), grouped by operand as ref::dot groups them.
  const RoundingModel& model = rounding_model();
  Dense sys = product(pa.systematic, pb.abs);
  add_product(sys, pa.abs, pb.systematic);
  add_product(sys, pa.systematic_total, pb.systematic_total);
  if (model.reduction == ReductionBound::probabilistic) add_product(sys, pa.scale, pb.scale);
  add_sums(systematic, std::move(sys));
  Dense rnd = product(pa.random, Dense(pb.abs + pb.hard));
  add_product(rnd, Dense(pa.abs + pa.systematic_total), pb.random);
  add_sums(random, std::move(rnd));
  add_sums(scale_a, product(Dense(pa.scale.array().square()),
                            Dense((pb.abs + pb.systematic_total + model.confidence * pb.scale).array().square())));
  add_sums(scale_b, product(Dense((pa.abs + pa.systematic_total).array().square()), Dense(pb.scale.array().square())));
  Dense ref = product(pa.reference, pb.abs);
  add_product(ref, pa.abs, pb.reference);
  add_product(ref, pa.reference, pb.reference);
  add_sums(reference, std::move(ref));

  // Shared sources: singletons folded by GEMMs; each pair's merged
  // coefficient and its number of terms, by GEMMs over coefficient rows
  // (or, where the other operand has no zero, the pair's own count).
  const std::vector<std::uint64_t> common = common_sources(pa, pb);
  Sources sa = gather_sources(pa, true, common), sb = gather_sources(pb, false, common);
  Dense folded = product(sa.single_folded, pb.abs);
  add_product(folded, pa.abs, sb.single_folded);
  add_sums(single_folded, std::move(folded));
  Dense multi = product(sa.multi_folded, pb.abs);
  add_product(multi, pa.abs, sb.multi_folded);
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
  add_sums(magnitude, product(Dense(pa.abs + pa.hard), Dense(pb.abs + pb.hard)));
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
        s.magnitude = magnitude(i, j);
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
