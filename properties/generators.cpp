// generators.cpp — scenario generators. Sizes stay small by default (a
// property runs hundreds of cases on two cores) but always include the edge
// cases; the large tier widens them to real layers' tile boundaries.
#include "properties/generators.h"

#include <atomic>
#include <numeric>

#include "harness/core/ops/registry.h"

namespace gradeq {
namespace {

using ref::LayerSpec;

rc::Gen<long> power_of_two(long max_exponent) {
  return rc::gen::map(rc::gen::inRange<long>(0, max_exponent + 1), [](long e) { return 1L << e; });
}

// The layer named `name` at `width` features; its argument, where it takes
// one, drawn (of the ops drawn here, groupnorm's groups: a divisor).
LayerSpec drawn_layer(const std::string& name, long width);

rc::Gen<std::uint64_t> seed() { return rc::gen::inRange<std::uint64_t>(1, 1u << 30); }

// A number of GroupNorm groups that divides `channels` (1 and `channels` included).
rc::Gen<long> group_count(long channels) {
  std::vector<long> divisors;
  for (long g = 1; g <= channels; ++g)
    if (channels % g == 0) divisors.push_back(g);
  return rc::gen::elementOf(divisors);
}

LayerSpec drawn_layer(const OpRecord* op, long width) {
  return {op, op->argument().empty() ? 0 : *group_count(width), {}, {}};
}

LayerSpec drawn_layer(const std::string& name, long width) { return drawn_layer(op_named(name), width); }

// The layer after a hidden linear one of an independent model: an op of
// the registry, each as often as its generator weight says.
rc::Gen<const OpRecord*> hidden_layer_op() {
  std::vector<const OpRecord*> drawn;
  for (const OpRecord* op : all_ops())
    for (int i = 0; i < op->generator_weight(); ++i) drawn.push_back(op);
  return rc::gen::elementOf(drawn);
}

}  // namespace

namespace {
std::atomic<SizeTier> tier{SizeTier::small};
}  // namespace

std::string size_tier_name(SizeTier t) { return t == SizeTier::large ? "large" : "small"; }
void set_size_tier(SizeTier t) { tier = t; }
SizeTier size_tier() { return tier; }

rc::Gen<long> awkward_width() {
  if (size_tier() == SizeTier::large) return rc::gen::element(1L, 63L, 64L, 65L, 127L, 128L, 129L, 255L, 256L, 257L);
  return rc::gen::element(1L, 2L, 3L, 4L, 5L, 7L, 8L, 9L, 11L, 13L, 15L, 16L, 17L, 31L, 32L, 33L);
}

rc::Gen<long> sequence_positions() {
  return size_tier() == SizeTier::large ? rc::gen::inRange<long>(8, 33) : rc::gen::inRange<long>(2, 7);
}

std::string split_shape_name(SplitShape s) {
  switch (s) {
    case SplitShape::equal: return "equal";
    case SplitShape::uneven: return "uneven";
    case SplitShape::partial_last_window: return "partial last window";
    case SplitShape::power_of_two: return "power of two";
  }
  return "?";
}

rc::Gen<Split> split_of(SplitShape shape) {
  switch (shape) {
    case SplitShape::equal:
      return rc::gen::exec([] {
        const long windows = *rc::gen::inRange<long>(1, 3);
        return equal_split(windows, *rc::gen::inRange<long>(1, 7), *rc::gen::inRange<long>(1, 9));
      });
    case SplitShape::uneven:
      return rc::gen::exec([] {
        const long windows = *rc::gen::inRange<long>(1, 3);
        Split s;
        for (long w = 0; w < windows; ++w)
          s.push_back(*rc::gen::container<std::vector<long>>(static_cast<std::size_t>(*rc::gen::inRange<long>(2, 7)),
                                                             rc::gen::inRange<long>(1, 9)));
        return s;
      });
    case SplitShape::partial_last_window:
      return rc::gen::exec([] {
        const long window = *rc::gen::inRange<long>(2, 6);
        const long full_windows = *rc::gen::inRange<long>(1, 3);
        const long remainder = *rc::gen::inRange<long>(1, window);
        return partial_last_window_split(full_windows * window + remainder, window, *rc::gen::inRange<long>(1, 7));
      });
    case SplitShape::power_of_two:
      return rc::gen::exec([] {
        const long windows = *rc::gen::inRange<long>(1, 3);
        return equal_split(windows, *power_of_two(3), *power_of_two(3));
      });
  }
  return rc::gen::just(Split{{1}});
}

rc::Gen<Split> any_split() {
  return rc::gen::exec([] {
    const SplitShape shape = *rc::gen::element(SplitShape::equal, SplitShape::uneven,
                                              SplitShape::partial_last_window, SplitShape::power_of_two);
    return *split_of(shape);
  });
}

rc::Gen<ScenarioSpec> independent_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated";
    s.model.loss = *rc::gen::element(ref::LossKind::mse, ref::LossKind::cross_entropy);
    const bool sequences = s.model.loss == ref::LossKind::cross_entropy && *rc::gen::arbitrary<bool>();
    s.model.positions = sequences ? *sequence_positions() : 1;
    s.model.input_features = *awkward_width();
    // A quarter of the sequence models read token ids through an embedding
    // (a vocabulary of 2-40, Zipf-distributed ids, so tokens repeat), with
    // the padded positions' id as its padding token; half of them add a
    // learned position embedding (its table up to two rows longer than the
    // sequence), and half are language models: next-token cross-entropy
    // on the shifted labels, through a head over the vocabulary that is
    // tied to the token embedding half of the time.
    bool language_model = false, tied = false;
    if (sequences && *rc::gen::inRange(0, 4) == 0) {
      s.model.token_input = true;
      s.model.input_features = *rc::gen::inRange<long>(2, 41);
      s.model.padding_token = *rc::gen::arbitrary<bool>() ? 0 : -1;
      s.model.layers.push_back(layer_of("embedding", *awkward_width()));
      language_model = *rc::gen::arbitrary<bool>();
      tied = language_model && *rc::gen::arbitrary<bool>();
      if (language_model) s.model.loss = ref::LossKind::causal_lm;
      if (*rc::gen::arbitrary<bool>())
        s.model.layers.push_back(layer_of("position_embedding", s.model.positions + *rc::gen::inRange<long>(0, 3)));
    }
    // A third of the models normalize the raw input first (pre-norm).
    if (*rc::gen::inRange(0, 3) == 0) s.model.layers.push_back(layer_of(*rc::gen::element("layernorm", "rmsnorm")));
    // A fifth of the models are a block with a skip connection in place of
    // the hidden blocks (two linears, as the largest chain):
    //   residual, pre-LN: x + W2 act(W1 LN(x)) (a transformer's MLP);
    //   residual, post-activation: relu(x + W2 relu(W1 x)) (a ResNet's);
    //   concat: [x, act(W1 x)] (a U-Net's decoder reading its encoder).
    // A quarter of the residual branches hold a second, nested residual.
    const bool skip = *rc::gen::inRange(0, 5) == 0;
    const long hidden_blocks = skip ? 0 : *rc::gen::inRange<long>(0, 3);
    long features = s.model.token_input ? s.model.layers.front().argument : s.model.input_features;
    for (long b = 0; b < hidden_blocks; ++b) {
      const long width = *awkward_width();
      s.model.layers.push_back(layer_of("linear", width));
      const LayerSpec drawn = drawn_layer(*hidden_layer_op(), width);
      s.model.layers.push_back(drawn);
      if (drawn.op->normalizes() && *rc::gen::arbitrary<bool>()) s.model.layers.push_back(layer_of("gelu"));
      features = width;
    }
    if (skip) {
      const long hidden = *awkward_width();
      const int shape = *rc::gen::inRange(0, 3);
      std::vector<LayerSpec> branch;
      if (shape == 0) branch.push_back(layer_of("layernorm"));
      branch.push_back(layer_of("linear", hidden));
      branch.push_back(layer_of(shape == 0 ? *rc::gen::element("gelu", "gelu_erf", "relu") : "relu"));
      if (shape == 2) {
        s.model.layers.push_back(combinator_of("concat", std::move(branch)));
      } else {
        if (*rc::gen::inRange(0, 4) == 0)
          branch.push_back(combinator_of("residual", {layer_of("rmsnorm"), layer_of("linear", hidden)}));
        branch.push_back(layer_of("linear", features));
        s.model.layers.push_back(combinator_of("residual", std::move(branch)));
        if (shape == 1) s.model.layers.push_back(layer_of("relu"));
      }
    }
    const long outputs = language_model                                ? s.model.input_features
                         : s.model.loss == ref::LossKind::cross_entropy ? *rc::gen::inRange<long>(2, 12)
                                                                        : *rc::gen::inRange<long>(1, 6);
    if (tied) {
      // The head reads the embedding's width: a linear layer back to it
      // where the hidden layers changed the width.
      const long embedding_width = s.model.layers.front().argument;
      ScenarioSpec body = s;
      body.model.loss = ref::LossKind::mse;
      if (ref::Model(body.model).output_width() != embedding_width)
        s.model.layers.push_back(layer_of("linear", embedding_width));
      s.model.layers.push_back(layer_of("tied_head"));
    } else {
      s.model.layers.push_back(layer_of("linear", outputs));
    }
    // Dyadic data only with MSE: small integers as logits saturate the
    // softmax, whose gradient then vanishes and hides every bug.
    s.data = sequences ? DataKind::padded_sequences
         : s.model.loss == ref::LossKind::mse ? *rc::gen::element(DataKind::normal, DataKind::wide_range, DataKind::dyadic)
                                              : *rc::gen::element(DataKind::normal, DataKind::wide_range);
    // Small integers in a residual stream make rows whose normalizer
    // divides by an uncertain zero: such a case is ill-conditioned and
    // decides nothing (NUMERICS §7). Models with a skip get normal data.
    if (s.data == DataKind::dyadic && skip) s.data = DataKind::normal;
    s.split = *any_split();
    s.seed = *seed();
    return s;
  });
}

rc::Gen<ScenarioSpec> batchnorm_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated batchnorm";
    s.model.loss = *rc::gen::element(ref::LossKind::mse, ref::LossKind::cross_entropy);
    s.model.positions = *rc::gen::inRange<long>(1, 5);
    s.model.input_features = *awkward_width();
    const long width = *awkward_width();
    s.model.layers = {layer_of("linear", width), layer_of("batchnorm")};
    s.model.layers.push_back(layer_of(*rc::gen::element("relu", "gelu", "gelu_erf")));
    if (*rc::gen::arbitrary<bool>()) {
      s.model.layers.push_back(layer_of("linear", *awkward_width()));
      s.model.layers.push_back(layer_of("batchnorm"));
    }
    s.model.layers.push_back(layer_of("linear", s.model.loss == ref::LossKind::cross_entropy
                                                     ? *rc::gen::inRange<long>(2, 8)
                                                     : *rc::gen::inRange<long>(1, 5)));
    s.data = DataKind::normal;
    s.split = *any_split();
    // BatchNorm needs two values per channel in every micro-batch; with
    // fewer than four its statistics are so uncertain in float32 that most
    // cases are ill-conditioned and discarded (NUMERICS §7).
    for (auto& window : s.split)
      for (long& n : window)
        while (n * s.model.positions < 4) ++n;
    s.seed = *seed();
    // Half of them checkpoint activations: the recomputed forward must
    // leave the running statistics alone (BUGS.md B25).
    if (*rc::gen::arbitrary<bool>())
      s.checkpoint_every = *rc::gen::inRange<long>(1, static_cast<long>(s.model.layers.size()) + 1);
    return s;
  });
}

rc::Gen<ScenarioSpec> memory_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = *rc::gen::oneOf(independent_scenario(), batchnorm_scenario(), normalized_scenario(),
                                     mixed_precision_scenario());
    s.name = "generated memory";
    const long min_samples = ref::has_batch_norm(s.model) ? (4 + s.model.positions - 1) / s.model.positions : 1;
    s.split = equal_split(*rc::gen::inRange<long>(1, 3), *rc::gen::inRange<long>(2, 9),
                          *rc::gen::inRange<long>(min_samples, min_samples + 8));
    if (s.procedure.loss_scaling.dynamic) s.split.resize(3, s.split.front());
    s.checkpoint_every = *rc::gen::inRange<long>(0, static_cast<long>(s.model.layers.size()) + 1);
    return s;
  });
}

rc::Gen<ref::ProcedureConfig> procedure_config() {
  return rc::gen::exec([] {
    ref::ProcedureConfig c;
    ref::OptimizerSpec& o = c.optimizer;
    o.kind = *rc::gen::element(ref::OptimizerKind::sgd, ref::OptimizerKind::adam, ref::OptimizerKind::adamw);
    if (o.kind == ref::OptimizerKind::sgd) {
      o.lr = 0.05;
      o.momentum = *rc::gen::element(0.0, 0.9);
      o.nesterov = o.momentum != 0.0 && *rc::gen::arbitrary<bool>();
      o.dampening = o.momentum != 0.0 && !o.nesterov ? *rc::gen::element(0.0, 0.1) : 0.0;
      o.weight_decay = *rc::gen::element(0.0, 0.01);
    } else {
      o.lr = 1e-2;  // a hyper-parameter of the generated case (Adam's step is ~lr per element), not a tolerance
      o.weight_decay = *rc::gen::element(0.0, 0.1);
    }
    // A max norm this small binds on these models: clipping changes the step.
    c.clip.enabled = *rc::gen::arbitrary<bool>();
    c.clip.max_norm = *rc::gen::element(1e-3, 1e-2);
    c.schedule.warmup_cosine = *rc::gen::arbitrary<bool>();
    c.schedule.warmup_steps = *rc::gen::inRange<long>(1, 3);
    c.schedule.total_steps = c.schedule.warmup_steps + *rc::gen::inRange<long>(2, 6);
    return c;
  });
}

namespace {

// The draws both language-model generators share: a causal language model
// over padded sequences of a random vocabulary, with or without a padding
// token. Plain functions called within rc::gen::exec, not generators of
// their own (those would draw from a split stream): a seed gives the same
// cases as before they were shared.
ScenarioSpec language_model_opening(const char* name) {
  ScenarioSpec s;
  s.name = name;
  s.model.token_input = true;
  s.model.loss = ref::LossKind::causal_lm;
  s.model.positions = *sequence_positions() + 1;
  s.model.input_features = *rc::gen::inRange<long>(2, 61);
  s.model.padding_token = *rc::gen::arbitrary<bool>() ? 0 : -1;
  return s;
}

// The token embedding of `width` columns and, half of the time, a position
// embedding of up to 2 spare positions.
void push_token_embeddings(ScenarioSpec& s, long width) {
  s.model.layers.push_back(layer_of("embedding", width));
  if (*rc::gen::arbitrary<bool>())
    s.model.layers.push_back(layer_of("position_embedding", s.model.positions + *rc::gen::inRange<long>(0, 3)));
}

// A pre-LN residual MLP block of a random inner width and activation.
LayerSpec mlp_block(long width) {
  return combinator_of("residual", {layer_of("layernorm"), layer_of("linear", *awkward_width()),
                                    layer_of(*rc::gen::element("gelu", "gelu_erf", "relu")), layer_of("linear", width)});
}

ScenarioSpec language_model_closing(ScenarioSpec s) {
  s.data = DataKind::padded_sequences;
  s.split = *any_split();
  if (*rc::gen::arbitrary<bool>()) s.procedure = *procedure_config();
  s.procedure.staged = *rc::gen::arbitrary<bool>();
  // As data collators pad: each micro-batch to its longest sample, to the
  // window's longest, or every one to the positions.
  s.procedure.padding = *rc::gen::element(ref::Padding::micro_batch, ref::Padding::window, ref::Padding::fixed);
  if (s.precision.compute == DType::f16) s.procedure.loss_scaling.scale = std::ldexp(1.0, *rc::gen::inRange(0, 8));
  s.seed = *seed();
  return s;
}

}  // namespace

rc::Gen<ScenarioSpec> language_model_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = language_model_opening("generated language model");
    // A width of at least 2: a LayerNorm over one feature outputs its beta
    // on every row, and identical rows make the rounding errors of the
    // head's weight gradient identical rather than independent, as the
    // probabilistic form assumes (measured: err/bound 0.56, over the
    // calibration's 0.5, at width 1 in bfloat16; the deterministic form
    // covers it).
    const long width = std::max<long>(2, *awkward_width());
    push_token_embeddings(s, width);
    // One block at most under 16-bit compute: with two, the bound on the
    // final LayerNorm's input can outgrow the row's deviation (lm_small_bf16
    // in the default suite says why), and the case decides nothing.
    s.precision.compute = *rc::gen::element(DType::f32, DType::bf16, DType::f16);
    const long blocks = *rc::gen::inRange<long>(0, s.precision.compute == DType::f32 ? 3 : 2);
    for (long b = 0; b < blocks; ++b)
      s.model.layers.push_back(mlp_block(width));
    s.model.layers.push_back(layer_of("layernorm"));
    const bool tied = *rc::gen::arbitrary<bool>();
    s.model.layers.push_back(tied ? layer_of("tied_head") : layer_of("linear", s.model.input_features));
    // Half of the tied heads run with their loss in chunks: blocks of 1-20
    // rows by chunks of 1 column to the whole vocabulary.
    if (tied && *rc::gen::arbitrary<bool>()) {
      s.model.head_chunk_rows = *rc::gen::inRange<long>(1, 21);
      s.model.head_chunk_vocabulary = *rc::gen::inRange<long>(1, s.model.input_features + 1);
    }
    return language_model_closing(std::move(s));
  });
}

rc::Gen<ScenarioSpec> attention_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = language_model_opening("generated attention model");
    // 16-bit compute on the small tier only: on the large one (widths of
    // 63-257) it leaves the token embedding's gradient without a finite
    // bound in a quarter of the cases (15 of 60 at seed 3, every one in
    // bfloat16 or float16), and such a case decides nothing.
    s.precision.compute = size_tier() == SizeTier::large ? DType::f32
                                                         : *rc::gen::element(DType::f32, DType::bf16, DType::f16);
    // A width of at least 2 (language_model_scenario() says why), and of at
    // least 4 under float16: the block's two LayerNorms over 2 or 3 features
    // in float16 leave some row's deviation with a bound that reaches zero,
    // and the case decides nothing (measured: every one of the 54 undecided
    // cases in 3,000 at seed 3 had width 2 or 3 in float16).
    const long width = std::max<long>(s.precision.compute == DType::f16 ? 4 : 2, *awkward_width());
    push_token_embeddings(s, width);
    // In float32, an MLP block before the attention block half of the time.
    if (s.precision.compute == DType::f32 && *rc::gen::arbitrary<bool>())
      s.model.layers.push_back(mlp_block(width));
    // One attention block, with nothing after it but the final LayerNorm and
    // the head: behind a second block its bounds decide nothing about
    // attention's backward (docs/NUMERICS.md §3, "Attention"). A quarter of
    // them bidirectional (an encoder's), which over cut padding needs the
    // padding masked: a padding token.
    const long heads = *rc::gen::inRange<long>(1, 5), head_dim = *rc::gen::inRange<long>(1, 10);
    const char* kind =
        *rc::gen::inRange(0, 4) == 0 && s.model.padding_token >= 0 ? "bidirectional_attention" : "attention";
    s.model.layers.push_back(combinator_of("residual", {layer_of("layernorm"), layer_of("linear", 3 * heads * head_dim),
                                                        layer_of(kind, heads), layer_of("linear", width)}));
    s.model.layers.push_back(layer_of("layernorm"));
    s.model.layers.push_back(*rc::gen::arbitrary<bool>() ? layer_of("tied_head")
                                                          : layer_of("linear", s.model.input_features));
    return language_model_closing(std::move(s));
  });
}

// A convolution layer for an image of `c` channels and h x w pixels: a
// kernel of 1-3 (at most the padded image), stride 1 or 2, padding 0 to k,
// dilation 2 a fifth of the time where it fits, and groups a common
// divisor of both channel counts (depthwise included).
LayerSpec drawn_conv(const ref::ImageShape& in, long out_channels) {
  const long padding_room = std::min(in.height, in.width);
  const long kernel = *rc::gen::inRange<long>(1, 4);
  const long padding = *rc::gen::inRange<long>(0, kernel + 1);
  long dilation = *rc::gen::inRange(0, 5) == 0 ? 2 : 1;
  if (padding_room + 2 * padding < dilation * (kernel - 1) + 1) dilation = 1;
  const long k = padding_room + 2 * padding < kernel ? 1 : kernel;
  std::vector<long> common;
  for (long g = 1; g <= std::min(in.channels, out_channels); ++g)
    if (in.channels % g == 0 && out_channels % g == 0) common.push_back(g);
  LayerSpec l = layer_of("conv2d", out_channels);
  l.options = {k, *rc::gen::inRange<long>(1, 3), k == 1 && kernel > 1 ? 0 : padding, dilation,
               *rc::gen::elementOf(common)};
  return l;
}

rc::Gen<ScenarioSpec> conv_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated convolution";
    s.model.loss = *rc::gen::element(ref::LossKind::mse, ref::LossKind::cross_entropy);
    s.model.image = {*rc::gen::inRange<long>(1, 5), *rc::gen::inRange<long>(1, 10), *rc::gen::inRange<long>(1, 10)};
    s.model.input_features = s.model.image.size();
    // One or two convolutions, an activation after each, then the head.
    ref::ImageShape image = s.model.image;
    // The image the layers so far write (the model read without its loss).
    const auto last_image = [&] {
      ref::ModelSpec so_far = s.model;
      so_far.loss = ref::LossKind::mse;
      return ref::Model(so_far).images.back();
    };
    const long convs = *rc::gen::inRange<long>(1, 3);
    for (long i = 0; i < convs; ++i) {
      const long channels = *rc::gen::element(1L, 2L, 3L, 4L, 6L, 8L);
      s.model.layers.push_back(drawn_conv(image, channels));
      s.model.layers.push_back(layer_of(*rc::gen::element("relu", "gelu", "gelu_erf")));
      image = last_image();
      // A third of the time a pool after it (max or average, a window of
      // 1-3 within the image, side by side or at stride 1), a sixth of the
      // time an up-sampling by 2 of a small image.
      const int next = *rc::gen::inRange(0, 6);
      if (next < 2) {
        const long k = *rc::gen::inRange<long>(1, std::min<long>(3, std::min(image.height, image.width)) + 1);
        LayerSpec pool = layer_of(next == 0 ? "maxpool" : "avgpool", k);
        pool.options = {*rc::gen::arbitrary<bool>() ? k : 1};
        s.model.layers.push_back(pool);
      } else if (next == 2 && image.height <= 5 && image.width <= 5) {
        s.model.layers.push_back(layer_of("upsample"));
      }
      image = last_image();
    }
    // Half of the models pool each channel to one value before the head.
    if (*rc::gen::arbitrary<bool>()) s.model.layers.push_back(layer_of("global_avgpool"));
    s.model.layers.push_back(layer_of("linear", s.model.loss == ref::LossKind::cross_entropy
                                                    ? *rc::gen::inRange<long>(2, 8)
                                                    : *rc::gen::inRange<long>(1, 5)));
    s.precision.compute = *rc::gen::element(DType::f32, DType::f32, DType::bf16);
    s.data = DataKind::normal;
    s.split = *any_split();
    s.seed = *seed();
    return s;
  });
}

rc::Gen<ScenarioSpec> optimizer_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = *independent_scenario();
    s.name = "generated optimizer";
    if (s.data == DataKind::dyadic) s.data = DataKind::normal;  // integer data makes SGD diverge within a few steps
    s.procedure = *procedure_config();
    // Several windows: the optimizer state carries over.
    if (s.split.size() < 2) s.split.push_back(s.split.front());
    if (*rc::gen::arbitrary<bool>()) s.split.push_back(s.split.back());
    return s;
  });
}

rc::Gen<ScenarioSpec> mixed_precision_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = *independent_scenario();
    s.name = "generated mixed precision";
    if (s.data != DataKind::padded_sequences) s.data = DataKind::normal;  // keep float16 in range
    s.precision.compute = *rc::gen::element(DType::f32, DType::bf16, DType::f16);
    s.precision.accumulate = *rc::gen::element(DType::f32, DType::bf16, DType::f16);
    // Accumulation: fused (backward adds into the buffer), staged (each
    // micro-batch's gradient in the compute dtype, then added) or
    // Kahan-compensated (staged in float32, with a compensation).
    const int accumulation = *rc::gen::inRange(0, 3);
    s.procedure.compensated = accumulation == 2;
    s.procedure.staged = accumulation == 1;
    if (s.precision.compute == DType::f16) {
      ref::LossScaling& ls = s.procedure.loss_scaling;
      ls.dynamic = *rc::gen::arbitrary<bool>();
      // Dynamic: large enough to overflow at first, so windows get skipped
      // and the scale backs off; a short growth interval so it grows too.
      ls.scale = std::ldexp(1.0, ls.dynamic ? *rc::gen::inRange(12, 22) : *rc::gen::inRange(0, 8));
      ls.growth_interval = 2;
      if (ls.dynamic) s.split.resize(std::max<std::size_t>(s.split.size(), 3), s.split.front());
    }
    if (*rc::gen::arbitrary<bool>()) s.procedure = [&] {
      ref::ProcedureConfig c = *procedure_config();
      c.loss_scaling = s.procedure.loss_scaling;
      c.compensated = s.procedure.compensated;
      c.staged = s.procedure.staged;
      return c;
    }();
    return s;
  });
}

rc::Gen<ScenarioSpec> normalized_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated normalized";
    s.model.loss = *rc::gen::element(ref::LossKind::mse, ref::LossKind::cross_entropy);
    const bool sequences = s.model.loss == ref::LossKind::cross_entropy && *rc::gen::arbitrary<bool>();
    s.model.positions = !sequences                          ? *rc::gen::element(1L, 1L, 4L)
                        : size_tier() == SizeTier::large ? *sequence_positions()
                                                         : *rc::gen::inRange<long>(2, 9);
    s.model.input_features = *awkward_width();
    const std::string norm = *rc::gen::element<std::string>("layernorm", "rmsnorm", "groupnorm", "batchnorm");
    auto add_norm = [&](long width) {
      s.model.layers.push_back(drawn_layer(norm, width));
    };
    const std::string activation = *rc::gen::element<std::string>("gelu", "relu");
    // Pre-norm blocks (the transformer layout: the normalizer on the
    // block's input, the raw data for the first) or post-norm ones.
    const bool pre_norm = *rc::gen::arbitrary<bool>();
    long width = s.model.input_features;
    const long blocks = *rc::gen::inRange<long>(1, 3);
    for (long b = 0; b < blocks; ++b) {
      const long hidden = *awkward_width();
      if (pre_norm) add_norm(width);
      s.model.layers.push_back(layer_of("linear", hidden));
      if (!pre_norm) add_norm(hidden);
      s.model.layers.push_back(layer_of(activation));
      width = hidden;
    }
    const long outputs = s.model.loss == ref::LossKind::cross_entropy ? *rc::gen::inRange<long>(2, 12)
                                                                      : *rc::gen::inRange<long>(1, 6);
    s.model.layers.push_back(layer_of("linear", outputs));
    s.data = sequences ? DataKind::padded_sequences : *rc::gen::element(DataKind::normal, DataKind::wide_range);
    s.split = *any_split();
    if (op_named(norm)->couples_samples())  // two values per channel at least, as batchnorm_scenario()
      for (auto& window : s.split)
        for (long& n : window)
          while (n * s.model.positions < 4) ++n;
    s.precision.compute = *rc::gen::element(DType::bf16, DType::f16, DType::f32);
    if (*rc::gen::arbitrary<bool>()) {
      s.procedure = *procedure_config();
      if (s.split.size() < 2) s.split.push_back(s.split.front());
    }
    s.seed = *seed();
    return s;
  });
}

rc::Gen<ScenarioSpec> data_parallel_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = *mixed_precision_scenario();
    s.name = "generated data-parallel";
    s.procedure.compensated = false;  // a compensation per rank has no all-reduce
    if (s.split.size() < 2) s.split.push_back(s.split.front());  // bugs of later windows (B20)
    return s;
  });
}

rc::Gen<ScenarioSpec> long_accumulation_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s = *independent_scenario();
    s.name = "generated long accumulation";
    const long n = *rc::gen::inRange<long>(64, 301);
    s.split = {std::vector<long>(static_cast<std::size_t>(n), *rc::gen::inRange<long>(1, 3))};
    return s;
  });
}

rc::Gen<ScenarioSpec> equal_split_shortcut_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated equal-split shortcut";
    s.model.loss = ref::LossKind::cross_entropy;
    s.model.positions = *rc::gen::inRange<long>(2, 9);
    s.model.input_features = *awkward_width();
    s.model.layers = {layer_of("linear", *awkward_width()), layer_of("gelu"), layer_of("linear", 5)};
    s.data = DataKind::padded_sequences;
    s.split = *split_of(SplitShape::equal);
    s.procedure.normalization = ref::Normalization::equal_split;
    s.seed = *seed();
    return s;
  });
}

rc::Gen<ScenarioSpec> determinism_scenario() {
  return rc::gen::oneOf(independent_scenario(), batchnorm_scenario(), optimizer_scenario(),
                        mixed_precision_scenario());
}

rc::Gen<ScenarioSpec> exact_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated exact";
    s.model.loss = ref::LossKind::mse;
    s.model.input_features = *awkward_width();
    if (*rc::gen::arbitrary<bool>()) {
      s.model.layers.push_back(layer_of("linear", *awkward_width()));
      s.model.layers.push_back(layer_of("relu"));
    }
    s.model.layers.push_back(layer_of("linear", *power_of_two(2)));
    s.data = DataKind::dyadic;
    // One window: a second step would multiply fractional bits of updated
    // weights by each other and leave float32's 24 bits.
    // At least two micro-batches of two samples: with one sample, a dead
    // ReLU layer and an output equal to its small-integer target leave
    // every gradient zero (a vacuous case) about once in forty.
    s.split = equal_split(1, 2 * *power_of_two(2), 2 * *power_of_two(2));
    s.procedure.optimizer.lr = 0.0625;  // 2^-4: the update stays dyadic
    s.seed = *seed();
    return s;
  });
}

void showValue(const ScenarioSpec& s, std::ostream& os) {
  os << "{" << describe_scenario(s) << "}";
}

}  // namespace gradeq
