// bench_reference.cpp — Google Benchmark suite for the float64 reference
// with its error bounds: a GEMM with its bound (ref::matmul on Bounded
// operands, reference/matmul.h) and a whole accumulation window, each
// reported as a fraction of a plain float64 GEMM of the same shape measured
// in the same run (bench/ceiling.h), in wall-clock time. The GEMMs run
// twice, on one thread and on every core (GRADEQ_THREADS), each against the
// ceiling with as many threads: the float64 GEMM scales with the cores
// while part of the bound's work is per element, so a fraction across
// thread counts would say more about the machine than about the reference.
// The rate counted is that of the values alone (2 m n p per product), so
// the fraction says what the bounds cost.
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/ceiling.h"
#include "harness/core/ops/registry.h"
#include "reference/matmul.h"
#include "reference/procedure.h"

namespace {

using namespace gradeq;
using ref::Bounded;
using ref::Matrix;

Matrix<double> random_matrix(long rows, long cols, std::uint64_t seed) {
  const std::vector<float> v = bench::random_values(rows * cols, seed);
  Matrix<double> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = v[static_cast<std::size_t>(i)];
  return m;
}

// An activation as the reference holds one after a normalizer: every part
// of the error, and the row's statistics as shared sources.
Matrix<Bounded> activation(long rows, long cols, std::uint64_t seed) {
  const Matrix<double> v = random_matrix(rows, cols, seed), c = random_matrix(rows, cols, seed + 1);
  Matrix<Bounded> m(rows, cols);
  for (long r = 0; r < rows; ++r)
    for (long k = 0; k < cols; ++k) {
      const double x = v(r, k), mag = std::abs(x) + 0.1;
      ref::SharedTerms s;
      s.term[0] = {static_cast<std::uint64_t>(1 + r), c(r, k), 1e-7};
      s.term[1] = {static_cast<std::uint64_t>(1 + rows + r), x, 1e-7};
      s.count = 2;
      m(r, k) = Bounded::with_shared(x, {mag * 1e-7, mag * 2e-7, mag * 6e-8}, s, mag * 1e-16);
    }
  return m;
}

Matrix<Bounded> exact(const Matrix<double>& v) { return ref::lift<Bounded>(v); }

// The reference's thread limit for one benchmark: `threads` (0: every
// core, the default), and the label that pairs a rate with the ceiling
// measured under the same limit.
class ScopedThreads {
 public:
  explicit ScopedThreads(long threads) {
    if (threads > 0) ::setenv("GRADEQ_THREADS", std::to_string(threads).c_str(), 1);
    label_ = threads > 0 ? " on " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : "") : " on every core";
  }
  ~ScopedThreads() { ::unsetenv("GRADEQ_THREADS"); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  const std::string& label() const { return label_; }

 private:
  std::string label_;
};

double gemm_flops(long m, long n, long p) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(p);
}

// The ceiling: a plain float64 GEMM, Eigen, the reference's own panels.
void BM_CeilingGemmFloat64(benchmark::State& state) {
  const long m = state.range(0), n = state.range(1), p = state.range(2);
  const ScopedThreads threads(state.range(3));
  const Matrix<double> a = random_matrix(m, n, 1), b = random_matrix(n, p, 2);
  for (auto _ : state) {
    Matrix<double> c = ref::matmul(a, b);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(bench::shape_label(m, n, p) + threads.label());
  state.counters["f64_flops_per_s"] = benchmark::Counter(gemm_flops(m, n, p), benchmark::Counter::kIsIterationInvariantRate);
}

// An activation (every part, shared sources) times exact weights: a linear
// layer's forward product with its bound.
void BM_ReferenceGemmWithBound(benchmark::State& state) {
  const long m = state.range(0), n = state.range(1), p = state.range(2);
  const ScopedThreads threads(state.range(3));
  const Matrix<Bounded> a = activation(m, n, 3), b = exact(random_matrix(n, p, 4));
  for (auto _ : state) {
    Matrix<Bounded> c = ref::matmul(a, b);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(bench::shape_label(m, n, p) + threads.label());
  state.counters["f64_flops_per_s"] = benchmark::Counter(gemm_flops(m, n, p), benchmark::Counter::kIsIterationInvariantRate);
}

// One window of in(h)-linear(4h)-gelu-layernorm-linear(h), cross-entropy
// over h classes, 16 samples x 16 positions in 4 micro-batches, SGD: the
// reference with its bounds, forward, backward, accumulation and step. The
// rate is that of the window's GEMMs (three per linear layer); its ceiling
// is the float64 GEMM of the first layer's shape.
void BM_ReferenceWindow(benchmark::State& state) {
  const long h = state.range(0), positions = 16, samples = 16, rows = samples * positions;
  ref::ModelSpec spec;
  spec.input_features = h;
  spec.positions = positions;
  spec.layers = {layer_of("linear", 4 * h), layer_of("gelu"), layer_of("layernorm"),
                 layer_of("linear", h)};
  spec.loss = ref::LossKind::cross_entropy;
  ref::Tensors<double> params;
  std::uint64_t seed = 10;
  for (const ref::ParameterInfo& p : ref::parameter_layout(spec)) {
    Matrix<double> w = random_matrix(p.rows, p.cols, seed++) * (1.0 / std::sqrt(static_cast<double>(p.cols)));
    for (long i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>(w.data()[i]);
    params.push_back(w);
  }
  ref::Batch window;
  window.positions = positions;
  window.inputs = random_matrix(rows, h, 99);
  std::mt19937_64 rng(5);
  for (long r = 0; r < rows; ++r) window.classes.push_back(static_cast<int>(rng() % static_cast<std::uint64_t>(h)));
  const ref::ProcedureConfig config;
  const ref::TrainingState<Bounded> start = ref::initial_state<Bounded>(spec, config, params);
  for (auto _ : state) {
    ref::WindowResult<Bounded> r = ref::run_window(spec, config, start, window, {4, 4, 4, 4});
    benchmark::DoNotOptimize(r.after.params.data());
  }
  const double flops = 3.0 * (gemm_flops(rows, h, 4 * h) + gemm_flops(rows, 4 * h, h));
  state.SetLabel(bench::shape_label(rows, h, 4 * h) + " on every core");
  state.counters["f64_flops_per_s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// threads: 1, or 0 for every core. The window runs on every core only.
BENCHMARK(BM_CeilingGemmFloat64)
    ->ArgNames({"m", "n", "p", "threads"})
    ->ArgsProduct({{256}, {256}, {256}, {1, 0}})
    ->ArgsProduct({{1024}, {768}, {768}, {1, 0}})
    ->Args({256, 16, 64, 0})
    ->Args({256, 32, 128, 0})
    ->Args({256, 64, 256, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReferenceGemmWithBound)
    ->ArgNames({"m", "n", "p", "threads"})
    ->ArgsProduct({{256}, {256}, {256}, {1, 0}})
    ->ArgsProduct({{1024}, {768}, {768}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReferenceWindow)->ArgName("h")->Arg(16)->Arg(32)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return gradeq::bench::run_benchmarks(argc, argv); }
