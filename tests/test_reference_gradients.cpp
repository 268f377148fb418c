// Every layer's and loss's float64 backward against central finite
// differences of its forward (docs/NUMERICS.md §6 for the tolerance).
#include <random>

#include "reference/layers.h"
#include "harness/core/ops/registry.h"
#include "reference/losses.h"
#include "reference/model.h"
#include "reference/procedure.h"
#include "support.h"

namespace gradeq::test {
namespace {

using ref::lift;

// sum(f(x) * probe): a scalar whose gradient is the vector-Jacobian product.
template <class T>
T probe_sum(const Matrix<T>& y, const Matrix<double>& probe) {
  return ref::reduce<T>(y.size(), [&](long i) { return y.data()[i] * T(probe.data()[i]); });
}

class ReferenceGradients : public ::testing::Test {
 protected:
  std::mt19937_64 rng{20261130};

  // Every parameter of a whole stack: forward, the loss `loss(output)`
  // (a generic lambda returning the summed loss), backward.
  template <class Loss, class Dy>
  void check_stack(const ref::ModelSpec& spec, const Matrix<double>& x, Loss&& loss, Dy&& loss_gradient) {
    const auto layout = ref::parameter_layout(spec);
    ref::Tensors<double> params;
    for (const auto& p : layout) params.push_back(random_matrix(rng, p.rows, p.cols, 0.7));
    const auto tape = ref::forward(ref::Model(spec), params, x);
    const auto grads = ref::backward(ref::Model(spec), params, tape, loss_gradient(tape.output()));
    for (std::size_t p = 0; p < layout.size(); ++p) {
      expect_gradient_matches(
          [&](const auto& v) {
            using T = typename std::decay_t<decltype(v)>::Scalar;
            ref::Tensors<T> ps;
            for (const auto& q : params) ps.push_back(lift<T>(q));
            ps[p] = v;
            return loss(ref::forward(ref::Model(spec), ps, lift<T>(x)).output());
          },
          params[p], grads[p], layout[p].name);
    }
  }
};

TEST_F(ReferenceGradients, Linear) {
  const auto x = random_matrix(rng, 5, 7), w = random_matrix(rng, 3, 7), b = random_matrix(rng, 1, 3);
  const auto probe = random_matrix(rng, 5, 3);
  const auto g = ref::linear_backward(x, w, probe);
  expect_gradient_matches([&](const auto& v) { return probe_sum(ref::linear_forward(v, lift<Bounded>(w), lift<Bounded>(b)), probe); }, x, g.dx, "dx");
  expect_gradient_matches([&](const auto& v) { return probe_sum(ref::linear_forward(lift<Bounded>(x), v, lift<Bounded>(b)), probe); }, w, g.dw, "dw");
  expect_gradient_matches([&](const auto& v) { return probe_sum(ref::linear_forward(lift<Bounded>(x), lift<Bounded>(w), v), probe); }, b, g.db, "db");
}

TEST_F(ReferenceGradients, Relu) {
  auto x = random_matrix(rng, 4, 9);
  // Keep away from the kink, where the derivative does not exist.
  for (long i = 0; i < x.size(); ++i) x.data()[i] += x.data()[i] > 0 ? 0.01 : -0.01;
  const auto probe = random_matrix(rng, 4, 9);
  expect_gradient_matches([&](const auto& v) { return probe_sum(ref::relu_forward(v), probe); }, x,
                          ref::relu_backward(x, probe), "dx");
}

TEST_F(ReferenceGradients, GeluTanh) {
  const auto x = random_matrix(rng, 4, 9, 2.0), probe = random_matrix(rng, 4, 9);
  expect_gradient_matches([&](const auto& v) { return probe_sum(ref::gelu_forward(v), probe); }, x,
                          ref::gelu_backward(x, probe), "dx");
}

TEST_F(ReferenceGradients, GeluErf) {
  const auto x = random_matrix(rng, 4, 9, 2.0), probe = random_matrix(rng, 4, 9);
  expect_gradient_matches([&](const auto& v) { return probe_sum(ref::gelu_erf_forward(v), probe); }, x,
                          ref::gelu_erf_backward(x, probe), "dx");
}

TEST_F(ReferenceGradients, LayerNorm) {
  const ref::NormShape shape{ref::NormKind::layer, 1, 1, 1e-5};
  const auto x = random_matrix(rng, 3, 8, 2.0), probe = random_matrix(rng, 3, 8);
  auto gamma = random_matrix(rng, 1, 8, 0.3), beta = random_matrix(rng, 1, 8, 0.3);
  gamma.array() += 1.0;
  const auto g = ref::norm_backward(shape, x, gamma, probe, ref::norm_statistics(shape, x));
  auto forward = [&](const auto& xv, const auto& gv, const auto& bv) {
    return probe_sum(ref::norm_forward(shape, xv, gv, bv, ref::norm_statistics(shape, xv)), probe);
  };
  expect_gradient_matches([&](const auto& v) { return forward(v, lift<Bounded>(gamma), lift<Bounded>(beta)); }, x, g.dx, "dx");
  expect_gradient_matches([&](const auto& v) { return forward(lift<Bounded>(x), v, lift<Bounded>(beta)); }, gamma, g.dgamma, "dgamma");
  expect_gradient_matches([&](const auto& v) { return forward(lift<Bounded>(x), lift<Bounded>(gamma), v); }, beta, g.dbeta, "dbeta");
}

// x, gamma and beta of every normalizer kind; GroupNorm and BatchNorm over
// samples of several positions, as the vision stand-in uses them.
void check_norm_gradients(std::mt19937_64& rng, const ref::NormShape& shape, long rows, long cols) {
  const auto x = random_matrix(rng, rows, cols, 2.0), probe = random_matrix(rng, rows, cols);
  auto gamma = random_matrix(rng, 1, cols, 0.3);
  gamma.array() += 1.0;
  const bool rms = shape.kind == ref::NormKind::rms;
  const Matrix<double> beta = rms ? Matrix<double>() : random_matrix(rng, 1, cols, 0.3);
  const auto g = ref::norm_backward(shape, x, gamma, probe, ref::norm_statistics(shape, x));
  auto forward = [&](const auto& xv, const auto& gv, const auto& bv) {
    return probe_sum(ref::norm_forward(shape, xv, gv, bv, ref::norm_statistics(shape, xv)), probe);
  };
  expect_gradient_matches([&](const auto& v) { return forward(v, lift<Bounded>(gamma), lift<Bounded>(beta)); }, x, g.dx, "dx");
  expect_gradient_matches([&](const auto& v) { return forward(lift<Bounded>(x), v, lift<Bounded>(beta)); }, gamma, g.dgamma, "dgamma");
  if (!rms)
    expect_gradient_matches([&](const auto& v) { return forward(lift<Bounded>(x), lift<Bounded>(gamma), v); }, beta, g.dbeta, "dbeta");
}

TEST_F(ReferenceGradients, BatchNorm) { check_norm_gradients(rng, {ref::NormKind::batch, 1, 3, 1e-5}, 12, 5); }
TEST_F(ReferenceGradients, GroupNorm) { check_norm_gradients(rng, {ref::NormKind::group, 3, 2, 1e-5}, 8, 6); }
TEST_F(ReferenceGradients, RmsNorm) { check_norm_gradients(rng, {ref::NormKind::rms, 1, 1, 1e-6}, 4, 7); }

TEST_F(ReferenceGradients, MeanSquaredError) {
  const auto pred = random_matrix(rng, 6, 3), target = random_matrix(rng, 6, 3);
  const auto out = ref::mse_loss(pred, target, 0.25);
  expect_gradient_matches(
      [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::Scalar;
        return ref::mse_loss(v, lift<T>(target), T(0.25)).loss_sum * T(0.25);
      },
      pred, out.dy, "dpred");
}

TEST_F(ReferenceGradients, CrossEntropyWithIgnoredRows) {
  const auto logits = random_matrix(rng, 7, 5, 2.0);
  const std::vector<int> classes = {0, 4, ref::kIgnoreClass, 2, 1, ref::kIgnoreClass, 3};
  const auto out = ref::cross_entropy_loss(logits, classes, 0.5);
  expect_gradient_matches(
      [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::Scalar;
        return ref::cross_entropy_loss(v, classes, T(0.5)).loss_sum * T(0.5);
      },
      logits, out.dy, "dlogits");
  for (long j = 0; j < 5; ++j) EXPECT_EQ(out.dy(2, j), 0.0) << "ignored rows get no gradient";
}

// The whole stack: forward, loss, backward of a model, every parameter.
TEST_F(ReferenceGradients, ModelStack) {
  ref::ModelSpec spec;
  spec.input_features = 4;
  spec.layers = {layer_of("linear", 6), layer_of("gelu"), layer_of("layernorm"), layer_of("linear", 3)};
  spec.loss = ref::LossKind::cross_entropy;
  const std::vector<int> classes = {0, 2, 1, ref::kIgnoreClass, 2};
  check_stack(
      spec, random_matrix(rng, 5, 4),
      [&](const auto& out) {
        using T = typename std::decay_t<decltype(out)>::Scalar;
        return ref::cross_entropy_loss(out, classes, T(1.0)).loss_sum;
      },
      [&](const Matrix<double>& out) { return ref::cross_entropy_loss(out, classes, 1.0).dy; });
}

// Graphs: residual blocks (pre-LN and post-activation, one nested) and a
// skip concatenation, every parameter against finite differences. The
// gradient of a block's input is the sum of the stream's and the branch's.
TEST_F(ReferenceGradients, ModelGraphWithResidualAndConcat) {
  ref::ModelSpec spec;
  spec.input_features = 4;
  spec.positions = 2;
  spec.layers = {layer_of("linear", 6),
                 combinator_of("residual", {layer_of("layernorm"), layer_of("linear", 5), layer_of("gelu"),
                                            combinator_of("residual", {layer_of("rmsnorm"), layer_of("linear", 5)}),
                                            layer_of("linear", 6)}),
                 layer_of("relu"),
                 combinator_of("concat", {layer_of("linear", 3), layer_of("groupnorm", 3)}),
                 layer_of("linear", 3)};
  spec.loss = ref::LossKind::cross_entropy;
  const std::vector<int> classes = {0, 2, 1, ref::kIgnoreClass, 2, 1};
  check_stack(
      spec, random_matrix(rng, 6, 4),
      [&](const auto& out) {
        using T = typename std::decay_t<decltype(out)>::Scalar;
        return ref::cross_entropy_loss(out, classes, T(1.0)).loss_sum;
      },
      [&](const Matrix<double>& out) { return ref::cross_entropy_loss(out, classes, 1.0).dy; });
}

// A token model: an embedding over token ids (repeated: token 2 three
// times, so its row's gradient is a sum of three), a residual block and a
// head, every parameter against finite differences. (With a padding token
// the padding row's gradient is 0 by definition, not the loss's slope: the
// op-table entry checks that.)
TEST_F(ReferenceGradients, TokenModelWithEmbedding) {
  ref::ModelSpec spec;
  spec.input_features = 7;  // the vocabulary
  spec.token_input = true;
  spec.positions = 3;
  spec.layers = {layer_of("embedding", 5),
                 combinator_of("residual", {layer_of("layernorm"), layer_of("linear", 6), layer_of("gelu"),
                                            layer_of("linear", 5)}),
                 layer_of("linear", 7)};
  spec.loss = ref::LossKind::cross_entropy;
  Matrix<double> ids(6, 1);
  ids << 2, 0, 2, 6, 2, 3;
  const std::vector<int> classes = {0, 2, 1, ref::kIgnoreClass, 5, 6};
  check_stack(
      spec, ids,
      [&](const auto& out) {
        using T = typename std::decay_t<decltype(out)>::Scalar;
        return ref::cross_entropy_loss(out, classes, T(1.0)).loss_sum;
      },
      [&](const Matrix<double>& out) { return ref::cross_entropy_loss(out, classes, 1.0).dy; });
}

// A language model: token and position embeddings, a residual block, the
// final LayerNorm and a head tied to the token embedding, under the
// shifted-label loss: the tied weight's gradient (the head's contribution
// and the embedding's, summed) against finite differences of the loss in
// that one parameter.
TEST_F(ReferenceGradients, LanguageModelWithTiedHeadAndShiftedLabels) {
  ref::ModelSpec spec;
  spec.input_features = 7;
  spec.token_input = true;
  spec.positions = 3;
  spec.layers = {layer_of("embedding", 5), layer_of("position_embedding", 4),
                 combinator_of("residual", {layer_of("layernorm"), layer_of("linear", 6), layer_of("gelu"),
                                            layer_of("linear", 5)}),
                 layer_of("layernorm"), layer_of("tied_head")};
  spec.loss = ref::LossKind::causal_lm;
  Matrix<double> ids(6, 1);
  ids << 2, 0, 2, 6, 2, 3;
  const std::vector<int> shifted = ref::shifted_labels({2, 0, 2, 6, 2, ref::kIgnoreClass}, spec.positions);
  ASSERT_EQ(ref::parameter_layout(spec).front().name, "layer0.weight");
  check_stack(
      spec, ids,
      [&](const auto& out) {
        using T = typename std::decay_t<decltype(out)>::Scalar;
        return ref::cross_entropy_loss(out, shifted, T(1.0)).loss_sum;
      },
      [&](const Matrix<double>& out) { return ref::cross_entropy_loss(out, shifted, 1.0).dy; });
}

// A stack with every normalizer, over samples of 3 positions.
TEST_F(ReferenceGradients, ModelStackWithEveryNormalizer) {
  ref::ModelSpec spec;
  spec.input_features = 4;
  spec.positions = 3;
  spec.layers = {layer_of("linear", 6), layer_of("batchnorm"), layer_of("gelu"),
                 layer_of("groupnorm", 2), layer_of("linear", 6), layer_of("rmsnorm"),
                 layer_of("linear", 2)};
  spec.loss = ref::LossKind::mse;
  const auto target = random_matrix(rng, 9, 2);
  check_stack(
      spec, random_matrix(rng, 9, 4),
      [&](const auto& out) {
        using T = typename std::decay_t<decltype(out)>::Scalar;
        return ref::mse_loss(out, lift<T>(target), T(1.0)).loss_sum;
      },
      [&](const Matrix<double>& out) { return ref::mse_loss(out, target, 1.0).dy; });
}

// A tape given away to backward is freed layer by layer as backward goes,
// and the gradients are the same, bit for bit, as from a tape that is kept
// (bounds included: every normalizer, both activations, layers of three
// widths).
TEST_F(ReferenceGradients, AGivenAwayTapeIsFreedAndGivesTheSameGradients) {
  ref::ModelSpec spec;
  spec.input_features = 5;
  spec.positions = 3;
  spec.layers = {layer_of("layernorm"),     layer_of("linear", 8), layer_of("gelu"),
                 layer_of("groupnorm", 2),  layer_of("relu"),   layer_of("linear", 6),
                 layer_of("batchnorm"),     layer_of("rmsnorm"), layer_of("linear", 3)};
  ref::Tensors<Bounded> params;
  for (const auto& p : ref::parameter_layout(spec)) params.push_back(lift<Bounded>(random_matrix(rng, p.rows, p.cols, 0.7)));
  const auto x = lift<Bounded>(random_matrix(rng, 12, 5));
  const auto target = lift<Bounded>(random_matrix(rng, 12, 3));
  const ref::Tape<Bounded> kept = ref::forward(ref::Model(spec), params, x);
  const Matrix<Bounded> dy = ref::mse_loss(kept.output(), target, Bounded(0.25)).dy;
  const ref::Tensors<Bounded> expected = ref::backward(ref::Model(spec), params, kept, dy);

  ref::Tape<Bounded> given = kept;
  const ref::Tensors<Bounded> got = ref::backward(ref::Model(spec), params, std::move(given), dy);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].size(), expected[p].size()) << p;
    for (long i = 0; i < got[p].size(); ++i) {
      const Bounded &a = got[p].data()[i], &b = expected[p].data()[i];
      EXPECT_EQ(a.value, b.value) << p << " " << i;
      EXPECT_EQ(a.kernel_bound, b.kernel_bound) << p << " " << i;
      EXPECT_EQ(a.reference, b.reference) << p << " " << i;
    }
  }
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    EXPECT_EQ(given.values[l].size(), 0) << "layer " << l << "'s input is freed";
    EXPECT_FALSE(given.statistics[l].has_value()) << "layer " << l << "'s statistics are freed";
  }
  // The kept tape is untouched.
  for (std::size_t l = 0; l < spec.layers.size(); ++l) EXPECT_GT(kept.values[l].size(), 0) << l;
}

// A micro-batch computed in slices of samples (ProcedureConfig::
// slice_samples: the full batch at real sizes) gives one pass's gradients
// and loss: values within both references' own bounds (Eigen's float64
// GEMMs sum in an order that depends on the shapes), kernel bounds to 1e-9
// (no shared source spans two slices: statistics and softmax denominators
// belong to a row or a sample); inside accumulated micro-batches too, and
// with its progress reported per slice.
// BatchNorm, whose statistics span the micro-batch, refuses.
TEST_F(ReferenceGradients, AMicroBatchInSlicesGivesTheWholePass) {
  struct Case {
    std::vector<ref::LayerSpec> layers;
    ref::LossKind loss;
  };
  const std::vector<Case> cases = {
      {{layer_of("layernorm"), layer_of("linear", 8), layer_of("gelu"), layer_of("linear", 4)},
       ref::LossKind::cross_entropy},
      {{layer_of("linear", 6), layer_of("groupnorm", 2), layer_of("relu"),
        layer_of("rmsnorm"), layer_of("linear", 3)},
       ref::LossKind::mse},
  };
  long compared = 0;
  for (const Case& c : cases) {
    ref::ModelSpec spec;
    spec.input_features = 5;
    spec.positions = 3;
    spec.layers = c.layers;
    spec.loss = c.loss;
    const long samples = 8, rows = samples * spec.positions;
    ref::Batch batch;
    batch.positions = spec.positions;
    batch.inputs = random_matrix(rng, rows, spec.input_features);
    for (long i = 0; i < batch.inputs.size(); ++i) batch.inputs.data()[i] = static_cast<float>(batch.inputs.data()[i]);
    if (c.loss == ref::LossKind::mse) {
      batch.targets = random_matrix(rng, rows, 3);
      for (long i = 0; i < batch.targets.size(); ++i) batch.targets.data()[i] = static_cast<float>(batch.targets.data()[i]);
    } else {
      for (long r = 0; r < rows; ++r) batch.classes.push_back(r % 5 == 4 ? ref::kIgnoreClass : static_cast<int>(r % 4));
    }
    ref::Tensors<Bounded> params;
    for (const auto& p : ref::parameter_layout(spec)) {
      Matrix<double> m = random_matrix(rng, p.rows, p.cols, 0.7);
      for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(m.data()[i]);
      params.push_back(lift<Bounded>(m));
    }
    for (const std::vector<long>& split : {std::vector<long>{8}, std::vector<long>{5, 3}}) {
      ref::ProcedureConfig whole, sliced;
      sliced.slice_samples = 2;
      ref::Tensors<Bounded> buffers = ref::initial_buffers<Bounded>(spec), buffers_sliced = buffers;
      const auto expected = ref::accumulate_window(spec, whole, params, buffers, batch, split);
      std::vector<ref::MicroBatchProgress> heard;
      const ref::ScopedMicroBatchObserver observer([&](const ref::MicroBatchProgress& p) { heard.push_back(p); });
      const auto got = ref::accumulate_window(spec, sliced, params, buffers_sliced, batch, split);
      EXPECT_LE(std::abs(got.loss.value - expected.loss.value), got.loss.reference + expected.loss.reference);
      EXPECT_LE(std::abs(got.loss.kernel_bound - expected.loss.kernel_bound), 1e-9 * expected.loss.kernel_bound);
      ASSERT_EQ(got.grads.size(), expected.grads.size());
      for (std::size_t p = 0; p < got.grads.size(); ++p) {
        ASSERT_EQ(got.grads[p].size(), expected.grads[p].size()) << p;
        for (long i = 0; i < got.grads[p].size(); ++i) {
          const Bounded &a = got.grads[p].data()[i], &b = expected.grads[p].data()[i];
          EXPECT_LE(std::abs(a.value - b.value), a.reference + b.reference) << p << " " << i;
          EXPECT_LE(std::abs(a.kernel_bound - b.kernel_bound), 1e-9 * b.kernel_bound) << p << " " << i;
          ++compared;
        }
      }
      // Slices of 2 samples: 4 for the full batch; 3 and 2 for 5 and 3.
      std::vector<std::pair<std::size_t, std::size_t>> slices;
      for (const auto& p : heard) slices.emplace_back(p.slice, p.slices);
      const std::vector<std::pair<std::size_t, std::size_t>> expected_slices =
          split.size() == 1 ? std::vector<std::pair<std::size_t, std::size_t>>{{1, 4}, {2, 4}, {3, 4}, {4, 4}}
                            : std::vector<std::pair<std::size_t, std::size_t>>{{1, 3}, {2, 3}, {3, 3}, {1, 2}, {2, 2}};
      EXPECT_EQ(slices, expected_slices);
      EXPECT_EQ(heard.back().done, split.size());
    }
  }
  EXPECT_GT(compared, 200);
  ref::ModelSpec bn;
  bn.input_features = 4;
  bn.layers = {layer_of("linear", 4), layer_of("batchnorm"), layer_of("linear", 2)};
  ref::Batch batch;
  batch.inputs = random_matrix(rng, 6, 4);
  batch.targets = random_matrix(rng, 6, 2);
  ref::Tensors<Bounded> params, buffers = ref::initial_buffers<Bounded>(bn);
  for (const auto& p : ref::parameter_layout(bn)) params.push_back(lift<Bounded>(random_matrix(rng, p.rows, p.cols)));
  ref::ProcedureConfig sliced;
  sliced.slice_samples = 2;
  EXPECT_THROW(ref::accumulate_window(bn, sliced, params, buffers, batch, {6}), std::invalid_argument);
}

}  // namespace
}  // namespace gradeq::test
