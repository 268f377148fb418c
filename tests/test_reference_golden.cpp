// The float64 reference reproduces PyTorch's float64 results (tests/golden):
// conventions finite differences cannot pin (tanh GELU, biased variance,
// where eps goes, ignore_index, PyTorch's SGD).
#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/optimizers.h"
#include "support.h"

namespace gradeq::test {
namespace {

using ref::lift;

// Layer files: loss = sum(y * dy), so the gradients PyTorch returned are the
// vector-Jacobian products with dy.
TEST(ReferenceGolden, Linear) {
  const auto g = golden("linear");
  const auto x = lift<Bounded>(matrix(g["x"])), w = lift<Bounded>(matrix(g["weight"]));
  const auto b = lift<Bounded>(matrix(g["bias"])), dy = lift<Bounded>(matrix(g["dy"]));
  expect_matches_golden(ref::linear_forward(x, w, b), matrix(g["y"]), "y");
  const auto grads = ref::linear_backward(x, w, dy);
  expect_matches_golden(grads.dx, matrix(g["dx"]), "dx");
  expect_matches_golden(grads.dw, matrix(g["dweight"]), "dweight");
  expect_matches_golden(grads.db, matrix(g["dbias"]), "dbias");
}

TEST(ReferenceGolden, Relu) {
  const auto g = golden("relu");
  const auto x = lift<Bounded>(matrix(g["x"])), dy = lift<Bounded>(matrix(g["dy"]));
  expect_matches_golden(ref::relu_forward(x), matrix(g["y"]), "y");
  expect_matches_golden(ref::relu_backward(x, dy), matrix(g["dx"]), "dx");
}

TEST(ReferenceGolden, GeluTanh) {
  const auto g = golden("gelu_tanh");
  const auto x = lift<Bounded>(matrix(g["x"])), dy = lift<Bounded>(matrix(g["dy"]));
  expect_matches_golden(ref::gelu_forward(x), matrix(g["y"]), "y");
  expect_matches_golden(ref::gelu_backward(x, dy), matrix(g["dx"]), "dx");
}

// PyTorch's CPU normalizers compute moments in one pass, var = E[x^2] -
// E[x]^2, whose float64 error is relative to E[x^2], not to the variance
// (NUMERICS §6). The reference bounds that algorithm with the same rules, and
// the comparison allows our bound plus F times theirs.
ref::NormStatistics<Bounded> one_pass_statistics(const ref::NormShape& s, const Matrix<Bounded>& x) {
  ref::NormStatistics<Bounded> st;
  ref::for_each_norm_group(s, x.rows(), x.cols(), [&](long n, auto element) {
    const Bounded count(static_cast<double>(n));
    const Bounded mean = s.kind == ref::NormKind::rms
                             ? Bounded(0.0)
                             : ref::reduce<Bounded>(n, [&](long i) { auto [r, c] = element(i); return x(r, c); }) / count;
    const Bounded mean_sq =
        ref::reduce<Bounded>(n, [&](long i) { auto [r, c] = element(i); return x(r, c) * x(r, c); }) / count;
    st.mean.push_back(mean);
    st.rstd.push_back(Bounded(1.0) / ref::sqrt(mean_sq - mean * mean + Bounded(s.eps)));
    st.unbiased_var.push_back(Bounded(0.0));
  });
  return st;
}

// Normalizer files share a layout; `kind` picks the statistics groups.
void check_norm_golden(const std::string& file, ref::NormKind kind, long groups) {
  const auto g = golden(file);
  const ref::NormShape shape{kind, groups, 1, g["eps"].get<double>()};
  const auto x = lift<Bounded>(matrix(g["x"])), dy = lift<Bounded>(matrix(g["dy"]));
  const auto gamma = lift<Bounded>(matrix(g["weight"]));
  const Matrix<Bounded> beta = kind == ref::NormKind::rms ? Matrix<Bounded>() : lift<Bounded>(matrix(g["bias"]));
  const auto stats = ref::norm_statistics(shape, x), theirs = one_pass_statistics(shape, x);
  expect_matches_golden(ref::norm_forward(shape, x, gamma, beta, stats), ref::norm_forward(shape, x, gamma, beta, theirs),
                        matrix(g["y"]), file + " y");
  const auto grads = ref::norm_backward(shape, x, gamma, dy, stats);
  const auto their_grads = ref::norm_backward(shape, x, gamma, dy, theirs);
  expect_matches_golden(grads.dx, their_grads.dx, matrix(g["dx"]), file + " dx");
  expect_matches_golden(grads.dgamma, their_grads.dgamma, matrix(g["dweight"]), file + " dweight");
  if (kind != ref::NormKind::rms)
    expect_matches_golden(grads.dbeta, their_grads.dbeta, matrix(g["dbias"]), file + " dbias");
}

TEST(ReferenceGolden, LayerNorm) { check_norm_golden("layernorm", ref::NormKind::layer, 1); }

TEST(ReferenceGolden, GroupNorm) {
  check_norm_golden("groupnorm", ref::NormKind::group, golden("groupnorm")["groups"].get<long>());
}

TEST(ReferenceGolden, RmsNorm) {
  EXPECT_EQ(golden("rmsnorm")["formula"], "x * rsqrt(mean(x^2, last dim) + eps) * weight");
  check_norm_golden("rmsnorm", ref::NormKind::rms, 1);
}

// Training mode: batch statistics with the biased variance normalize; the
// running variance takes the unbiased one, with momentum 0.1.
TEST(ReferenceGolden, BatchNormTrainingAndRunningStatistics) {
  const auto g = golden("batchnorm_train");
  check_norm_golden("batchnorm_train", ref::NormKind::batch, 1);
  const ref::NormShape shape{ref::NormKind::batch, 1, 1, g["eps"].get<double>()};
  auto running_mean = lift<Bounded>(matrix(g["running_mean_before"]));
  auto running_var = lift<Bounded>(matrix(g["running_var_before"]));
  ref::batchnorm_update_running(running_mean, running_var, ref::norm_statistics(shape, lift<Bounded>(matrix(g["x"]))),
                                g["momentum"].get<double>());
  expect_matches_golden(running_mean, matrix(g["running_mean_after"]), "running_mean");
  expect_matches_golden(running_var, matrix(g["running_var_after"]), "running_var");
}

// mean over all elements = (sum of per-row means) / rows: scale 1/rows.
TEST(ReferenceGolden, MseMean) {
  const auto g = golden("mse_mean");
  const auto pred = lift<Bounded>(matrix(g["pred"])), target = lift<Bounded>(matrix(g["target"]));
  const Bounded scale(1.0 / static_cast<double>(pred.rows()));
  const auto out = ref::mse_loss(pred, target, scale);
  expect_matches_golden(out.loss_sum * scale, g["loss"].get<double>(), "loss");
  expect_matches_golden(out.dy, matrix(g["dpred"]), "dpred");
}

TEST(ReferenceGolden, CrossEntropySumIgnore) {
  const auto g = golden("cross_entropy_sum_ignore");
  ASSERT_EQ(g["ignore_index"].get<int>(), ref::kIgnoreClass);
  const auto logits = lift<Bounded>(matrix(g["logits"]));
  const std::vector<int> classes = g["target"].get<std::vector<int>>();
  const auto out = ref::cross_entropy_loss(logits, classes, Bounded(1.0));
  expect_matches_golden(out.loss_sum, g["loss"].get<double>(), "loss");
  expect_matches_golden(out.dy, matrix(g["dlogits"]), "dlogits");
  EXPECT_EQ(ref::cross_entropy_items(classes), 5);
}

TEST(ReferenceGolden, Sgd) {
  const auto g = golden("sgd");
  const double lr = g["hyper"]["lr"].get<double>();
  auto w = lift<Bounded>(matrix(g["w0"]));
  for (std::size_t step = 0; step < g["grads"].size(); ++step) {
    ref::sgd_step(w, lift<Bounded>(matrix(g["grads"][step])), Bounded::with_bounds(lr, 0.0, 0.0));
    expect_matches_golden(w, matrix(g["w_after_each_step"][step]), "w after step " + std::to_string(step));
  }
}

}  // namespace
}  // namespace gradeq::test
