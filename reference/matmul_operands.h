// matmul_operands.h — the operands of the matrix form of the dot-product
// rule (reference/matmul.h) as its float64 GEMMs read them: each operand in
// parts (Parts) and its shared sources per vector of the reduction
// (Sources), the GEMMs by row panels, and the sources' sums and counts
// (reference/matmul_sources.cpp). Internal to reference/matmul.cpp and
// reference/matmul_sources.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "reference/bounded.h"
#include "reference/dot.h"
#include "reference/parallel.h"
#include "reference/tensor.h"

namespace gradeq::ref::matrix_form {

using Dense = Matrix<double>;

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
void gemm_panels(Dense& acc, const Dense& x, const Dense& y);

// acc += x y, skipped when a factor is zero everywhere (operands finite).
void add_product(Dense& acc, const Dense& x, const Dense& y);

// x y.
Dense product(const Dense& x, const Dense& y);

// The rule's bound sums (every sum but the value, sum |a| |b| and the
// shared sources' counts and coefficients): acc += S, where S is never
// below the exact sum x y of the non-negative, finite operands and at most
// bound_sum_inflation(k) times it (docs/NUMERICS.md §3, "Bound sums in
// float32"). A product of at least kFloat32BoundWork multiply-adds over at
// most kFloat32BoundTerms terms runs as a float32 GEMM on operands scaled
// by powers of two, row by row of x and column by column of y, with the
// derived margin; an element whose float32 sum is too small for the
// underflow allowance to be negligible is summed in float64. Smaller
// products, and longer reductions, are float64 GEMMs.
constexpr double kFloat32BoundWork = 0x1p22;  // multiply-adds
constexpr long kFloat32BoundTerms = 1L << 16;
void add_bound_product(Dense& acc, const Dense& x, const Dense& y);
Dense bound_product(const Dense& x, const Dense& y);
// The largest factor by which a float32 bound sum over k terms may exceed
// the exact sum (1 where it is summed in float64).
double bound_sum_inflation(long k);

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

// The shared sources of operand x per vector of the reduction (by_rows: the
// rows of A, else the columns of B). `common`: the sources both operands
// carry (common_sources), which are pairs wherever they are met.
Sources gather_sources(const Parts& x, bool by_rows, const std::vector<std::uint64_t>& common);

// Per pair q and output column j: the merged coefficient sum_k c_qk y(k, j)
// and the number of terms that carry the source, #{k : c_qk y(k, j) != 0}.
// A pair that spans much of its vector (a row's statistics) goes into one
// GEMM with the others like it; a sparse one (a source of a few elements)
// is a sum of rows of y over its entries.
std::pair<Dense, Dense> pair_sums(const Sources& s, const Dense& y, const Dense& y_nonzero);

// The sources both operands carry, sorted.
std::vector<std::uint64_t> common_sources(const Parts& a, const Parts& b);

// The pairs of some vectors of an operand (by their index), renumbered
// 0, 1, ... in that order.
Sources select_vectors(const Sources& s, const std::vector<long>& vectors);

// 1 where an output (i, j) of this slice of a x b meets more distinct
// shared sources than the rule follows (kDotSources), which it then folds
// all, else 0; decided without the per-pair sums. The pairs met on either
// side (pairs_met in matmul_sources.cpp) are distinct sources, and the
// singletons (`singles`, this slice's count per output) others besides.
// Where the other operand has no zero the count is exact (a weight gradient
// after a normalizer); where both hold zeros (after a ReLU, on padded
// tokens) the lower bound still decides it. The threshold is half a source
// past the limit: the bound is summed in float64.
Dense outputs_that_fold(const Sources& sa, const Sources& sb, const Dense& nonzero_a, const Dense& nonzero_b,
                        const Dense& singles);

}  // namespace gradeq::ref::matrix_form
