// own_backend.cpp — the replaced op. Built twice: as written, and with
// OWN_BACKEND_OVERWRITES (the bug of a wgrad GEMM called with beta = 0:
// each micro-batch's gradient replaces the buffer instead of adding to it,
// so only the last micro-batch of a window survives).
#include "own_backend.h"

#include <vector>

namespace own {

void OwnBackend::linear_backward_weight(const gradeq::Tensor& dy, const gradeq::Tensor& x, const gradeq::Tensor& dw,
                                        const gradeq::Tensor& db) {
  const long rows = dy.rows, out = dy.cols, in = x.cols;
  std::vector<float> g(dy.size()), a(x.size()), w(dw.size()), b(db.size());
  download(dy, g);
  download(x, a);
  download(dw, w);
  if (!db.empty()) download(db, b);
  for (long o = 0; o < out; ++o) {
    for (long i = 0; i < in; ++i) {
      float sum = 0.0f;  // float32 accumulation, as the Backend contract says
      for (long r = 0; r < rows; ++r) sum += g[r * out + o] * a[r * in + i];
#ifdef OWN_BACKEND_OVERWRITES
      w[o * in + i] = sum;
#else
      w[o * in + i] += sum;
#endif
    }
    if (db.empty()) continue;  // a layer without bias (a head tied to the token embedding)
    float sum = 0.0f;
    for (long r = 0; r < rows; ++r) sum += g[r * out + o];
#ifdef OWN_BACKEND_OVERWRITES
    b[o] = sum;
#else
    b[o] += sum;
#endif
  }
  upload(dw, w);  // rounds to the buffer's dtype (bfloat16, float16 or float32)
  if (!db.empty()) upload(db, b);
}

}  // namespace own
