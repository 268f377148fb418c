// Each op of every backend (cpu; cuda where a device is present, skipped
// with the reason otherwise) against the float64 reference op: the op
// table (harness/core/op_table.h) in every dtype, and the conventions the table
// does not show — explicit zeroing, finiteness, stores that round, shape
// errors, empty dimensions, multi-tensor launches with vector bodies and
// scalar tails, mixed-dtype inputs, Kahan compensation, determinism.
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "harness/core/training_loop.h"
#include "harness/core/backends.h"
#include "harness/core/op_table.h"
#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/forwarding_backend.h"
#include "reference/attention.h"
#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/optimizers.h"
#include "support.h"

namespace gradeq::test {
namespace {

using ref::lift;

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    BackendOrReason b = backend_or_reason(GetParam());
    if (!b.backend) GTEST_SKIP() << b.reason;
    backend = std::move(b.backend);
  }

  std::unique_ptr<Backend> backend;
  std::mt19937_64 rng{99};

  Tensor put(const Matrix<double>& m, DType t = DType::f32) {
    Tensor x = backend->allocate(m.rows(), m.cols(), t);
    std::vector<float> v(m.data(), m.data() + m.size());
    backend->upload(x, v);
    return x;
  }
  Tensor empty(long rows, long cols, DType t = DType::f32) {
    Tensor x = backend->allocate(rows, cols, t);
    backend->fill(x, std::numeric_limits<float>::quiet_NaN());  // must be overwritten
    return x;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.size()));
    backend->download(t, v);
    return v;
  }
  void expect_within_bound(const Tensor& actual, const Matrix<Bounded>& expected, const std::string& what) {
    const std::vector<float> a = get(actual);
    ASSERT_EQ(static_cast<long>(a.size()), expected.size()) << what;
    double nonzero = 0.0;
    for (long i = 0; i < expected.size(); ++i) {
      const Bounded& e = expected.data()[i];
      ASSERT_TRUE(std::isfinite(a[i])) << what << "[" << i << "]";
      const double bound = kernel_bound(e.kernel_bound, e.reference);
      EXPECT_LE(std::abs(a[i] - e.value), bound) << what << "[" << i << "] kernel " << a[i] << " reference " << e.value;
      nonzero += std::abs(e.value);
    }
    EXPECT_GT(nonzero, 0.0) << what << ": an all-zero expectation proves nothing";
  }
};

TEST_P(BackendOps, AllFiniteFindsInfinity) {
  Tensor t = put(random_matrix(rng, 3, 5));
  const Tensor list[] = {t};
  EXPECT_TRUE(backend->all_finite(list));
  backend->fill(t, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(backend->all_finite(list));
  backend->fill(t, std::numeric_limits<float>::quiet_NaN());
  EXPECT_FALSE(backend->all_finite(list));
}

TEST_P(BackendOps, ZeroIsExplicit) {
  Tensor t = put(random_matrix(rng, 3, 4));
  const Tensor list[] = {t};
  backend->zero(list);
  for (float v : get(t)) EXPECT_EQ(v, 0.0f);
}

// Kahan-compensated accumulation into a bfloat16 buffer keeps what plain
// bfloat16 accumulation loses: 256 + 1 + 1 + ... stays 256 without it.
TEST_P(BackendOps, CompensatedAccumulationRecoversLowBits) {
  Tensor plain = put(Matrix<double>::Constant(1, 1, 256.0), DType::bf16);
  Tensor kahan = put(Matrix<double>::Constant(1, 1, 256.0), DType::bf16);
  Tensor comp = put(Matrix<double>::Zero(1, 1), DType::bf16);
  Tensor one = put(Matrix<double>::Constant(1, 1, 1.0));
  const Tensor p[] = {plain}, k[] = {kahan}, c[] = {comp}, o[] = {one};
  for (int i = 0; i < 64; ++i) {
    backend->accumulate(p, o, {});
    backend->accumulate(k, o, c);
  }
  EXPECT_EQ(get(plain)[0], 256.0f);                      // every +1 rounds away
  EXPECT_EQ(get(kahan)[0] - get(comp)[0], 320.0f);       // value + correction is exact
}

TEST_P(BackendOps, StoresRoundToTheTensorDtype) {
  Tensor t = backend->allocate(1, 1, DType::bf16);
  const float v[] = {1.0f + 0x1p-10f};
  backend->upload(t, v);
  EXPECT_EQ(get(t)[0], 1.0f);
  EXPECT_EQ(backend->peak_bytes(), 2u);
}

TEST_P(BackendOps, ShapeMismatchIsAnError) {
  Tensor x = empty(2, 3), w = empty(4, 5), b = empty(1, 4), y = empty(2, 4);
  EXPECT_THROW(backend->linear_forward(x, w, b, y), BackendError);
  // A compensation buffer must have the accumulation buffer's dtype.
  const Tensor dst[] = {put(random_matrix(rng, 2, 2), DType::bf16)}, src[] = {put(random_matrix(rng, 2, 2))},
               comp[] = {put(Matrix<double>::Zero(2, 2))};
  EXPECT_THROW(backend->accumulate(dst, src, comp), BackendError);
}

// Zero-width layers: y = b, nothing to add to an empty dW, db still
// accumulates; the GEMMs are not called with empty dimensions.
TEST_P(BackendOps, EmptyInnerDimensionsFollowTheConventions) {
  const auto b0 = random_matrix(rng, 1, 2), dy = random_matrix(rng, 3, 2);
  Tensor x = backend->allocate(3, 0, DType::f32), w = backend->allocate(2, 0, DType::f32), b = put(b0),
         y = empty(3, 2), dw = backend->allocate(2, 0, DType::f32), db = put(Matrix<double>::Zero(1, 2)),
         tdy = put(dy), dx = backend->allocate(3, 0, DType::f32);
  backend->linear_forward(x, w, b, y);
  const std::vector<float> yv = get(y);
  for (long i = 0; i < 3; ++i)
    for (long o = 0; o < 2; ++o) EXPECT_EQ(yv[static_cast<std::size_t>(i * 2 + o)], static_cast<float>(b0(0, o)));
  backend->linear_backward_data(tdy, w, dx);
  backend->linear_backward_weight(tdy, x, dw, db);
  const auto g = ref::linear_backward(lift<Bounded>(random_matrix(rng, 3, 0)), ref::zeros<Bounded>(2, 0),
                                      lift<Bounded>(dy));
  expect_within_bound(db, g.db, "db += sum dy");
}

// One launch over many tensors: sizes below, at and above a chunk, odd
// tails, and views that start one element in (not 16-byte aligned), so
// both the vector body and the scalar paths run.
TEST_P(BackendOps, ManyTensorsInOneLaunch) {
  const std::vector<long> sizes = {1, 3, 4, 7, 4096, 4097, 10001};
  std::vector<Tensor> dst, src;
  std::vector<Matrix<double>> a, b;
  for (long n : sizes) {
    a.push_back(random_matrix(rng, 1, n + 1));
    b.push_back(random_matrix(rng, 1, n + 1));
    Tensor da = put(a.back()), sb = put(b.back());
    const bool unaligned = n % 2 == 1;  // view from element 1 on
    auto view = [&](const Tensor& t) {
      return Tensor{static_cast<float*>(t.data) + (unaligned ? 1 : 0), 1, n, DType::f32};
    };
    dst.push_back(view(da));
    src.push_back(view(sb));
  }
  backend->accumulate(dst, src, {});
  backend->scale(dst, 0.5f);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const long n = sizes[t], off = n % 2 == 1 ? 1 : 0;
    const Matrix<double> ea = a[t].middleCols(off, n), eb = b[t].middleCols(off, n);
    expect_within_bound(dst[t], Matrix<Bounded>((lift<Bounded>(ea) + lift<Bounded>(eb)) * Bounded(0.5)),
                        "(a + b) / 2, n = " + std::to_string(n));
  }
  // The global norm over all of them, and zeroing.
  std::vector<double> all;
  for (const Tensor& t : dst)
    for (float v : get(t)) all.push_back(v);
  const auto sq = ref::reduce<Bounded>(static_cast<long>(all.size()),
                                       [&](long i) { return Bounded(all[static_cast<std::size_t>(i)]) * Bounded(all[static_cast<std::size_t>(i)]); });
  const Bounded norm = ref::sqrt(sq);
  EXPECT_LE(std::abs(backend->global_norm(dst) - norm.value), kernel_bound(norm.kernel_bound, norm.reference));
  backend->zero(dst);
  for (const Tensor& t : dst)
    for (float v : get(t)) ASSERT_EQ(v, 0.0f);
}

// bfloat16 and float16 inputs: the weight-gradient GEMM and the
// accumulate add them into float32 buffers with float32 arithmetic (the
// inputs are exact in their dtype, so the float32 bound applies).
TEST_P(BackendOps, HalfPrecisionInputsIntoFloat32Buffers) {
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    auto rounded = [&](Matrix<double> m) {
      for (long i = 0; i < m.size(); ++i) m.data()[i] = round_to(static_cast<float>(m.data()[i]), t);
      return m;
    };
    const auto x = rounded(random_matrix(rng, 17, 6)), dy = rounded(random_matrix(rng, 17, 3));
    const auto dw0 = random_matrix(rng, 3, 6), db0 = random_matrix(rng, 1, 3);
    Tensor tx = put(x, t), tdy = put(dy, t), tdw = put(dw0), tdb = put(db0);
    backend->linear_backward_weight(tdy, tx, tdw, tdb);
    const auto g = ref::linear_backward(lift<Bounded>(x), ref::zeros<Bounded>(3, 6), lift<Bounded>(dy));
    expect_within_bound(tdw, Matrix<Bounded>(lift<Bounded>(dw0) + g.dw), "dw += dy^T x");
    expect_within_bound(tdb, Matrix<Bounded>(lift<Bounded>(db0) + g.db), "db += sum dy");
    Tensor acc = put(dw0);
    const Tensor dst[] = {acc}, src[] = {put(rounded(random_matrix(rng, 3, 6)), t)};
    const std::vector<float> addend = get(src[0]);
    backend->accumulate(dst, src, {});
    Matrix<double> e = dw0;
    for (long i = 0; i < e.size(); ++i) e.data()[i] += addend[static_cast<std::size_t>(i)];
    Matrix<Bounded> expected = lift<Bounded>(dw0);
    for (long i = 0; i < e.size(); ++i) expected.data()[i] = expected.data()[i] + Bounded(addend[static_cast<std::size_t>(i)]);
    expect_within_bound(acc, expected, "float32 += half");
  }
}

// The weight gradient from inputs of every compute dtype into a buffer of
// every dtype, beta = 1: cuBLAS takes some pairs directly (bf16 into bf16 or
// float32) and not others (float32 into bf16, bf16 into float16), which go
// through float32 scratch; all must match the reference, which rounds the
// sum once into the buffer's dtype (deterministic reduction bounds).
TEST_P(BackendOps, WeightGradientFromEveryComputeDtypeIntoEveryBuffer) {
  for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
    for (DType buffer : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(compute)) + " into " + std::string(dtype_name(buffer)));
      const ref::ScopedRoundingModel scope(
          rounding_model_for({compute, buffer}, ErrorModel{ref::ReductionBound::deterministic, 6.0}));
      auto rounded = [&](Matrix<double> m, DType t) {
        for (long i = 0; i < m.size(); ++i) m.data()[i] = round_to(static_cast<float>(m.data()[i]), t);
        return m;
      };
      const auto x = rounded(random_matrix(rng, 33, 5), compute), dy = rounded(random_matrix(rng, 33, 4), compute);
      const auto dw0 = rounded(random_matrix(rng, 4, 5), buffer), db0 = rounded(random_matrix(rng, 1, 4), buffer);
      Tensor tx = put(x, compute), tdy = put(dy, compute), tdw = put(dw0, buffer), tdb = put(db0, buffer);
      backend->linear_backward_weight(tdy, tx, tdw, tdb);
      const auto g = ref::linear_backward(lift<Bounded>(x), ref::zeros<Bounded>(4, 5), lift<Bounded>(dy));
      const auto stored = [](const Matrix<Bounded>& m) {
        return Matrix<Bounded>(m.unaryExpr([](const Bounded& v) { return ref::store(v, ref::Storage::accumulate); }));
      };
      expect_within_bound(tdw, stored(lift<Bounded>(dw0) + g.dw), "dw += dy^T x");
      expect_within_bound(tdb, stored(lift<Bounded>(db0) + g.db), "db += sum dy");
    }
  }
}

// Deterministic mode: the bias gradient of a tall batch, twice from the
// same buffer, is bitwise identical; with the mode off it may differ in
// the last bits but stays within the same bound.
TEST_P(BackendOps, DeterministicModeRepeatsBitwise) {
  const long rows = 5000;
  const auto x = random_matrix(rng, rows, 2), dy = random_matrix(rng, rows, 3);
  const auto dw0 = random_matrix(rng, 3, 2), db0 = random_matrix(rng, 1, 3);
  const auto g = ref::linear_backward(lift<Bounded>(x), ref::zeros<Bounded>(3, 2), lift<Bounded>(dy));
  Tensor tx = put(x), tdy = put(dy);
  for (bool deterministic : {true, false}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "non-deterministic");
    backend->set_deterministic(deterministic);
    std::vector<std::vector<float>> results;
    for (int run = 0; run < 2; ++run) {
      Tensor tdw = put(dw0), tdb = put(db0);
      backend->linear_backward_weight(tdy, tx, tdw, tdb);
      expect_within_bound(tdb, Matrix<Bounded>(lift<Bounded>(db0) + g.db), "db += sum dy");
      expect_within_bound(tdw, Matrix<Bounded>(lift<Bounded>(dw0) + g.dw), "dw += dy^T x");
      results.push_back(get(tdb));
    }
    if (deterministic) {
      EXPECT_EQ(results[0], results[1]);
    }
  }
  backend->set_deterministic(true);
  EXPECT_TRUE(backend->deterministic());
}

// Attention's backward rerun: deterministic mode (the default; on CUDA dQ
// goes into one zeroed slice per key block, summed in slice order) gives
// bitwise the same dQKV over 100 runs of the same inputs. With the mode off
// (CUDA's dQ summed by atomicAdd across key blocks) the last bits may move
// between runs but the result stays within the same bound. 257 positions
// make several key blocks for any tile size, and head_dim 72 is the width
// at which a dQ buffer zeroed to a multiple of 32 columns leaves a stale
// tail (docs/BUGS.md B38). The second sample ends in padding.
TEST_P(BackendOps, AttentionDeterministicModeRepeatsBitwiseOver100Runs) {
  const long positions = 257, samples = 2, heads = 2, head_dim = 72, width = heads * head_dim;
  const long rows = samples * positions;
  AttentionConfig c;
  c.heads = heads;
  c.positions = positions;
  c.causal = true;
  c.padding_idx = 0;
  Matrix<double> ids = Matrix<double>::Constant(rows, 1, 1.0);
  for (long t = positions - positions / 3; t < positions; ++t) ids(positions + t, 0) = 0.0;
  const auto qkv = random_matrix(rng, rows, 3 * width, 2.0 / std::sqrt(std::sqrt(static_cast<double>(head_dim))));
  const auto dout = random_matrix(rng, rows, width);
  const ref::AttentionShape shape{heads, positions, true, 0};
  Matrix<Bounded> bounded_ids(rows, 1);
  for (long r = 0; r < rows; ++r) bounded_ids(r, 0) = Bounded(ids(r, 0));
  const Matrix<Bounded> expected = ref::attention_backward(shape, lift<Bounded>(qkv), &bounded_ids, lift<Bounded>(dout));
  Tensor tqkv = put(qkv), tids = put(ids), tdout = put(dout);
  Tensor o = empty(rows, width), row_max = empty(1, rows * heads), row_sum = empty(1, rows * heads);
  backend->attention_forward(c, tqkv, tids, o, row_max, row_sum);
  for (bool deterministic : {true, false}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "non-deterministic");
    backend->set_deterministic(deterministic);
    const int runs = deterministic ? 100 : 2;
    std::vector<float> first;
    for (int run = 0; run < runs; ++run) {
      Tensor dqkv = empty(rows, 3 * width);
      backend->attention_backward(c, tqkv, tids, o, tdout, row_max, row_sum, dqkv);
      if (run == 0) {
        expect_within_bound(dqkv, expected, "dqkv");
        first = get(dqkv);
      } else if (deterministic) {
        ASSERT_EQ(get(dqkv), first) << "run " << run << " differs from run 0";
      } else {
        expect_within_bound(dqkv, expected, "dqkv, run " + std::to_string(run));
      }
    }
  }
  backend->set_deterministic(true);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

// Every entry of the op table (harness/core/op_table.h) on every backend, at
// each of its test sizes and in every compute dtype: within the bound the
// error model gives the op, never NaN, never an all-zero expectation.
class OpTable : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(OpTable, WithinItsBound) {
  const auto& [backend_name, op_name] = GetParam();
  GRADEQ_BACKEND_OR_SKIP(backend, backend_name);
  const OpSpec& op = find_op(op_name);
  std::uint64_t seed = 1;
  int ratios = 0;
  for (const OpSize& size : op.test_sizes)
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const OpVerdict v = op.prepare(*backend, size, dtype, seed++)->verify();
      EXPECT_TRUE(v.passed) << op.name << " [" << size.rows << ", " << size.in << ", " << size.out << "] "
                            << dtype_name(dtype) << ": " << v.message;
      EXPECT_LE(v.worst_ratio, 1.0);
      // FlashAttention's ratio (a diagnostic): the attention entries report
      // it (but where the plain form is exact: one position, p = 1), and on
      // the host, whose kernel is the plain form itself, it is 1.
      if (v.natural_order_ratio) {
        ++ratios;
        if (backend_name == "cpu") {
          EXPECT_EQ(*v.natural_order_ratio, 1.0) << op.name;
        }
        std::printf("%s [%ld, %ld, %ld] %s: err/bound %.3g, kernel error / natural order's %.3g\n", op.name.c_str(),
                    size.rows, size.in, size.out, std::string(dtype_name(dtype)).c_str(), v.worst_ratio, *v.natural_order_ratio);
      }
    }
  EXPECT_EQ(ratios > 0, op.name.find("attention") != std::string::npos) << op.name << ": " << ratios << " ratios";
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const OpSpec& op : op_table()) names.push_back(op.name);
  return names;
}

// A host backend that records which ops of kernels/backend_ops.def it is
// asked to run while `recording` is on.
class RecordingBackend : public ForwardingBackend {
 public:
  explicit RecordingBackend(Backend& inner) : ForwardingBackend(inner) {}
  bool recording = false;
  std::set<std::string> called;
#define GRADEQ_BACKEND_OP(R, NAME, PARAMETERS, ARGUMENTS) \
  R NAME PARAMETERS override {                              \
    if (recording) called.insert(#NAME);                   \
    return ForwardingBackend::NAME ARGUMENTS;              \
  }
#include "kernels/backend_ops.def"
#undef GRADEQ_BACKEND_OP
};

// The ops of kernels/backend_ops.def that no entry of `table` runs (its
// run(), not the preparation or the comparison around it).
std::vector<std::string> ops_not_run(const std::vector<OpSpec>& table) {
  CpuBackend cpu;
  RecordingBackend recorder(cpu);
  for (const OpSpec& op : table) {
    const std::unique_ptr<PreparedOp> prepared = op.prepare(recorder, op.test_sizes.front(), DType::f32, 1);
    recorder.recording = true;
    prepared->run();
    recorder.recording = false;
  }
  std::vector<std::string> missing;
#define GRADEQ_BACKEND_OP(R, NAME, PARAMETERS, ARGUMENTS) \
  if (!recorder.called.contains(#NAME)) missing.push_back(#NAME);
#include "kernels/backend_ops.def"
#undef GRADEQ_BACKEND_OP
  return missing;
}

// A new Backend op cannot go untested: the op table runs every one.
TEST(OpTableCoverage, RunsEveryBackendOp) {
  EXPECT_EQ(ops_not_run(op_table()), std::vector<std::string>{});
  // The check itself: a table without its copy_columns entry misses that op.
  std::vector<OpSpec> without;
  for (const OpSpec& op : op_table())
    if (op.name != "copy_columns") without.push_back(op);
  EXPECT_EQ(ops_not_run(without), std::vector<std::string>{"copy_columns"});
}

// The entries of the data-movement ops catch the bug they exist for: a
// multi-element launch that drops its scalar tail (the elements past the
// last multiple of 8).
Tensor body_of(const Tensor& t) {
  const long n = t.size() - t.size() % 8;
  return Tensor{t.data, n > 0 ? 1 : 0, n, t.dtype};
}

class TaillessBackend : public ForwardingBackend {
 public:
  explicit TaillessBackend(Backend& inner) : ForwardingBackend(inner) {}
  void fill(const Tensor& t, float value) override { ForwardingBackend::fill(body_of(t), value); }
  void convert(const Tensor& src, const Tensor& dst) override {
    ForwardingBackend::convert(body_of(src), body_of(dst));
  }
  bool all_finite(std::span<const Tensor> ts) override {
    std::vector<Tensor> bodies;
    for (const Tensor& t : ts) bodies.push_back(body_of(t));
    return ForwardingBackend::all_finite(bodies);
  }
};

TEST(OpTable, DataMovementEntriesCatchTheirBugs) {
  CpuBackend cpu;
  TaillessBackend tailless(cpu);
  for (const char* name : {"fill", "convert", "all_finite"}) {
    const OpSpec& op = find_op(name);
    for (const OpSize& size : op.test_sizes) {
      EXPECT_TRUE(op.prepare(cpu, size, DType::bf16, 1)->verify().passed) << name;
      // fill and convert write [rows, in]; all_finite's infinity is the last
      // element of a list's last tensor, of rows x in + out - 1 elements.
      const long last = std::string(name) == "all_finite" ? size.rows * size.in + size.out - 1 : size.rows * size.in;
      if (last % 8 != 0) {
        EXPECT_FALSE(op.prepare(tailless, size, DType::bf16, 1)->verify().passed) << name;
      }
    }
  }
}

// The pooling and up-sampling entries catch their kernels' bugs: an
// average pool's backward that gives each input dy once where overlapping
// windows read it several times (as if stride were kernel), a pool
// dividing by its stride's area instead of its window's, and an
// up-sampling backward that keeps one pixel of each 2x2 block's four.
class ResampleBugBackend : public ForwardingBackend {
 public:
  enum class Bug { one_window, stride_area, one_of_four };
  ResampleBugBackend(Backend& inner, Bug bug) : ForwardingBackend(inner), bug_(bug) {}
  void avgpool_forward(const PoolConfig& c, const Tensor& x, const Tensor& y) override {
    ForwardingBackend::avgpool_forward(c, x, y);
    if (bug_ != Bug::stride_area || c.count() == c.stride_h * c.stride_w) return;
    std::vector<float> v(static_cast<std::size_t>(y.size()));
    download(y, v);
    for (float& e : v) e = e * static_cast<float>(c.count()) / static_cast<float>(c.stride_h * c.stride_w);
    upload(y, v);
  }
  void avgpool_backward(const PoolConfig& c, const Tensor& dy, const Tensor& dx) override {
    if (bug_ != Bug::one_window) return ForwardingBackend::avgpool_backward(c, dy, dx);
    std::vector<float> g(static_cast<std::size_t>(dy.size())), out(static_cast<std::size_t>(dx.size()), 0.0f);
    download(dy, g);
    const long ho = c.out_height(), wo = c.out_width();
    for (long n = 0; n < dx.rows; ++n)
      for (long ch = 0; ch < c.channels; ++ch)
        for (long oy = 0; oy < ho; ++oy)
          for (long ox = 0; ox < wo; ++ox)
            for (long ky = 0; ky < c.kernel_h; ++ky)
              for (long kx = 0; kx < c.kernel_w; ++kx)
                out[static_cast<std::size_t>(n * c.in_size() + (ch * c.height + oy * c.stride_h + ky) * c.width +
                                             ox * c.stride_w + kx)] =
                    g[static_cast<std::size_t>(n * c.out_size() + (ch * ho + oy) * wo + ox)] / static_cast<float>(c.count());
    upload(dx, out);
  }
  void upsample_backward(long channels, long height, long width, const Tensor& dy, const Tensor& dx) override {
    if (bug_ != Bug::one_of_four) return ForwardingBackend::upsample_backward(channels, height, width, dy, dx);
    std::vector<float> g(static_cast<std::size_t>(dy.size())), out(static_cast<std::size_t>(dx.size()));
    download(dy, g);
    const long plane = height * width;
    for (long n = 0; n < dx.rows; ++n)
      for (long ch = 0; ch < channels; ++ch)
        for (long i = 0; i < plane; ++i)
          out[static_cast<std::size_t>(n * dx.cols + ch * plane + i)] =
              g[static_cast<std::size_t>(n * dy.cols + ch * 4 * plane + 2 * (i / width) * 2 * width + 2 * (i % width))];
    upload(dx, out);
  }

 private:
  Bug bug_;
};

TEST(OpTable, PoolAndUpsampleEntriesCatchTheirBugs) {
  CpuBackend cpu;
  const OpSpec& pool = find_op("avgpool");
  const OpSpec& upsample = find_op("upsample");
  for (auto [bug, op, failing] :
       {std::tuple{ResampleBugBackend::Bug::one_window, &pool, std::set<long>{1}},           // overlapping windows
        std::tuple{ResampleBugBackend::Bug::stride_area, &pool, std::set<long>{1}},          // stride 1, window 3x3
        std::tuple{ResampleBugBackend::Bug::one_of_four, &upsample, std::set<long>{0, 1, 2}}}) {
    ResampleBugBackend broken(cpu, bug);
    for (const OpSize& size : op->test_sizes) {
      EXPECT_TRUE(op->prepare(cpu, size, DType::f32, 3)->verify().passed) << op->name;
      const long key = op == &pool ? size.in : static_cast<long>(&size - op->test_sizes.data());
      EXPECT_EQ(op->prepare(broken, size, DType::f32, 3)->verify().passed, !failing.count(key))
          << op->name << " bug " << static_cast<int>(bug) << " at size " << key;
    }
  }
}

// The embedding entries catch the backward's real bugs: the padding row
// receiving gradient (PyTorch #26302), a lost update on repeated tokens
// (a non-atomic +=: here each token keeps only its last row), and dw
// overwritten instead of accumulated.
class EmbeddingBugBackend : public ForwardingBackend {
 public:
  enum class Bug { padding_row_updated, lost_updates, overwrites };
  EmbeddingBugBackend(Backend& inner, Bug bug) : ForwardingBackend(inner), bug_(bug) {}
  void embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) override {
    if (bug_ == Bug::padding_row_updated) return ForwardingBackend::embedding_backward(ids, dy, -1, dw);
    std::vector<float> id(static_cast<std::size_t>(ids.size())), g(static_cast<std::size_t>(dy.size())),
        out(static_cast<std::size_t>(dw.size()));
    download(ids, id);
    download(dy, g);
    download(dw, out);
    std::vector<bool> written(static_cast<std::size_t>(dw.rows), false);
    for (long r = 0; r < dy.rows; ++r) {
      const auto v = static_cast<long>(id[static_cast<std::size_t>(r)]);
      if (v == padding_idx) continue;
      for (long c = 0; c < dy.cols; ++c) {
        float& o = out[static_cast<std::size_t>(v * dw.cols + c)];
        const float d = g[static_cast<std::size_t>(r * dy.cols + c)];
        o = bug_ == Bug::overwrites && !written[static_cast<std::size_t>(v)] ? d : o + d;
      }
      written[static_cast<std::size_t>(v)] = true;
    }
    if (bug_ == Bug::lost_updates) {  // each token keeps its first value plus only its last row
      download(dw, out);
      std::vector<long> last(static_cast<std::size_t>(dw.rows), -1);
      for (long r = 0; r < dy.rows; ++r) last[static_cast<std::size_t>(id[static_cast<std::size_t>(r)])] = r;
      for (long v = 0; v < dw.rows; ++v)
        if (v != padding_idx && last[static_cast<std::size_t>(v)] >= 0)
          for (long c = 0; c < dy.cols; ++c)
            out[static_cast<std::size_t>(v * dw.cols + c)] += g[static_cast<std::size_t>(last[static_cast<std::size_t>(v)] * dy.cols + c)];
    }
    upload(dw, out);
  }

 private:
  Bug bug_;
};

TEST(OpTable, EmbeddingBackwardEntryCatchesItsBugs) {
  CpuBackend cpu;
  const OpSpec& op = find_op("embedding_backward");
  const OpSize size{600, 5, 3};  // token 0 repeats hundreds of times; token 1 is padding
  EXPECT_TRUE(op.prepare(cpu, size, DType::f32, 1)->verify().passed);
  for (auto bug : {EmbeddingBugBackend::Bug::padding_row_updated, EmbeddingBugBackend::Bug::lost_updates,
                   EmbeddingBugBackend::Bug::overwrites}) {
    EmbeddingBugBackend buggy(cpu, bug);
    EXPECT_FALSE(op.prepare(buggy, size, DType::f32, 1)->verify().passed) << static_cast<int>(bug);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OpTable, ::testing::Combine(::testing::Values("cpu", "cuda"), ::testing::ValuesIn(op_names())),
                         [](const auto& info) { return std::get<1>(info.param) + "_" + std::get<0>(info.param); });
// The adversarial order changes every product and the long sums: every op.
INSTANTIATE_TEST_SUITE_P(Adversarial, OpTable,
                         ::testing::Combine(::testing::Values("cpu-adversarial"), ::testing::ValuesIn(op_names())),
                         [](const auto& info) { return std::get<1>(info.param) + "_cpu_adversarial"; });
// The direct-form convolutions differ from "cpu" and "cuda" in conv2d only.
INSTANTIATE_TEST_SUITE_P(DirectConv, OpTable,
                         ::testing::Combine(::testing::Values("cpu-direct", "cuda-direct"), ::testing::Values("conv2d")),
                         [](const auto& info) {
                           const std::string backend = std::get<0>(info.param);
                           return std::get<1>(info.param) + "_" + backend.substr(0, backend.find('-')) + "_direct";
                         });

}  // namespace
}  // namespace gradeq::test

namespace gradeq::test {
namespace {

// cpu-direct is a different kernel, not a second name for cpu: its sums
// run in other orders, so its float32 results differ from im2col's
// somewhere (both within the bound: OpTable above). The input gradient's
// order differs by construction: im2col adds, for each tap, a GEMM's sum
// over the outputs, then the taps; the direct form makes one sum over
// (o, ky, kx). (Whether the forward's and the weight gradient's orders
// differ depends on the GEMM's blocking, which differs between builds: a
// sanitized build sums the weight gradient in the direct form's order.)
TEST(DirectConv, SumsInAnotherOrderThanIm2col) {
  Conv2dConfig c;
  c.in_channels = 8, c.height = 9, c.width = 9, c.out_channels = 6, c.kernel = 3, c.padding = 1, c.stride = 2;
  const long samples = 3;
  std::mt19937_64 rng{7};
  std::normal_distribution<float> normal;
  auto random = [&](long n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& e : v) e = normal(rng);
    return v;
  };
  const std::vector<float> x = random(samples * c.in_size()), w = random(c.out_channels * c.taps()),
                           dy = random(samples * c.out_size());
  struct Results {
    std::vector<float> y, dx, dw;
  };
  auto run = [&](CpuBackend& b) {
    auto put = [&](const std::vector<float>& v, long rows, long cols) {
      Tensor t = b.allocate(rows, cols, DType::f32);
      b.upload(t, v);
      return t;
    };
    const Tensor tx = put(x, samples, c.in_size()), tw = put(w, c.out_channels, c.taps()),
                 tdy = put(dy, samples, c.out_size());
    const Tensor ty = b.allocate(samples, c.out_size(), DType::f32), tdx = b.allocate(samples, c.in_size(), DType::f32);
    const Tensor tdw = put(std::vector<float>(w.size(), 0.0f), c.out_channels, c.taps());
    b.conv2d_forward(c, tx, tw, Tensor{}, ty);
    b.conv2d_backward_data(c, tdy, tw, tdx);
    b.conv2d_backward_weight(c, tdy, tx, tdw, Tensor{});
    Results r{std::vector<float>(static_cast<std::size_t>(ty.size())),
              std::vector<float>(static_cast<std::size_t>(tdx.size())), std::vector<float>(w.size())};
    b.download(ty, r.y);
    b.download(tdx, r.dx);
    b.download(tdw, r.dw);
    return r;
  };
  CpuBackend im2col, direct(ConvForm::direct);
  EXPECT_EQ(direct.name(), "cpu-direct");
  const Results a = run(im2col), d = run(direct);
  auto differences = [](const std::vector<float>& p, const std::vector<float>& q) {
    long n = 0;
    for (std::size_t i = 0; i < p.size(); ++i) n += p[i] != q[i];
    return n;
  };
  EXPECT_GT(differences(a.dx, d.dx), 0) << "the input gradient summed in the same order by both forms?";
  std::printf("elements that differ, im2col against direct: y %ld, dx %ld, dw %ld\n", differences(a.y, d.y),
              differences(a.dx, d.dx), differences(a.dw, d.dw));
}

}  // namespace
}  // namespace gradeq::test

namespace gradeq::test {
namespace {

// The adversarial order is a valid order: every term added once. Sums of
// whole numbers are exact in float32 (every partial sum below 2^24) in any
// order, so each must equal the exact sum.
TEST(AdversarialSum, AddsEveryTermOnce) {
  std::mt19937_64 rng{11};
  std::uniform_int_distribution<int> whole(-100, 100);  // every partial sum below 2^24
  EXPECT_EQ(cpu::adversarial_sum(nullptr, 0), 0.0f);
  for (long n : {1L, 2L, 3L, 63L, 64L, 65L, 2047L, 4096L, 8193L, 20000L, 140000L}) {
    std::vector<float> terms(static_cast<std::size_t>(n));
    long exact = 0;
    for (float& t : terms) {
      t = static_cast<float>(whole(rng));
      exact += static_cast<long>(t);
    }
    EXPECT_EQ(cpu::adversarial_sum(terms.data(), n), static_cast<float>(exact)) << "n = " << n;
  }
}

// The order itself, on four terms (two splits): sorted by sign, the
// non-negative terms 2^24, 1, 1 come first, so the first split adds 1 to
// 2^24 (lost to rounding, ties to even) and the second 1 to -2^24: the sum
// is 1. The loop's order (2^24 - 2^24 + 1 + 1) gives the exact 2.
TEST(AdversarialSum, SortsBySignThenSplits) {
  const float big = 16777216.0f;
  const std::vector<float> terms{big, -big, 1.0f, 1.0f};
  EXPECT_EQ(cpu::adversarial_sum(terms.data(), 4), 1.0f);
  cpu::Sum natural(SumOrder::natural), adversarial(SumOrder::adversarial);
  for (float t : terms) {
    natural.add(t);
    adversarial.add(t);
  }
  EXPECT_EQ(natural.result(), 2.0f);
  EXPECT_EQ(adversarial.result(), 1.0f);
}

// What the order is for: it uses more of a sum's error bound than the
// loop's order. Sums of 8,192 terms of either sign (normal, mean 0, as
// gradients' terms are), over 50 seeds: the mean error of the adversarial
// order against the natural order's, both against the float64 sum
// (measured: about 30 times larger).
TEST(AdversarialSum, ErrsMoreThanTheLoopOrder) {
  std::mt19937_64 rng{5};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const long n = 8192;
  double natural_error = 0.0, adversarial_error = 0.0;
  for (int seed = 0; seed < 50; ++seed) {
    std::vector<float> terms(static_cast<std::size_t>(n));
    double exact = 0.0;
    float natural = 0.0f;
    for (float& t : terms) {
      t = normal(rng);
      exact += t;
      natural += t;
    }
    natural_error += std::abs(natural - exact);
    adversarial_error += std::abs(cpu::adversarial_sum(terms.data(), n) - exact);
  }
  std::printf("mean error over 50 sums of 8192 terms: loop order %.3e, adversarial %.3e (%.1fx)\n", natural_error / 50,
              adversarial_error / 50, adversarial_error / natural_error);
  EXPECT_GT(adversarial_error, 10.0 * natural_error);
}

// The backend, not only the sum: a weight gradient over 8,192 rows
// (dW = dy^T x, db = column sums of dy) differs from the natural order's
// and errs more against float64 (the bound both must stay within: the op
// table above).
TEST(AdversarialSum, WeightGradientErrsMoreThanTheNaturalOrder) {
  const long rows = 8192, in = 16, out = 8;
  std::mt19937_64 rng{3};
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(rows * in)), dy(static_cast<std::size_t>(rows * out));
  for (float& v : x) v = normal(rng);
  for (float& v : dy) v = normal(rng);
  std::vector<double> exact(static_cast<std::size_t>(out * in), 0.0);
  for (long r = 0; r < rows; ++r)
    for (long o = 0; o < out; ++o)
      for (long i = 0; i < in; ++i)
        exact[static_cast<std::size_t>(o * in + i)] +=
            static_cast<double>(dy[static_cast<std::size_t>(r * out + o)]) * x[static_cast<std::size_t>(r * in + i)];
  auto run = [&](CpuBackend& b) {
    const Tensor tx = b.allocate(rows, in, DType::f32), tdy = b.allocate(rows, out, DType::f32),
                 tdw = b.allocate(out, in, DType::f32), tdb = b.allocate(1, out, DType::f32);
    b.upload(tx, x);
    b.upload(tdy, dy);
    b.upload(tdw, std::vector<float>(static_cast<std::size_t>(out * in), 0.0f));
    b.upload(tdb, std::vector<float>(static_cast<std::size_t>(out), 0.0f));
    b.linear_backward_weight(tdy, tx, tdw, tdb);
    std::vector<float> dw(static_cast<std::size_t>(out * in));
    b.download(tdw, dw);
    return dw;
  };
  CpuBackend natural, adversarial(ConvForm::im2col, SumOrder::adversarial);
  const std::vector<float> n = run(natural), a = run(adversarial);
  double natural_error = 0.0, adversarial_error = 0.0;
  long differ = 0;
  for (std::size_t k = 0; k < n.size(); ++k) {
    natural_error += std::abs(n[k] - exact[k]);
    adversarial_error += std::abs(a[k] - exact[k]);
    differ += n[k] != a[k];
  }
  std::printf("dW over 8192 rows: %ld of %zu elements differ; mean error natural %.3e, adversarial %.3e\n", differ,
              n.size(), natural_error / n.size(), adversarial_error / n.size());
  EXPECT_GT(differ, 0);
  EXPECT_GT(adversarial_error, 3.0 * natural_error);
}

TEST(AdversarialSum, BackendNameAndNoDirectForm) {
  EXPECT_EQ(CpuBackend(ConvForm::im2col, SumOrder::adversarial).name(), "cpu-adversarial");
  EXPECT_THROW(CpuBackend(ConvForm::direct, SumOrder::adversarial), std::invalid_argument);
}

}  // namespace
}  // namespace gradeq::test
