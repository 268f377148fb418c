// tensor.h — the reference's only container: a row-major Eigen matrix of a
// scalar T (double or Bounded). Vectors are 1 x n matrices, so that every
// parameter and gradient has the same shape as the kernel's buffer.
#pragma once

#include <vector>

#include <Eigen/Core>

#include "reference/bounded.h"

namespace gradeq::ref {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
Matrix<T> zeros(long rows, long cols) {
  Matrix<T> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = T(0.0);
  return m;
}

// Lift float64 data (already float32-representable) into T.
template <class T>
Matrix<T> lift(const Matrix<double>& m) {
  Matrix<T> out(m.rows(), m.cols());
  for (long i = 0; i < m.size(); ++i) out.data()[i] = T(m.data()[i]);
  return out;
}

inline Matrix<double> values(const Matrix<double>& m) { return m; }
inline Matrix<double> values(const Matrix<Bounded>& m) {
  Matrix<double> out(m.rows(), m.cols());
  for (long i = 0; i < m.size(); ++i) out.data()[i] = m.data()[i].value;
  return out;
}

template <class T>
Matrix<T> stored(const Matrix<T>& m, Storage where) {
  Matrix<T> out(m.rows(), m.cols());
  for (long i = 0; i < m.size(); ++i) out.data()[i] = store(m.data()[i], where);
  return out;
}

template <class T>
Matrix<T> quantized(const Matrix<T>& m, Storage where) {
  Matrix<T> out(m.rows(), m.cols());
  for (long i = 0; i < m.size(); ++i) out.data()[i] = quantize(m.data()[i], where);
  return out;
}

// Rows [begin, begin + count) of m: a micro-batch's slice of a batch.
template <class T>
Matrix<T> row_slice(const Matrix<T>& m, long begin, long count) {
  return m.block(begin, 0, count, m.cols());
}

}  // namespace gradeq::ref
