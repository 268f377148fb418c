// matmul.h — the reference's matrix product C = A B, [m, n] x [n, p], for
// both scalar types. Every element of C is the dot product of reference/dot.h;
// for T = Bounded the whole matrix is computed at once, on float64 GEMMs:
// one for the values and one per error part, over transformed operands
// (|A| |B| and (|A| + H_A)(|B| + H_B) for the magnitudes, S_A |B| + |A| S_B
// and the second-order S_A S_B (+ Q_A Q_B) for the linear parts, squared
// scales times squared factors for the quadrature scale, the shared
// sources' coefficient rows times B), then the dot rule's decisions per
// element. Where the rule needs what GEMMs cannot give (an operand with an
// unbounded part, or a shared source carried by both operands) it is
// evaluated element by element. docs/NUMERICS.md §3, "Dot products".
#pragma once

#include <memory>

#include "reference/bounded.h"
#include "reference/tensor.h"

namespace gradeq::ref {

Matrix<double> matmul(const Matrix<double>& a, const Matrix<double>& b);
Matrix<Bounded> matmul(const Matrix<Bounded>& a, const Matrix<Bounded>& b);

// The rule's sums for a product A B whose reduction (A's columns, B's rows)
// arrives in consecutive slices: a weight gradient over many rows, one row
// slice at a time, so that no pass holds every row. Each slice's sums are
// float64 GEMMs that add up over the slices; decide() then makes the rule's
// decisions for each element once, over the whole reduction (its n, its
// exactness, its distinct shared sources). One slice is matmul itself, bit
// for bit. Over several, values and sums differ from one product's only in
// float64 summation order, and a source that one slice alone carries at a
// single term is folded there: a source that spans slices is followed no
// better than that, so the bound is never smaller, and the same where no
// source spans slices (docs/NUMERICS.md §3, "Dot products").
class ProductSums {
 public:
  ProductSums(const Matrix<Bounded>& a, const Matrix<Bounded>& b);
  ProductSums(ProductSums&&) noexcept;
  ProductSums& operator=(ProductSums&&) noexcept;
  ~ProductSums();
  // The next slice: [m, k] x [k, p].
  void add(const Matrix<Bounded>& a, const Matrix<Bounded>& b);
  Matrix<Bounded> decide() const;
  long reduction() const;  // n: the slices' k so far
  // How many outputs may still follow their shared sources one by one: the
  // product keeps per-source sums for their rows and columns. Not those
  // that meet more sources than the rule follows: it folds them without.
  long outputs_following_sources() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The same product, every element by the scalar rule (ref::dot): the
// specification the matrix form is tested against.
Matrix<Bounded> matmul_by_rule(const Matrix<Bounded>& a, const Matrix<Bounded>& b);

// Within this scope, on this thread, matmul takes the scalar rule element
// by element: whole runs of the reference can then be held to their
// specification.
class ScopedMatmulByRule {
 public:
  ScopedMatmulByRule();
  ~ScopedMatmulByRule();
  ScopedMatmulByRule(const ScopedMatmulByRule&) = delete;
  ScopedMatmulByRule& operator=(const ScopedMatmulByRule&) = delete;

 private:
  bool previous_;
};

// Within this scope, on this thread, the matrix form sums every bound in
// float32 (with its margin), whatever the product's size: tests hold the
// float32 path to the scalar rule on small operands.
class ScopedBoundSumsInFloat32 {
 public:
  ScopedBoundSumsInFloat32();
  ~ScopedBoundSumsInFloat32();
  ScopedBoundSumsInFloat32(const ScopedBoundSumsInFloat32&) = delete;
  ScopedBoundSumsInFloat32& operator=(const ScopedBoundSumsInFloat32&) = delete;

 private:
  bool previous_;
};

template <class T>
Matrix<T> transposed(const Matrix<T>& m) {
  return m.transpose();
}

}  // namespace gradeq::ref
