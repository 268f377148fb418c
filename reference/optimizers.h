// optimizers.h — float64 reference optimizer steps, PyTorch semantics.
// One function per optimizer, applied to one parameter tensor, its window
// gradient and its state. No I/O, no harness types.
#pragma once

#include "reference/bounded.h"
#include "reference/tensor.h"

namespace gradeq::ref {

enum class OptimizerKind { sgd };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.1;
};

// Plain SGD: p <- p - lr * g.
template <class T>
void sgd_step(Matrix<T>& p, const Matrix<T>& g, const T& lr) {
  for (long i = 0; i < p.size(); ++i) p.data()[i] = p.data()[i] - lr * g.data()[i];
}

}  // namespace gradeq::ref
