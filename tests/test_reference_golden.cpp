// The float64 reference reproduces PyTorch's float64 results (tests/golden):
// conventions finite differences cannot pin (tanh GELU, biased variance,
// where eps goes, ignore_index, PyTorch's SGD).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harness/core/ops/registry.h"
#include "reference/attention.h"
#include "reference/conv.h"
#include "reference/pool.h"
#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/model.h"
#include "reference/procedure.h"
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

// The criterion for the vision ops, beside the element-wise
// check against the reference's own bound: the largest difference from
// PyTorch float64 relative to the tensor's largest value, at most 1e-12.
struct WorstRelative {
  double worst = 0.0;
  void add(const Matrix<Bounded>& ours, const Matrix<double>& golden) {
    double diff = 0.0, scale = 0.0;
    for (long i = 0; i < ours.size(); ++i) {
      diff = std::max(diff, std::abs(ours.data()[i].value - golden.data()[i]));
      scale = std::max(scale, std::abs(golden.data()[i]));
    }
    worst = std::max(worst, scale > 0.0 ? diff / scale : diff);
  }
  void expect_within(const char* what) const {
    EXPECT_LE(worst, 1e-12) << what;
    std::printf("%s: largest difference from PyTorch float64, relative to the tensor's largest value: %.2g\n", what,
                worst);
  }
};

// nn.Conv2d: a 3x3 halo on an odd image, stride 2 on an odd image with two
// groups, depthwise with dilation 2, a 1x1; the input gradient and the
// weight gradient through their own GEMMs (reference/conv.h).
TEST(ReferenceGolden, Conv2d) {
  const auto file = golden("conv2d");
  ASSERT_EQ(file["cases"].size(), 4u);
  WorstRelative relative;
  for (const auto& g : file["cases"]) {
    ref::ConvShape s;
    s.in = {g["image"][0].get<long>(), g["image"][1].get<long>(), g["image"][2].get<long>()};
    s.out_channels = g["out_channels"];
    s.kernel = g["kernel"];
    s.stride = g["stride"];
    s.padding = g["padding"];
    s.dilation = g["dilation"];
    s.groups = g["groups"];
    const std::string what = "conv2d " + ref::describe(s.in) + " groups " + std::to_string(s.groups);
    const auto x = lift<Bounded>(matrix(g["x"])), w = lift<Bounded>(matrix(g["weight"]));
    const auto b = lift<Bounded>(matrix(g["bias"])), dy = lift<Bounded>(matrix(g["dy"]));
    const auto y = ref::conv2d_forward(s, x, w, b), dx = ref::conv2d_backward_data(s, w, dy);
    expect_matches_golden(y, matrix(g["y"]), what + " y");
    expect_matches_golden(dx, matrix(g["dx"]), what + " dx");
    ref::RowSum<Bounded> dw_sum, db_sum;
    ref::conv2d_backward_weight(s, x, dy, dw_sum, db_sum);
    const auto dw = std::move(dw_sum).result(), db = std::move(db_sum).result();
    expect_matches_golden(dw, matrix(g["dweight"]), what + " dweight");
    expect_matches_golden(db, matrix(g["dbias"]), what + " dbias");
    relative.add(y, matrix(g["y"]));
    relative.add(dx, matrix(g["dx"]));
    relative.add(dw, matrix(g["dweight"]));
    relative.add(db, matrix(g["dbias"]));
  }
  relative.expect_within("conv2d");
}

// nn.AvgPool2d (side by side on an odd width, overlapping), nn.AdaptiveAvgPool2d(1)
// and nn.Upsample(scale_factor=2, mode="nearest") (reference/pool.h).
TEST(ReferenceGolden, PoolingAndUpsampling) {
  const auto file = golden("resample");
  ASSERT_EQ(file["cases"].size(), 4u);
  WorstRelative relative;
  for (const auto& g : file["cases"]) {
    const ref::ImageShape in{g["image"][0].get<long>(), g["image"][1].get<long>(), g["image"][2].get<long>()};
    const std::string layer = g["layer"], what = layer + " " + ref::describe(in);
    const auto x = lift<Bounded>(matrix(g["x"])), dy = lift<Bounded>(matrix(g["dy"]));
    if (layer == "upsample") {
      const auto y = ref::upsample_forward(in, x), dx = ref::upsample_backward(in, dy);
      expect_matches_golden(y, matrix(g["y"]), what + " y");
      expect_matches_golden(dx, matrix(g["dx"]), what + " dx");
      relative.add(y, matrix(g["y"]));
      relative.add(dx, matrix(g["dx"]));
      continue;
    }
    const ref::PoolShape s = layer == "global_avgpool"
                                 ? ref::global_pool(in)
                                 : ref::PoolShape{in, g["kernel"].get<long>(), g["kernel"].get<long>(),
                                                  g["stride"].get<long>(), g["stride"].get<long>()};
    const auto y = ref::avgpool_forward(s, x), dx = ref::avgpool_backward(s, dy);
    expect_matches_golden(y, matrix(g["y"]), what + " y");
    expect_matches_golden(dx, matrix(g["dx"]), what + " dx");
    relative.add(y, matrix(g["y"]));
    relative.add(dx, matrix(g["dx"]));
  }
  relative.expect_within("pooling and up-sampling");
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

// nn.GELU()'s default, the erf form (tests/golden/make_goldens.py).
TEST(ReferenceGolden, GeluErf) {
  const auto g = golden("gelu_erf");
  const auto x = lift<Bounded>(matrix(g["x"])), dy = lift<Bounded>(matrix(g["dy"]));
  expect_matches_golden(ref::gelu_erf_forward(x), matrix(g["y"]), "y");
  expect_matches_golden(ref::gelu_erf_backward(x, dy), matrix(g["dx"]), "dx");
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
// An image's file (BatchNorm2d, GroupNorm on NCHW) says its [C, H, W]: the
// affine is per channel, each channel H W columns.
void check_norm_golden(const std::string& file, ref::NormKind kind, long groups) {
  const auto g = golden(file);
  const long spatial = g.contains("image") ? g["image"][1].get<long>() * g["image"][2].get<long>() : 1;
  const ref::NormShape shape{kind, groups, 1, g["eps"].get<double>(), spatial};
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

// Over images, per channel (NCHW): BatchNorm2d's statistics over every
// sample and pixel of a channel, with its running statistics; GroupNorm's
// over one sample's group of channels with every pixel.
TEST(ReferenceGolden, NormalizersOverImages) {
  const auto g = golden("batchnorm2d_train");
  check_norm_golden("batchnorm2d_train", ref::NormKind::batch, 1);
  const long spatial = g["image"][1].get<long>() * g["image"][2].get<long>();
  const ref::NormShape shape{ref::NormKind::batch, 1, 1, g["eps"].get<double>(), spatial};
  auto running_mean = lift<Bounded>(matrix(g["running_mean_before"]));
  auto running_var = lift<Bounded>(matrix(g["running_var_before"]));
  ref::batchnorm_update_running(running_mean, running_var, ref::norm_statistics(shape, lift<Bounded>(matrix(g["x"]))),
                                g["momentum"].get<double>());
  expect_matches_golden(running_mean, matrix(g["running_mean_after"]), "batchnorm2d running_mean");
  expect_matches_golden(running_var, matrix(g["running_var_after"]), "batchnorm2d running_var");
  check_norm_golden("groupnorm2d", ref::NormKind::group, golden("groupnorm2d")["groups"].get<long>());
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

// Optimizer files: w0, a gradient per step, the weights after each step.
void check_optimizer_golden(const std::string& file, ref::OptimizerSpec o) {
  const auto g = golden(file);
  const auto& h = g["hyper"];
  o.lr = h["lr"].get<double>();
  o.weight_decay = h["weight_decay"].get<double>();
  if (h.contains("momentum")) {
    o.momentum = h["momentum"].get<double>();
    o.dampening = h["dampening"].get<double>();
    o.nesterov = h["nesterov"].get<bool>();
  }
  if (h.contains("betas")) {
    o.beta1 = h["betas"][0].get<double>();
    o.beta2 = h["betas"][1].get<double>();
    o.eps = h["eps"].get<double>();
  }
  auto w = lift<Bounded>(matrix(g["w0"]));
  Matrix<Bounded> a = ref::zeros<Bounded>(w.rows(), w.cols()), b = a;
  for (std::size_t step = 0; step < g["grads"].size(); ++step) {
    const auto grad = lift<Bounded>(matrix(g["grads"][step]));
    if (o.kind == ref::OptimizerKind::sgd) {
      ref::sgd_step(o, o.lr, step == 0, w, grad, a);
    } else {
      ref::adam_step(o, o.lr, static_cast<long>(step), w, grad, a, b);
    }
    expect_matches_golden(w, matrix(g["w_after_each_step"][step]), file + " after step " + std::to_string(step));
  }
}

TEST(ReferenceGolden, Sgd) {
  check_optimizer_golden("sgd", {});
  // The plain form used by simple procedures agrees.
  const auto g = golden("sgd");
  auto w = lift<Bounded>(matrix(g["w0"]));
  ref::sgd_step(w, lift<Bounded>(matrix(g["grads"][0])), Bounded(g["hyper"]["lr"].get<double>()));
  expect_matches_golden(w, matrix(g["w_after_each_step"][0]), "plain sgd");
}
TEST(ReferenceGolden, SgdMomentum) { check_optimizer_golden("sgd_momentum", {}); }
TEST(ReferenceGolden, SgdNesterov) { check_optimizer_golden("sgd_nesterov", {}); }
TEST(ReferenceGolden, SgdWeightDecay) { check_optimizer_golden("sgd_weight_decay", {}); }
TEST(ReferenceGolden, Adam) { check_optimizer_golden("adam", {ref::OptimizerKind::adam}); }
TEST(ReferenceGolden, AdamW) { check_optimizer_golden("adamw", {ref::OptimizerKind::adamw}); }

// Two tensors clipped together by their global 2-norm.
TEST(ReferenceGolden, ClipGradNorm) {
  const auto g = golden("clip_grad_norm");
  ASSERT_EQ(g["norm_type"].get<double>(), 2.0);
  const ref::ClipSpec clip{true, g["max_norm"].get<double>()};
  const Matrix<Bounded> a = lift<Bounded>(matrix(g["grads_before"][0])), b = lift<Bounded>(matrix(g["grads_before"][1]));
  const Bounded norm = ref::sqrt(ref::reduce<Bounded>(a.size() + b.size(), [&](long i) {
    const Bounded& x = i < a.size() ? a.data()[i] : b.data()[i - a.size()];
    return x * x;
  }));
  expect_matches_golden(norm, g["total_norm"].get<double>(), "total_norm");
  const Bounded c = ref::clip_coefficient(clip, norm);
  expect_matches_golden(Matrix<Bounded>(a * c), matrix(g["grads_after"][0]), "first tensor");
  expect_matches_golden(Matrix<Bounded>(b * c), matrix(g["grads_after"][1]), "second tensor");
  // A norm under max_norm is left alone.
  EXPECT_EQ(ref::clip_coefficient(ref::ClipSpec{true, 100.0}, norm).value, 1.0);
}

// nn.Embedding with padding_idx over repeated ids: the gather, and each
// token's rows summed into its row of the gradient, none into the padding
// row (tests/golden/make_goldens.py).
TEST(ReferenceGolden, Embedding) {
  const auto g = golden("embedding");
  Matrix<double> ids(static_cast<long>(g["ids"].size()), 1);
  for (long r = 0; r < ids.rows(); ++r) ids(r, 0) = g["ids"][static_cast<std::size_t>(r)].get<double>();
  const auto w = lift<Bounded>(matrix(g["weight"])), dy = lift<Bounded>(matrix(g["dy"]));
  expect_matches_golden(ref::embedding_forward(ids, w), matrix(g["y"]), "y");
  const Matrix<Bounded> zero = lift<Bounded>(Matrix<double>::Zero(w.rows(), w.cols()));
  expect_matches_golden(ref::embedding_backward(ids, dy, g["padding_idx"].get<long>(), zero), matrix(g["dweight"]),
                        "dweight");
}

// x + wpe(arange(T)) with a table longer than the sequence: dx = dy, and
// each position's rows summed over the samples (the record's math, through
// the model: position_embedding as the only layer).
TEST(ReferenceGolden, PositionEmbedding) {
  const auto g = golden("position_embedding");
  ref::ModelSpec spec;
  const Matrix<double> x = matrix(g["x"]), table = matrix(g["weight"]);
  spec.input_features = x.cols();
  spec.positions = g["positions"].get<long>();
  spec.layers = {layer_of("position_embedding", table.rows())};
  const ref::Model model(spec);
  const ref::Tensors<Bounded> params = {lift<Bounded>(table)};
  const auto tape = ref::forward(model, params, lift<Bounded>(x));
  expect_matches_golden(tape.output(), matrix(g["y"]), "y");
  const auto grads = ref::backward(model, params, tape, lift<Bounded>(matrix(g["dy"])));
  expect_matches_golden(grads[0], matrix(g["dweight"]), "dweight");
}

// A window of a small causal LM in PyTorch float64 autograd: token and
// position embeddings, a pre-LN residual block, the final LayerNorm, a head
// tied to the token embedding; the labels unshifted with -100 at padding,
// the loss's sum over the shifted labels divided by their count. Every
// parameter's gradient (the tied weight's: both contributions) and the
// loss.
// The layers a golden file lists in config syntax: "linear:8", or a
// combinator and its branch, {"residual": [...]}.
std::vector<ref::LayerSpec> layers_of(const nlohmann::json& list) {
  std::vector<ref::LayerSpec> out;
  for (const nlohmann::json& l : list) {
    if (l.is_string()) {
      out.push_back(parse_layer(l.get<std::string>()));
    } else {
      for (const auto& [name, body] : l.items()) out.push_back(combinator_of(name, layers_of(body)));
    }
  }
  return out;
}

// A causal LM's window from its golden file: the model its layers make,
// its parameters by gradeq's names, the ids and the unshifted labels.
struct LanguageModelWindow {
  ref::Model model;
  ref::Tensors<Bounded> params;
  Matrix<double> ids;
  std::vector<int> labels;
};

LanguageModelWindow language_model_window(const nlohmann::json& g) {
  ref::ModelSpec spec;
  spec.input_features = g["vocabulary"].get<long>();
  spec.token_input = true;
  spec.padding_token = g["padding_token"].get<long>();
  spec.positions = g["positions"].get<long>();
  spec.layers = layers_of(g["layers"]);
  spec.loss = ref::LossKind::causal_lm;
  LanguageModelWindow w{ref::Model(spec), {}, Matrix<double>(static_cast<long>(g["ids"].size()), 1), {}};
  for (const ref::ParameterInfo& p : w.model.parameters)
    w.params.push_back(lift<Bounded>(matrix(g["parameters"][p.name])));
  EXPECT_EQ(w.params.size(), g["parameters"].size()) << "every parameter of the golden file, once";
  for (long r = 0; r < w.ids.rows(); ++r) {
    w.ids(r, 0) = g["ids"][static_cast<std::size_t>(r)].get<double>();
    w.labels.push_back(g["labels"][static_cast<std::size_t>(r)].get<int>());
  }
  return w;
}

// The window's loss and every parameter's gradient against the golden
// file's, the loss's denominator in chunks of `vocabulary_chunk` columns
// (0: whole).
void expect_window_matches(const nlohmann::json& g, const LanguageModelWindow& w, long vocabulary_chunk) {
  ref::Batch batch;
  batch.positions = w.model.spec.positions;
  batch.inputs = w.ids;
  batch.classes = w.labels;
  ASSERT_EQ(batch.items(ref::LossKind::causal_lm), g["count"].get<long>());
  const Bounded scale(1.0 / static_cast<double>(batch.items(ref::LossKind::causal_lm)));
  const auto tape = ref::forward(w.model, w.params, lift<Bounded>(w.ids));
  const auto loss = ref::cross_entropy_loss(tape.output(), ref::shifted_labels(w.labels, batch.positions), scale,
                                            vocabulary_chunk);
  expect_matches_golden(loss.loss_sum * scale, g["loss"].get<double>(), "loss");
  const auto grads = ref::backward(w.model, w.params, tape, loss.dy);
  for (std::size_t p = 0; p < w.params.size(); ++p)
    expect_matches_golden(grads[p], matrix(g["gradients"][w.model.parameters[p].name]), w.model.parameters[p].name);
}

TEST(ReferenceGolden, TiedLanguageModelWindow) {
  const auto g = golden("tied_lm");
  const LanguageModelWindow w = language_model_window(g);
  // The whole head (0), and the chunked head's online denominator over
  // chunks of 1, 2, 3 and 4 of the vocabulary's columns: the same exact
  // math, so the same golden to 1e-12.
  for (long chunk : {0L, 1L, 2L, 3L, 4L}) {
    SCOPED_TRACE("vocabulary chunk " + std::to_string(chunk));
    expect_window_matches(g, w, chunk);
  }
}

// Attention's core against nanoGPT's hand-written form (views,
// transposes, masked_fill, softmax) under float64 autograd: causal and
// bidirectional, padded keys (id 0) masked.
void expect_attention_matches(const std::string& name) {
  const auto g = golden(name);
  const ref::AttentionShape shape{g["heads"].get<long>(), g["positions"].get<long>(), g["causal"].get<bool>(),
                                  g["padding_token"].get<long>()};
  const auto qkv = lift<Bounded>(matrix(g["qkv"])), dy = lift<Bounded>(matrix(g["dy"]));
  Matrix<Bounded> ids(qkv.rows(), 1);
  for (long r = 0; r < ids.rows(); ++r) ids(r, 0) = Bounded(g["ids"][static_cast<std::size_t>(r)].get<double>());
  expect_matches_golden(ref::attention_forward(shape, qkv, &ids), matrix(g["y"]), "y");
  expect_matches_golden(ref::attention_backward(shape, qkv, &ids, dy), matrix(g["dqkv"]), "dqkv");
}

TEST(ReferenceGolden, CausalAttention) { expect_attention_matches("attention"); }
TEST(ReferenceGolden, BidirectionalAttention) { expect_attention_matches("bidirectional_attention"); }

// A whole window of a small GPT (attention and MLP blocks, a tied head,
// causal_lm over padded sequences) against PyTorch float64.
TEST(ReferenceGolden, SmallGptWindow) {
  const auto g = golden("gpt_small");
  expect_window_matches(g, language_model_window(g), 0);
}

// A small U-Net's window (convolutions with padding, stride and groups,
// GroupNorm over channels, max pool, up-sampling, the skip's channel
// concatenation, average and global average pools, a linear head) against
// PyTorch float64: its output and every parameter's gradient from dy.
TEST(ReferenceGolden, SmallUNetWindow) {
  const auto g = golden("unet_small");
  ref::ModelSpec spec;
  spec.image = {g["image"][0].get<long>(), g["image"][1].get<long>(), g["image"][2].get<long>()};
  spec.input_features = spec.image.size();
  spec.layers = layers_of(g["layers"]);
  const ref::Model model(spec);
  ref::Tensors<Bounded> params;
  for (const ref::ParameterInfo& p : model.parameters) {
    ASSERT_TRUE(g["parameters"].contains(p.name)) << p.name;
    params.push_back(lift<Bounded>(matrix(g["parameters"][p.name])));
  }
  EXPECT_EQ(params.size(), g["parameters"].size()) << "every parameter of the golden file, once";
  const auto tape = ref::forward(model, params, lift<Bounded>(matrix(g["x"])));
  expect_matches_golden(tape.output(), matrix(g["y"]), "y");
  WorstRelative relative;
  relative.add(tape.output(), matrix(g["y"]));
  const auto grads = ref::backward(model, params, tape, lift<Bounded>(matrix(g["dy"])));
  for (std::size_t p = 0; p < params.size(); ++p) {
    const Matrix<double> expected = matrix(g["gradients"][model.parameters[p].name]);
    expect_matches_golden(grads[p], expected, model.parameters[p].name);
    relative.add(grads[p], expected);
  }
  relative.expect_within("the small U-Net's window");
}

TEST(ReferenceGolden, ScheduleWarmupCosine) {
  const auto g = golden("schedule_warmup_cosine");
  const ref::ScheduleSpec s{true, g["warmup_steps"].get<long>(), g["total_steps"].get<long>()};
  const auto& expected = g["lr_multiplier_at_step"];
  // Both sides evaluate 0.5 (1 + cos(pi p)) in float64: p = (s - w)/(T - w)
  // carries 2u relative, pi p adds 2u (pi's rounding, the product), so the
  // argument is off by <= 4u * pi; cos moves by at most that (|sin| <= 1),
  // adds 1u of its own, 1 + cos one more: each side is within (4 pi + 2) u
  // absolute (the multiplier is <= 1), both together within twice that.
  const double bound = 2.0 * (4.0 * M_PI + 2.0) * ref::kFloat64Roundoff;
  for (std::size_t step = 0; step < expected.size(); ++step) {
    const double ours = ref::schedule_multiplier(s, static_cast<long>(step));
    EXPECT_LE(std::abs(ours - expected[step].get<double>()), bound) << "step " << step;
  }
}

}  // namespace
}  // namespace gradeq::test
