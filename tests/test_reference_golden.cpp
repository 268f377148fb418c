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

TEST(ReferenceGolden, LayerNorm) {
  const auto g = golden("layernorm");
  const ref::NormShape shape{ref::NormKind::layer, 1, 1, g["eps"].get<double>()};
  const auto x = lift<Bounded>(matrix(g["x"])), dy = lift<Bounded>(matrix(g["dy"]));
  const auto gamma = lift<Bounded>(matrix(g["weight"])), beta = lift<Bounded>(matrix(g["bias"]));
  const auto stats = ref::norm_statistics(shape, x);
  expect_matches_golden(ref::norm_forward(shape, x, gamma, beta, stats), matrix(g["y"]), "y");
  const auto grads = ref::norm_backward(shape, x, gamma, dy, stats);
  expect_matches_golden(grads.dx, matrix(g["dx"]), "dx");
  expect_matches_golden(grads.dgamma, matrix(g["dweight"]), "dweight");
  expect_matches_golden(grads.dbeta, matrix(g["dbias"]), "dbias");
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
