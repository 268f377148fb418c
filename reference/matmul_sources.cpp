// matmul_sources.cpp — the shared sources of the matrix form's operands
// (reference/matmul_operands.h): which a vector of the reduction carries at
// one element (folded) and which at several (a pair with a coefficient row),
// the pairs' merged coefficients and term counts over the other operand,
// and which outputs meet more sources than the rule follows.
#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "reference/matmul_operands.h"

namespace gradeq::ref::matrix_form {
namespace {

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

}  // namespace

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

std::vector<std::uint64_t> common_sources(const Parts& a, const Parts& b) {
  std::vector<std::uint64_t> out;
  std::set_intersection(a.sources.begin(), a.sources.end(), b.sources.begin(), b.sources.end(), std::back_inserter(out));
  return out;
}

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

}  // namespace gradeq::ref::matrix_form
