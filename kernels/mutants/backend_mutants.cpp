// backend_mutants.cpp — kernel bugs as one-op ForwardingBackends; the
// comment above each names the bug and where it shipped (docs/BUGS.md).
#include "kernels/mutants/backend_mutants.h"

#include <algorithm>
#include <random>

#include "kernels/forwarding_backend.h"
#if GRADEQ_HAVE_CUDA
#include "kernels/mutants/racy_bias_cuda.h"
#endif

namespace gradeq {
namespace {

// B7 — overwrite instead of accumulate: the bias gradient is written, not
// added, so only the last micro-batch's survives (llm.c PR 163, PR 408;
// ggml PR 949).
class OverwritesBiasGradient : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    const Tensor bias[] = {db};
    inner_.zero(bias);  // dbias = ... instead of +=
    inner_.linear_backward_weight(dy, x, dw, db);
  }
};

// B16 — low-precision accumulation buffer: gradients accumulate in
// bfloat16 although the buffer is declared float32: 256 + 1 = 256
// (Megatron fork PR 146, issue 149; DeepSpeed 1800, PR 2847).
class BfloatAccumulation : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    inner_.linear_backward_weight(dy, x, dw, db);
    to_bfloat16({dw, db});
  }
  void norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                     const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx, const Tensor& dgamma,
                     const Tensor& dbeta) override {
    inner_.norm_backward(c, x, gamma, dy, saved_mean, saved_rstd, dx, dgamma, dbeta);
    to_bfloat16({dgamma, dbeta});
  }
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override {
    inner_.accumulate(dst, src, compensation);
    to_bfloat16(std::vector<Tensor>(dst.begin(), dst.end()));
  }

 private:
  // What a bfloat16 buffer would hold: round through a bfloat16 tensor.
  void to_bfloat16(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) {
      if (t.empty() || t.dtype != DType::f32) continue;
      Tensor narrow = inner_.allocate(t.rows, t.cols, DType::bf16);
      inner_.convert(t, narrow);
      inner_.convert(narrow, t);
      inner_.release(narrow);
    }
  }
};

// B28 — the multi-tensor accumulate skips the last tensor of its list:
// chunk bookkeeping off by one (the tensors are walked in chunks and the
// last chunk's count is taken one short). Staged accumulation adds each
// micro-batch's gradients with it, so one parameter never accumulates.
class AccumulateSkipsLastTensor : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override {
    if (dst.empty()) return;
    const std::size_t n = dst.size() - 1;
    inner_.accumulate(dst.first(n), src.first(n), compensation.empty() ? compensation : compensation.first(n));
  }
};

// B19 on a host backend — unsynchronized concurrent accumulate: the bias
// gradient is summed by several row slices, each adding its partial into
// db with a plain read-modify-write. A host backend has no concurrent
// blocks, so the race's outcome is modelled: each slice after the first
// reads, with probability 1/2, the value from before the previous slice's
// write, and that write is lost; the draws differ run to run, as a race's
// interleavings do. (The CUDA backend's B19 is the real racy kernel.)
class LostUpdateBiasGradient : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    Tensor discarded = inner_.allocate(db.rows, db.cols, DType::f32);
    inner_.fill(discarded, 0.0f);
    inner_.linear_backward_weight(dy, x, dw, discarded);  // dw as the kernel computes it
    inner_.release(discarded);
    std::vector<float> g(static_cast<std::size_t>(dy.size())), b(static_cast<std::size_t>(db.size()));
    inner_.download(dy, g);
    inner_.download(db, b);
    const long slices = std::min(dy.rows, 4L), per = slices > 0 ? (dy.rows + slices - 1) / slices : 0;
    std::bernoulli_distribution raced(0.5);
    for (long c = 0; c < dy.cols; ++c) {
      float current = b[static_cast<std::size_t>(c)], previous_read = current;
      for (long s = 0; s < slices; ++s) {
        float partial = 0.0f;
        for (long r = s * per; r < std::min(dy.rows, (s + 1) * per); ++r) partial += g[static_cast<std::size_t>(r * dy.cols + c)];
        const float read = s > 0 && raced(rng_) ? previous_read : current;
        previous_read = read;
        current = read + partial;
      }
      b[static_cast<std::size_t>(c)] = current;
    }
    inner_.upload(db, b);
  }

 private:
  std::mt19937 rng_{std::random_device{}()};
};

template <class B>
BackendWrapper backend_of() {
  return [](Backend& inner) { return std::make_unique<B>(inner); };
}

}  // namespace

std::vector<BackendMutant> single_process_backend_mutants() {
  return {
      {{"B7", "overwrite instead of accumulate: dbias = instead of +=", "llm.c PR 163, PR 408; ggml PR 949"},
       backend_of<OverwritesBiasGradient>()},
      {{"B16", "accumulation in bfloat16 behind a float32 buffer",
        "Megatron fork PR 146, issue 149; DeepSpeed 1800, PR 2847"},
       backend_of<BfloatAccumulation>()},
      {{"B28", "the multi-tensor accumulate skips the last tensor of its list (chunk count off by one)",
        "seen trying a user's own accumulate kernel through the installed package"},
       backend_of<AccumulateSkipsLastTensor>()},
  };
}

BackendMutant race_mutant_for(const Backend& backend) {
  BackendMutant race{{"B19", "unsynchronized concurrent accumulate: several slices += into one bias gradient",
                      "kernel-level race (docs/BUGS.md)"},
                     backend_of<LostUpdateBiasGradient>()};
#if GRADEQ_HAVE_CUDA
  if (backend.name() == "cuda") race.wrap = [](Backend&) { return make_racy_bias_cuda_backend(); };
#endif
  if (backend.name() != "cuda") race.bug += " (race outcome modelled on the host)";
  return race;
}

}  // namespace gradeq
