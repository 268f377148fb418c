// Models as graphs: the op registry, the resolved Model, the config syntax
// of combinators, and the training loop's gradient buffers.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "harness/core/config.h"
#include "harness/core/ops/registry.h"
#include "harness/core/training_loop.h"
#include "reference/model.h"
#include "reference/procedure.h"

namespace gradeq {
namespace {

TEST(Registry, EveryOpIsOneRecordWithItsSyntax) {
  std::set<std::string> names;
  for (const OpRecord* op : all_ops()) {
    EXPECT_TRUE(names.insert(std::string(op->name())).second) << op->name();
    EXPECT_EQ(op_named(op->name()), op);
    if (op->combines()) continue;
    std::string text(op->name());
    if (!op->argument().empty()) text += ":3";
    for (const ref::OptionInfo& o : op->options())
      if (o.positional) text += ":3";
    const ref::LayerSpec layer = parse_layer(text);
    EXPECT_EQ(layer.op, op);
    EXPECT_EQ(parse_layer(layer_text(layer)).argument, layer.argument) << layer_text(layer);
    EXPECT_EQ(parse_layer(layer_text(layer)).options, layer.options) << layer_text(layer);
  }
  for (const char* expected : {"linear", "relu", "gelu", "gelu_erf", "layernorm", "rmsnorm", "groupnorm", "batchnorm",
                               "residual", "concat"})
    EXPECT_TRUE(names.count(expected)) << expected;
  EXPECT_THROW(parse_layer("linear"), std::invalid_argument);
  EXPECT_THROW(parse_layer("relu:3"), std::invalid_argument);
  EXPECT_THROW(parse_layer("residual"), std::invalid_argument);
  EXPECT_THROW(parse_layer("conv2d:3"), std::invalid_argument);
}

// An op's options after its argument: positional ones in order, then
// key=value; defaults filled in; the text written back is read the same.
TEST(Registry, OptionsAfterTheArgument) {
  const ref::LayerSpec conv = parse_layer("conv2d:16:3:groups=4:stride=2");
  EXPECT_EQ(conv.argument, 16);
  EXPECT_EQ(conv.options, (std::vector<long>{3, 2, 0, 1, 4}));  // kernel, stride, padding, dilation, groups
  EXPECT_EQ(layer_text(conv), "conv2d:16:3:stride=2:groups=4");
  EXPECT_EQ(parse_layer(layer_text(conv)).options, conv.options);
  for (const char* bad : {"conv2d:16", "conv2d:16:3:3", "conv2d:16:3:size=2", "conv2d:16:3:stride=0",
                          "conv2d:16:3:stride=2:stride=2", "conv2d:16:3:padding=-1", "conv2d:16:3:stride=x",
                          "conv2d:16:0", "conv2d:16:3:kernel=3"})
    EXPECT_THROW(parse_layer(bad), std::invalid_argument) << bad;
  EXPECT_THROW(parse_layer("linear:8:3"), std::invalid_argument);
}

// An image model: each value's image, a convolution's output size by
// PyTorch's floor, its weight [C_out, C_in/groups k k], and the refusals.
TEST(Graph, ImagesThroughConvolutions) {
  ref::ModelSpec m;
  m.image = {3, 9, 8};
  m.input_features = m.image.size();
  m.layers = {parse_layer("conv2d:4:3:padding=1"), layer_of("relu"), parse_layer("conv2d:6:3:stride=2:padding=1:groups=2"),
              layer_of("linear", 5)};
  const ref::Model model(m);
  ASSERT_EQ(model.images.size(), 5u);
  EXPECT_EQ(model.images[1], (ref::ImageShape{4, 9, 8}));
  EXPECT_EQ(model.images[2], (ref::ImageShape{4, 9, 8}));
  EXPECT_EQ(model.images[3], (ref::ImageShape{6, 5, 4}));  // floor(8 / 2) + 1, floor(7 / 2) + 1
  EXPECT_FALSE(model.images[4].is_image());
  EXPECT_EQ(model.widths[3], 6 * 5 * 4);
  EXPECT_EQ(model.parameters[2].rows, 6);
  EXPECT_EQ(model.parameters[2].cols, 2 * 9);
  EXPECT_EQ(ref::describe(m), "in(216)-conv2d(4, kernel 3, padding 1)-relu-conv2d(6, kernel 3, stride 2, padding 1, "
                              "groups 2)-linear(5) -> mse, images 3x9x8");
  auto refused = [&](std::vector<ref::LayerSpec> layers, ref::ImageShape image) {
    ref::ModelSpec bad = m;
    bad.image = image;
    bad.input_features = image.is_image() ? image.size() : 216;
    bad.layers = std::move(layers);
    EXPECT_THROW(ref::validate(bad), std::invalid_argument);
  };
  refused({parse_layer("conv2d:4:3:groups=2")}, {3, 9, 8});        // 2 groups do not divide 3 channels
  refused({parse_layer("conv2d:4:5")}, {3, 3, 8});                 // the kernel reaches past the image
  refused({parse_layer("conv2d:4:3")}, {});                         // not an image
  refused({layer_of("linear", 4), parse_layer("conv2d:4:1")}, {3, 9, 8});  // a linear's output is not an image
}

// BatchNorm and GroupNorm after a convolution are BatchNorm2d and GroupNorm
// on NCHW: weight, bias and running statistics per channel; groups must
// divide the channels (not the columns). LayerNorm stays per element.
TEST(Graph, NormalizersOverImagesArePerChannel) {
  ref::ModelSpec m;
  m.image = {3, 4, 4};
  m.input_features = m.image.size();
  m.layers = {parse_layer("conv2d:8:3:padding=1"), layer_of("batchnorm"), layer_of("groupnorm", 4),
              layer_of("layernorm"), layer_of("linear", 2)};
  const ref::Model model(m);
  for (const char* name : {"layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"}) {
    const auto p = std::find_if(model.parameters.begin(), model.parameters.end(), [&](const auto& q) { return q.name == name; });
    ASSERT_NE(p, model.parameters.end()) << name;
    EXPECT_EQ(p->cols, 8) << name;
  }
  EXPECT_EQ(model.parameters[6].cols, 8 * 16);  // layer3.weight: LayerNorm([C, H, W])
  ASSERT_EQ(model.buffers.size(), 2u);
  EXPECT_EQ(model.buffers[0].cols, 8);
  EXPECT_EQ(norm_config(model, model.nodes[1])->spatial, 16);
  EXPECT_EQ(norm_config(model, model.nodes[3])->spatial, 1);
  m.layers[2] = layer_of("groupnorm", 16);  // divides 128 columns, not 8 channels
  EXPECT_THROW(ref::validate(m), std::invalid_argument);
}

// The config's image key: C H W features per sample, and a report's
// scenario (scenario_to_json) read back the same; the refusals.
TEST(Graph, ImageConfigKey) {
  const std::string head = "[[scenario]]\nname = \"c\"\nsplit = [[2, 2]]\nlayers = [\"conv2d:4:3:stride=2\", \"linear:3\"]\n";
  const ScenarioSpec s = parse_scenarios(head + "image = [2, 7, 5]\n", "t").at(0);
  EXPECT_EQ(s.model.image, (ref::ImageShape{2, 7, 5}));
  EXPECT_EQ(s.model.input_features, 70);
  const ScenarioSpec back = scenario_from_json(scenario_to_json(s), "json");
  EXPECT_EQ(back.model.image, s.model.image);
  EXPECT_EQ(back.model.layers.at(0).options, s.model.layers.at(0).options);
  for (const char* bad : {"image = [2, 7]\n", "image = [2, 7, 0]\n", "image = [2, 7, 5]\ninput_features = 69\n",
                          "image = [2, 7, 5]\nvocabulary = 9\n", "image = [2, 7, 5]\npositions = 2\n"})
    EXPECT_THROW(parse_scenarios(head + bad, "t"), std::invalid_argument) << bad;
}

// The properties draw the layer after a hidden linear one from the ops'
// generator weights: the activations and the normalizers that keep
// samples apart; never the structural ops, nor BatchNorm (drawn by
// generators of its own).
TEST(Registry, GeneratorWeightsPickTheHiddenLayers) {
  std::set<std::string> drawn;
  for (const OpRecord* op : all_ops())
    if (op->generator_weight() > 0) drawn.insert(std::string(op->name()));
  EXPECT_EQ(drawn, (std::set<std::string>{"relu", "gelu", "gelu_erf", "layernorm", "rmsnorm", "groupnorm"}));
}

ref::ModelSpec pre_ln_block() {
  ref::ModelSpec m;
  m.input_features = 8;
  m.layers = {layer_of("linear", 8),
              combinator_of("residual", {layer_of("layernorm"), layer_of("linear", 16), layer_of("gelu"),
                                         layer_of("linear", 8)}),
              layer_of("linear", 2)};
  return m;
}

TEST(Graph, ResolvesNodesValuesAndNestedNames) {
  const ref::Model m(pre_ln_block());
  // Nodes: linear, layernorm, linear, gelu, linear, residual, linear.
  ASSERT_EQ(m.nodes.size(), 7u);
  EXPECT_EQ(m.widths, (std::vector<long>{8, 8, 8, 16, 16, 8, 8, 2}));
  EXPECT_EQ(m.nodes[5].inputs, (std::vector<std::size_t>{1, 5}));  // the block's input and the branch's output
  EXPECT_EQ(m.consumers[1], 2);                                      // read by the branch and the residual
  EXPECT_EQ(m.block_starts, (std::vector<std::size_t>{0, 1, 6, 7}));
  std::vector<std::string> names;
  for (const ref::ParameterInfo& p : m.parameters) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer0.weight", "layer0.bias", "layer1.0.weight", "layer1.0.bias",
                                             "layer1.1.weight", "layer1.1.bias", "layer1.3.weight", "layer1.3.bias",
                                             "layer2.weight", "layer2.bias"}));
  EXPECT_EQ(ref::describe(m.spec), "in(8)-linear(8)-residual[layernorm-linear(16)-gelu-linear(8)]-linear(2) -> mse");
}

TEST(Graph, RefusesWhatDoesNotFitNamingTheLayer) {
  ref::ModelSpec m = pre_ln_block();
  m.layers[1].body.back().argument = 7;  // the branch ends at 7 features, the stream has 8
  try {
    (void)ref::Model(m);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "model: layer 1 (residual): its branch maps 8 features to 7; x + f(x) needs the same width");
  }
  m = pre_ln_block();
  m.layers[1].body[1].argument = 0;
  try {
    (void)ref::Model(m);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "model: layer 1.1 (linear) needs >= 1 output features");
  }
  m.layers[1].body.clear();
  EXPECT_THROW((void)ref::Model(m), std::invalid_argument);
}

// A chain needs two gradient buffers; a residual block a third, for the
// gradient of its input, where the branch's is added from a fourth.
TEST(LoopPlan, GradientBuffersFollowLiveness) {
  ref::ModelSpec chain;
  chain.input_features = 4;
  chain.layers = {layer_of("linear", 8), layer_of("relu"), layer_of("linear", 2)};
  EXPECT_EQ(loop_plan(ref::Model(chain), 0).gradient_buffers, 2u);

  const ref::Model m(pre_ln_block());
  const LoopPlan plan = loop_plan(m, 0);
  EXPECT_EQ(plan.gradient_buffers, 3u);
  const LoopPlan::Step& residual = plan.steps[5];
  const LoopPlan::Step& branch_head = plan.steps[1];  // the layernorm reading the block's input
  EXPECT_EQ(residual.sum[0], residual.dx[0]);          // the stream's gradient: the value's first
  EXPECT_EQ(branch_head.sum[0], residual.dx[0]);       // the branch's: added into the same buffer
  EXPECT_NE(branch_head.dx[0], branch_head.sum[0]);
}

// Checkpointing groups top-level blocks: a residual block and its branch
// are one block, recomputed from its kept input.
TEST(LoopPlan, CheckpointGroupsAreTopLevelBlocks) {
  const LoopPlan plan = loop_plan(ref::Model(pre_ln_block()), 1);
  EXPECT_EQ(plan.group_starts, (std::vector<std::size_t>{0, 1, 6, 7}));
  // Kept: the input (0), the blocks' outputs (1, 6) and the model's (7);
  // the branch's values 2-5 share the interior slots.
  std::set<std::size_t> kept{plan.slot_of[0], plan.slot_of[1], plan.slot_of[6], plan.slot_of[7]};
  EXPECT_EQ(kept.size(), 4u);
  for (std::size_t v = 2; v <= 5; ++v) EXPECT_EQ(plan.slot_of[v], v - 2) << v;
}

std::string rejection(const std::string& layers) {
  try {
    (void)parse_scenarios("[[scenario]]\nname = \"g\"\ninput_features = 4\nsplit = [[2, 2]]\nlayers = " + layers + "\n",
                          "graph.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ConfigGraph, CombinatorsAreOneKeyTablesCheckedWithTheirPath) {
  EXPECT_EQ(rejection(R"(["linear:4", { residual = ["relu", "linear:4"] }, "linear:2"])"), "accepted");
  EXPECT_NE(rejection(R"([{ residual = [] }])").find("layers[0].residual must be a non-empty list"), std::string::npos);
  EXPECT_NE(rejection(R"([{ skip = ["relu"] }])").find("layers[0]: 'skip' is not a combinator"), std::string::npos);
  EXPECT_NE(rejection(R"([{ residual = ["relu"], concat = ["relu"] }])").find("a table of one key"),
            std::string::npos);
  EXPECT_NE(rejection(R"([{ residual = ["linear:4", { concat = [7] }] }])").find("layers[0].residual[1].concat[0]"),
            std::string::npos);
  EXPECT_NE(rejection(R"([{ residual = ["linear:4", "conv2d:3"] }])").find("layers[0].residual[1]"),
            std::string::npos);
}

std::string token_rejection(const std::string& keys, const std::string& layers) {
  try {
    (void)parse_scenarios("[[scenario]]\nname = \"t\"\n" + keys + "\nsplit = [[2, 2]]\nloss = \"cross_entropy\"\n" +
                              "layers = " + layers + "\n",
                          "tokens.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

// A token model: `vocabulary` instead of `input_features`, an embedding
// first and nowhere else, a padding token among the ids.
TEST(ConfigTokens, TheInputIsTokensReadOnlyByAnEmbedding) {
  const std::string model = R"(["embedding:8", "gelu", "linear:11"])";
  EXPECT_EQ(token_rejection("vocabulary = 11\npadding_token = 0", model), "accepted");
  EXPECT_NE(token_rejection("vocabulary = 11\ninput_features = 4", model).find("not both or neither"),
            std::string::npos);
  EXPECT_NE(token_rejection("input_features = 4\npadding_token = 0", R"(["linear:4", "linear:3"])")
                .find("only a model whose input is tokens"),
            std::string::npos);
  EXPECT_NE(token_rejection("vocabulary = 11\npadding_token = 11", model).find("in [0, vocabulary)"),
            std::string::npos);
  EXPECT_NE(token_rejection("vocabulary = 11", R"(["linear:8", "linear:11"])").find("only an embedding reads"),
            std::string::npos);
  EXPECT_NE(token_rejection("input_features = 4", R"(["embedding:8", "linear:3"])").find("reads token ids"),
            std::string::npos);
  EXPECT_NE(token_rejection("vocabulary = 11", R"(["embedding:8", "embedding:8", "linear:3"])").find("reads token ids"),
            std::string::npos);
  const std::vector<ScenarioSpec> s =
      parse_scenarios("[[scenario]]\nname = \"t\"\nvocabulary = 11\npadding_token = 3\nsplit = [[2, 2]]\n"
                      "loss = \"cross_entropy\"\nlayers = [\"embedding:8\", \"linear:11\"]\n",
                      "tokens.toml");
  const nlohmann::json j = scenario_to_json(s.front());
  EXPECT_EQ(j.at("vocabulary"), 11);
  EXPECT_EQ(j.at("padding_token"), 3);
  EXPECT_FALSE(j.contains("input_features"));
}

std::string lm_rejection(const std::string& keys, const std::string& layers) {
  try {
    (void)parse_scenarios("[[scenario]]\nname = \"t\"\n" + keys + "\nsplit = [[2, 2]]\nlayers = " + layers + "\n",
                          "lm.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

// A language model: a position embedding whose table covers the positions,
// a head tied to the token embedding (one parameter, read by two nodes),
// and the shifted-label loss over the vocabulary.
TEST(ConfigTokens, ALanguageModelTiesItsHeadAndShiftsItsLabels) {
  const std::string lm = "vocabulary = 11\npositions = 4\nloss = \"causal_lm\"";
  const std::string layers = R"(["embedding:8", "position_embedding:4", "layernorm", "tied_head"])";
  EXPECT_EQ(lm_rejection(lm, layers), "accepted");
  const ScenarioSpec s = parse_scenarios("[[scenario]]\nname = \"t\"\n" + lm + "\nsplit = [[2, 2]]\nlayers = " +
                                             layers + "\n",
                                         "lm.toml")
                             .front();
  const ref::Model m(s.model);
  std::vector<std::string> names;
  for (const ref::ParameterInfo& p : m.parameters) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer0.weight", "layer1.weight", "layer2.weight", "layer2.bias"}));
  EXPECT_EQ(m.nodes[3].first_parameter, 0);  // the head reads the embedding's weight
  EXPECT_EQ(m.nodes[3].parameters, 1);
  EXPECT_EQ(m.output_width(), 11);
  EXPECT_NE(lm_rejection("input_features = 4\nloss = \"cross_entropy\"", R"(["linear:8", "tied_head"])")
                .find("a tied head needs the model's token embedding"),
            std::string::npos);
  EXPECT_NE(lm_rejection(lm, R"(["embedding:8", "linear:5", "tied_head"])")
                .find("its input has width 5, the tied embedding's 8"),
            std::string::npos);
  EXPECT_NE(lm_rejection(lm, R"(["embedding:8", "linear:7"])").find("causal_lm scores each position"),
            std::string::npos);
  EXPECT_NE(lm_rejection("input_features = 4\nloss = \"causal_lm\"", R"(["linear:4"])")
                .find("causal_lm scores each position"),
            std::string::npos);
  EXPECT_NE(lm_rejection(lm, R"(["embedding:8", "position_embedding:3", "tied_head"])")
                .find("its table of 3 rows is shorter than the 4 positions per sample"),
            std::string::npos);
}

// The chunked head is the tied head, last, under a cross-entropy loss, with
// both chunk sizes; the plan then holds neither its logits nor their
// gradient.
TEST(ConfigTokens, TheChunkedHeadIsTheTiedHeadWithItsLoss) {
  const std::string lm = "vocabulary = 11\npositions = 4\nloss = \"causal_lm\"";
  const std::string tied = R"(["embedding:8", "layernorm", "tied_head"])";
  EXPECT_EQ(lm_rejection(lm + "\nhead_chunk = { rows = 3, vocabulary = 4 }", tied), "accepted");
  EXPECT_NE(lm_rejection(lm + "\nhead_chunk = { rows = 3, vocabulary = 4 }", R"(["embedding:8", "linear:11"])")
                .find("the chunked head is the tied head"),
            std::string::npos);
  EXPECT_NE(lm_rejection(lm + "\nhead_chunk = { rows = 3 }", tied).find("head_chunk must be { rows = R, vocabulary = C }"),
            std::string::npos);
  EXPECT_NE(lm_rejection(lm + "\nhead_chunk = { rows = 0, vocabulary = 4 }", tied).find("head_chunk.rows"),
            std::string::npos);
  const ScenarioSpec s = parse_scenarios("[[scenario]]\nname = \"t\"\n" + lm +
                                             "\nhead_chunk = { rows = 3, vocabulary = 4 }\nsplit = [[2, 2]]\nlayers = " +
                                             tied + "\n",
                                         "lm.toml")
                             .front();
  const ref::Model m(s.model);
  EXPECT_TRUE(m.chunked_head());
  EXPECT_EQ(m.stored_width(m.values() - 1), 0);
  EXPECT_EQ(m.widest_gradient(), 8);
  EXPECT_EQ(scenario_to_json(s).at("head_chunk").dump(), R"({"rows":3,"vocabulary":4})");
}

// Position t is scored against label t + 1 of its own sample; the last
// position and padding count for nothing, and the normaliser counts what
// is left: one fewer per sequence than the unshifted labels.
TEST(ConfigTokens, ShiftedLabelsStayInsideTheirSample) {
  const std::vector<int> labels = {5, 6, 7, ref::kIgnoreClass, 1, 2, 3, 4};
  EXPECT_EQ(ref::shifted_labels(labels, 4),
            (std::vector<int>{6, 7, ref::kIgnoreClass, ref::kIgnoreClass, 2, 3, 4, ref::kIgnoreClass}));
  ref::Batch b;
  b.positions = 4;
  b.inputs = ref::Matrix<double>::Zero(8, 1);
  b.classes = labels;
  EXPECT_EQ(b.items(ref::LossKind::causal_lm), 5);
  EXPECT_EQ(b.items(ref::LossKind::cross_entropy), 7);
}

TEST(ConfigGraph, ScenarioJsonWritesTheGraphBack) {
  const std::vector<ScenarioSpec> s = parse_scenarios(
      "[[scenario]]\nname = \"g\"\ninput_features = 4\nsplit = [[2, 2]]\n"
      "layers = [\"linear:4\", { concat = [\"linear:3\", { residual = [\"layernorm\", \"linear:3\"] }] }, \"linear:2\"]\n",
      "graph.toml");
  const nlohmann::json j = scenario_to_json(s.front());
  EXPECT_EQ(j.at("layers").dump(),
            R"(["linear:4",{"concat":["linear:3",{"residual":["layernorm","linear:3"]}]},"linear:2"])");
  const ScenarioSpec back = scenario_from_json(j, "back");
  EXPECT_EQ(ref::describe(back.model), ref::describe(s.front().model));
}

}  // namespace
}  // namespace gradeq
