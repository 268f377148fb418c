// attention.cpp — the host backend's attention_forward and
// attention_backward (kernels/backend_ops.def): the plain form, one query
// row at a time, every sum in float32 in key (or query) order, the
// probabilities of backward recomputed from the saved row max and sum as
// forward computed them.
#include <cmath>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

namespace {

// One sample's view of the qkv rows: query, key and value rows of head h.
struct Heads {
  const float* qkv;
  long width;  // D
  long d;      // per head
  const float* q(long row, long h) const { return qkv + row * 3 * width + h * d; }
  const float* k(long row, long h) const { return q(row, h) + width; }
  const float* v(long row, long h) const { return q(row, h) + 2 * width; }
};

float dot(const float* a, const float* b, long n) {
  float s = 0.0f;
  for (long i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Whether query i of the sample starting at row `first` sees key j.
bool sees(const AttentionConfig& c, const float* ids, long first, long i, long j) {
  if (c.causal && j > i) return false;
  return !ids || static_cast<long>(ids[first + j]) != c.padding_idx;
}

float scale_of(long d) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))); }

}  // namespace

void CpuBackend::attention_forward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                                   const Tensor& row_max, const Tensor& row_sum) {
  require_attention(c, qkv, ids, o, row_max, row_sum, "attention_forward");
  const long width = qkv.cols / 3, d = width / c.heads, T = c.positions;
  const Heads in{values(qkv), width, d};
  const float* id = ids.empty() ? nullptr : values(ids);
  float* out = values(o);
  float* m_out = values(row_max);
  float* l_out = values(row_sum);
  const float scale = scale_of(d);
  std::vector<float> s(static_cast<std::size_t>(T)), acc(static_cast<std::size_t>(d));
  dispatch(o.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long first = 0; first < qkv.rows; first += T)
      for (long h = 0; h < c.heads; ++h)
        for (long i = 0; i < T; ++i) {
          const long row = first + i;
          float m = -INFINITY;
          for (long j = 0; j < T; ++j) {
            if (!sees(c, id, first, i, j)) continue;
            s[j] = scale * dot(in.q(row, h), in.k(first + j, h), d);
            m = std::max(m, s[j]);
          }
          float l = 0.0f;
          for (long j = 0; j < T; ++j)
            if (sees(c, id, first, i, j)) l += std::exp(s[j] - m);
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (long j = 0; j < T; ++j) {
            if (!sees(c, id, first, i, j)) continue;
            const float p = store<D>(std::exp(s[j] - m) / l);
            const float* v = in.v(first + j, h);
            for (long e = 0; e < d; ++e) acc[e] += p * v[e];
          }
          if (l == 0.0f) m = 0.0f;  // no key seen: o = 0
          for (long e = 0; e < d; ++e) out[row * width + h * d + e] = store<D>(acc[e]);
          m_out[row * c.heads + h] = m;
          l_out[row * c.heads + h] = l;
        }
  });
}

void CpuBackend::attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                                    const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                                    const Tensor& dqkv) {
  require_attention(c, qkv, ids, o, row_max, row_sum, "attention_backward");
  require_shape(dout, o.rows, o.cols, "attention_backward dout");
  require_shape(dqkv, qkv.rows, qkv.cols, "attention_backward dqkv");
  const long width = qkv.cols / 3, d = width / c.heads, T = c.positions;
  const Heads in{values(qkv), width, d};
  const float* id = ids.empty() ? nullptr : values(ids);
  const float* out = values(o);
  const float* g = values(dout);
  const float* m_in = values(row_max);
  const float* l_in = values(row_sum);
  float* dx = values(dqkv);
  const float scale = scale_of(d);
  std::vector<float> dk(static_cast<std::size_t>(T * d)), dv(static_cast<std::size_t>(T * d)),
      dq(static_cast<std::size_t>(d));
  dispatch(dqkv.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long first = 0; first < qkv.rows; first += T)
      for (long h = 0; h < c.heads; ++h) {
        std::fill(dk.begin(), dk.end(), 0.0f);
        std::fill(dv.begin(), dv.end(), 0.0f);
        for (long i = 0; i < T; ++i) {
          const long row = first + i;
          const float m = m_in[row * c.heads + h], l = l_in[row * c.heads + h];
          const float* go = g + row * width + h * d;
          const float big_d = dot(go, out + row * width + h * d, d);
          std::fill(dq.begin(), dq.end(), 0.0f);
          for (long j = 0; j < T; ++j) {
            if (!sees(c, id, first, i, j)) continue;
            const float p = std::exp(scale * dot(in.q(row, h), in.k(first + j, h), d) - m) / l;
            const float p_stored = store<D>(p);
            const float ds = store<D>(p * (dot(go, in.v(first + j, h), d) - big_d));
            const float* k = in.k(first + j, h);
            const float* q = in.q(row, h);
            for (long e = 0; e < d; ++e) {
              dq[e] += ds * k[e];
              dk[j * d + e] += ds * q[e];
              dv[j * d + e] += p_stored * go[e];
            }
          }
          for (long e = 0; e < d; ++e) dx[row * 3 * width + h * d + e] = store<D>(scale * dq[e]);
        }
        for (long j = 0; j < T; ++j)
          for (long e = 0; e < d; ++e) {
            dx[(first + j) * 3 * width + width + h * d + e] = store<D>(scale * dk[j * d + e]);
            dx[(first + j) * 3 * width + 2 * width + h * d + e] = store<D>(dv[j * d + e]);
          }
      }
  });
}

}  // namespace gradeq
