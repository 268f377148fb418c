// dot.h — the error model's rule for a dot product, sum_k a_k b_k: every
// GEMM of the reference (a linear layer's forward, data gradient and weight
// gradient) is made of them. This scalar form is the specification;
// reference/matmul.h computes the same rule for whole matrices on float64
// GEMMs, and a test holds the two together (docs/NUMERICS.md §3, "Dot
// products").
//
// The rule, for n terms with kernel bounds K and hard bounds H (systematic +
// random + shared magnitude) of each operand:
//   propagated   systematic and random parts: sum_k |b_k| P(a_k) + |a_k| P(b_k),
//                plus the second-order terms e(a_k) e(b_k) in parts
//                (detail::second_order: with S the systematic part and
//                shared magnitude, R the hard random part, Q the scale:
//                systematic S_a S_b, + Q_a Q_b in the probabilistic form,
//                hard S_a R_b + R_a H_b);
//                scale, first and second order:
//                sqrt(sum_k Q(a_k)^2 (|b_k| + S(b_k) + lambda Q(b_k))^2)
//                + sqrt(sum_k Q(b_k)^2 (|a_k| + S(a_k))^2)
//   own rounding with M = sum_k (|a_k| + H(a_k)) (|b_k| + H(b_k)): hard
//                gamma_n M (Higham's dot-product bound: the n products'
//                roundings are inside it), scale sqrt(n + 1) u M, plus the
//                underflow floor once per product
//   exact        no rounding at all when every operand is exact, the
//                operands' significant bits add up to at most 24 (each
//                product is a float32 value) and M < 2^(24 + q), q the sum of
//                the operands' smallest bit exponents (every partial sum is
//                then a float32 value)
//   shared       per source s, the entries c_s(a_k) b_k and c_s(b_k) a_k of
//                every term (one per operand that carries s); a source with
//                one entry only cannot cancel and is folded into the
//                systematic part (|entry| times its bound), as is every entry
//                when more than 16 sources meet; the others keep the signed
//                sum of their entries, the kSharedTerms largest, the rest
//                folded.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/bounded.h"

namespace gradeq::ref {

// Bits between the highest and the lowest set bit of x's significand (0 for 0).
int significant_bits(double x);

namespace detail {

// Distinct shared sources a dot product follows before folding them all.
inline constexpr std::size_t kDotSources = 16;

// The dot product's exactness test and its own rounding, shared by the
// scalar rule and the matrix form so that both decide alike.
struct DotExactness {
  int max_bits_a = 0, max_bits_b = 0;
  int min_exponent_a = 1 << 20, min_exponent_b = 1 << 20;  // smallest bit exponent over nonzero operands
  bool exact_operands = true;                               // every operand has kernel bound 0
  bool exact_references = true;                             // every operand has reference bound 0
  bool finite = true;

  void add_a(const Bounded& x) { add(x, max_bits_a, min_exponent_a); }
  void add_b(const Bounded& x) { add(x, max_bits_b, min_exponent_b); }
  void add(const Bounded& x, int& bits, int& exponent) {
    exact_operands = exact_operands && x.kernel_bound == 0.0;
    exact_references = exact_references && x.reference == 0.0;
    finite = finite && std::isfinite(x.value);
    if (x.value != 0.0 && std::isfinite(x.value)) {
      bits = std::max(bits, significant_bits(x.value));
      exponent = std::min(exponent, granularity_exponent(x.value));
    }
  }
  // Whether a sum of products of these operands with magnitude m is exact
  // in a format of p significand bits whose smallest bit exponent is e_min.
  bool exact_in(int p, int e_min, bool exact, double m) const {
    if (!exact || !finite) return false;
    if (m == 0.0) return true;
    const int q = min_exponent_a + min_exponent_b;
    return max_bits_a + max_bits_b <= p && q >= e_min && m < std::ldexp(1.0, p + q);
  }
};

// The parts of a dot product from its sums over the terms.
struct DotSums {
  double value = 0.0;
  double systematic = 0.0, random = 0.0;   // propagated linear parts (incl. second order)
  double scale_a = 0.0, scale_b = 0.0;     // sum b^2 Q(a)^2, sum a^2 Q(b)^2
  double magnitude = 0.0;                  // M
  double abs_product = 0.0;                // sum |a| |b|
  double reference = 0.0;                  // propagated reference error
  double shared_systematic = 0.0;          // shared terms folded (singletons, beyond kSharedTerms, or all)
  SharedTerms shared;
};

// The dot product's result from its sums: own rounding unless exact, the
// float64 reference's own error unless exact in float64.
inline Bounded dot_result(long n, const DotSums& s, const DotExactness& x) {
  const RoundingModel& m = rounding_model();
  const double u = std::max(m.arithmetic_u, m.reduction_u);
  ErrorParts e{s.systematic + s.shared_systematic, s.random, std::sqrt(s.scale_a) + std::sqrt(s.scale_b)};
  if (!x.exact_in(24, -149, x.exact_operands, s.magnitude)) {
    const double nd = static_cast<double>(n);
    e.random += reduction_gamma(n, u) * s.magnitude + nd * m.arithmetic_floor;
    e.scale += std::sqrt(nd + 1.0) * u * s.magnitude + std::sqrt(nd) * m.arithmetic_floor;
  }
  double r = s.reference;
  if (!x.exact_in(53, -1074, x.exact_references, s.abs_product)) r += reference_gamma(n) * s.abs_product;
  // The products and partial sums reach M: where M may reach float32's
  // overflow, the kernel may hold Inf (or NaN: Inf - Inf) whatever the sum.
  return Bounded::with_shared(s.value, unless_overflow(s.magnitude, e, s.shared), s.shared, r);
}

// Merged shared sources of a dot product, accumulated term by term.
class DotSources {
 public:
  // One entry t of source `source`, whose bound is `bound`.
  void add(std::uint64_t source, double t, double bound) {
    if (t == 0.0) return;
    const double folded = std::abs(t) * bound;
    all_folded_ += folded;
    if (many_) return;
    auto it = std::find_if(sources_.begin(), sources_.end(), [&](const Entry& e) { return e.source == source; });
    if (it == sources_.end()) {
      if (sources_.size() == kDotSources) {
        many_ = true;
        return;
      }
      it = sources_.insert(sources_.end(), Entry{source, bound, 0.0, 0.0, 0});
    }
    it->coefficient += t;
    it->folded += folded;
    ++it->terms;
  }
  // Fills s.shared and s.shared_systematic.
  void finish(DotSums& s) {
    if (many_) {
      s.shared_systematic += all_folded_;
      return;
    }
    std::vector<SharedTerm> kept;
    for (const Entry& e : sources_) {
      if (e.terms == 1) {
        s.shared_systematic += e.folded;
      } else if (e.coefficient != 0.0) {
        kept.push_back({e.source, e.coefficient, e.bound});
      }
    }
    keep_largest(kept, s);
  }
  // The kSharedTerms largest |coefficient| bound of `kept` stay shared; the
  // rest are folded. Ties keep the earlier entry.
  static void keep_largest(std::vector<SharedTerm>& kept, DotSums& s) {
    // A stable insertion sort: the list is short, and std::stable_sort
    // would allocate a buffer for every dot product.
    const auto weight = [](const SharedTerm& t) { return std::abs(t.coefficient) * t.bound; };
    for (std::size_t i = 1; i < kept.size(); ++i)
      for (std::size_t j = i; j > 0 && weight(kept[j]) > weight(kept[j - 1]); --j) std::swap(kept[j], kept[j - 1]);
    for (const SharedTerm& t : kept) {
      if (s.shared.count < kSharedTerms) {
        s.shared.term[s.shared.count++] = t;
      } else {
        s.shared_systematic += std::abs(t.coefficient) * t.bound;
      }
    }
  }

 private:
  struct Entry {
    std::uint64_t source;
    double bound, coefficient, folded;
    long terms;
  };
  std::vector<Entry> sources_;
  double all_folded_ = 0.0;
  bool many_ = false;
};

// H(x): the hard bound, shared terms included.
inline double hard_total(const Bounded& x) { return hard_bound(collapsed_parts(x)); }

}  // namespace detail

// sum_k a(k) b(k), k = 0..n-1, by the rule above.
template <class A, class B>
double dot(long n, A&& a, B&& b, double /*tag*/) {
  double s = 0.0;
  for (long k = 0; k < n; ++k) s += a(k) * b(k);
  return s;
}

template <class A, class B>
Bounded dot(long n, A&& a, B&& b, const Bounded& /*tag*/) {
  detail::DotSums s;
  detail::DotExactness x;
  detail::DotSources sources;
  for (long k = 0; k < n; ++k) {
    const Bounded& ak = a(k);
    const Bounded& bk = b(k);
    x.add_a(ak);
    x.add_b(bk);
    const double va = std::abs(ak.value), vb = std::abs(bk.value);
    const double ha = detail::hard_total(ak), hb = detail::hard_total(bk);
    s.value += ak.value * bk.value;
    const ErrorParts pa = detail::scaled(ak.kernel_parts, vb), pb = detail::scaled(bk.kernel_parts, va);
    const ErrorParts ca = detail::collapsed_parts(ak), cb = detail::collapsed_parts(bk);
    const ErrorParts second = detail::second_order(ca, cb);
    s.systematic += pa.systematic + pb.systematic + second.systematic;
    s.random += pa.random + pb.random + second.random;
    // The second order's scale S_a Q_b + Q_a (S_b + lambda Q_b) joins the
    // first order's, each operand's scale with its factor.
    const double qa = ak.kernel_parts.scale * (vb + cb.systematic + rounding_model().confidence * cb.scale);
    const double qb = bk.kernel_parts.scale * (va + ca.systematic);
    s.scale_a += qa * qa;
    s.scale_b += qb * qb;
    s.magnitude += (va + ha) * (vb + hb);
    s.abs_product += va * vb;
    s.reference += va * bk.reference + vb * ak.reference + ak.reference * bk.reference;
    // Each operand's shared terms, each its own entry: a's coefficient times
    // b, and b's times a (a source both carry counts twice).
    for (int i = 0; i < ak.shared.count; ++i)
      sources.add(ak.shared.term[i].source, ak.shared.term[i].coefficient * bk.value, ak.shared.term[i].bound);
    for (int j = 0; j < bk.shared.count; ++j)
      sources.add(bk.shared.term[j].source, bk.shared.term[j].coefficient * ak.value, bk.shared.term[j].bound);
  }
  sources.finish(s);
  return detail::dot_result(n, s, x);
}

template <class T, class A, class B>
T dot(long n, A&& a, B&& b) {
  return dot(n, std::forward<A>(a), std::forward<B>(b), T{});
}

}  // namespace gradeq::ref
