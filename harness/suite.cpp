// suite.cpp — the default scenarios.
#include "harness/suite.h"

#include <cmath>

namespace gradeq {
namespace {
using ref::LayerKind;
using ref::LossKind;
}  // namespace

std::vector<ScenarioSpec> default_scenarios() {
  std::vector<ScenarioSpec> suite;
  {
    ScenarioSpec s;
    s.name = "mlp_mse_equal";
    s.model.input_features = 16;
    s.model.layers = {{LayerKind::linear, 32}, {LayerKind::relu, 0}, {LayerKind::linear, 4}};
    s.model.loss = LossKind::mse;
    s.split = equal_split(1, 4, 8);
    s.seed = 11;
    suite.push_back(s);
  }
  {
    ScenarioSpec s;
    s.name = "mlp_gelu_layernorm_uneven";
    s.model.input_features = 13;
    s.model.layers = {{LayerKind::linear, 31}, {LayerKind::gelu, 0}, {LayerKind::layer_norm, 0}, {LayerKind::linear, 5}};
    s.model.loss = LossKind::mse;
    s.split = {{3, 7, 5, 1}};
    s.seed = 12;
    suite.push_back(s);
  }
  {
    // Padded sequences make per-micro-batch token counts differ: the case
    // where a mean of per-micro-batch means goes wrong.
    ScenarioSpec s;
    s.name = "token_ce_padded_uneven";
    s.model.input_features = 16;
    s.model.positions = 8;
    s.model.layers = {{LayerKind::linear, 32}, {LayerKind::gelu, 0}, {LayerKind::layer_norm, 0}, {LayerKind::linear, 11}};
    s.model.loss = LossKind::cross_entropy;
    s.data = DataKind::padded_sequences;
    s.split = {{2, 5, 1, 4}, {3, 3, 2, 4}};
    s.seed = 13;
    suite.push_back(s);
  }
  {
    // Pre-norm blocks with RMSNorm, as in current language models.
    ScenarioSpec s;
    s.name = "token_ce_rmsnorm_uneven";
    s.model.input_features = 12;
    s.model.positions = 6;
    s.model.layers = {{LayerKind::rms_norm, 0}, {LayerKind::linear, 24}, {LayerKind::gelu, 0},
                      {LayerKind::linear, 12}, {LayerKind::rms_norm, 0}, {LayerKind::linear, 7}};
    s.model.loss = LossKind::cross_entropy;
    s.data = DataKind::padded_sequences;
    s.split = {{1, 4, 2}, {3, 2, 2}};
    s.seed = 18;
    suite.push_back(s);
  }
  {
    // 10 micro-batches in windows of 4: the last window holds 2.
    ScenarioSpec s;
    s.name = "partial_last_window";
    s.model.input_features = 8;
    s.model.layers = {{LayerKind::linear, 16}, {LayerKind::relu, 0}, {LayerKind::linear, 3}};
    s.model.loss = LossKind::mse;
    s.split = partial_last_window_split(10, 4, 4);
    s.seed = 14;
    suite.push_back(s);
  }
  {
    ScenarioSpec s;
    s.name = "wide_range_data";
    s.model.input_features = 17;
    s.model.layers = {{LayerKind::linear, 9}, {LayerKind::gelu, 0}, {LayerKind::linear, 2}};
    s.model.loss = LossKind::mse;
    s.data = DataKind::wide_range;
    s.split = {{5, 2, 9}, {4, 4, 8}};
    s.seed = 15;
    suite.push_back(s);
  }
  {
    // Exact arithmetic: every run must agree bitwise (see the Exactness property).
    ScenarioSpec s;
    s.name = "exact_dyadic";
    s.model.input_features = 8;
    s.model.layers = {{LayerKind::linear, 8}, {LayerKind::relu, 0}, {LayerKind::linear, 4}};
    s.model.loss = LossKind::mse;
    s.data = DataKind::dyadic;
    s.split = equal_split(1, 4, 4);
    s.procedure.optimizer.lr = 0.0625;
    s.seed = 16;
    suite.push_back(s);
  }
  {
    // The whole window in float32: AdamW with weight decay, clipping that
    // binds, warmup then cosine, uneven and partial windows.
    ScenarioSpec s;
    s.name = "mlp_adamw_clip_warmup";
    s.model.input_features = 12;
    s.model.layers = {{LayerKind::linear, 24}, {LayerKind::gelu, 0}, {LayerKind::layer_norm, 0}, {LayerKind::linear, 6}};
    s.model.loss = LossKind::mse;
    s.split = {{3, 5, 2, 6}, {4, 4, 4, 4}, {7, 1}};
    s.procedure.optimizer.kind = ref::OptimizerKind::adamw;
    s.procedure.optimizer.lr = 1e-2;  // hyper-parameters of the scenario, not tolerances
    s.procedure.optimizer.weight_decay = 0.1;
    s.procedure.clip = {true, 0.05};  // the gradient norm here is about 0.5: it binds
    s.procedure.schedule = {true, 1, 6};
    s.seed = 21;
    suite.push_back(s);
  }
  {
    // The most common real use: fine-tuning a language model on one GPU.
    // Token cross-entropy over padded sequences of varying length, AdamW with
    // clipping and warmup, bfloat16 compute, float32 accumulation, N = 16.
    ScenarioSpec s;
    s.name = "lm_finetune_adamw_bf16_n16";
    s.model.input_features = 16;
    s.model.positions = 12;
    s.model.layers = {{LayerKind::rms_norm, 0}, {LayerKind::linear, 32}, {LayerKind::gelu, 0}, {LayerKind::linear, 13}};
    s.model.loss = LossKind::cross_entropy;
    s.data = DataKind::padded_sequences;
    s.split = equal_split(3, 16, 2);
    s.procedure.optimizer.kind = ref::OptimizerKind::adamw;
    s.procedure.optimizer.lr = 1e-3;  // a typical fine-tuning rate; hyper-parameters, not tolerances
    s.procedure.optimizer.beta2 = 0.95;
    s.procedure.optimizer.weight_decay = 0.1;
    s.procedure.clip = {true, 0.25};  // binds: the gradient norm here is 0.36 to 0.46
    s.procedure.schedule = {true, 1, 10};
    s.precision.compute = DType::bf16;
    s.precision.accumulate = DType::f32;
    s.seed = 19;
    suite.push_back(s);
  }
  {
    // Mixed-precision training in float16 with a dynamic loss scale that
    // starts too high: the first windows overflow and are skipped, the scale
    // backs off, then grows again after good steps.
    ScenarioSpec s;
    s.name = "fp16_dynamic_loss_scale";
    s.model.input_features = 12;
    s.model.layers = {{LayerKind::linear, 24}, {LayerKind::gelu, 0}, {LayerKind::linear, 6}};
    s.model.loss = LossKind::mse;
    s.split = equal_split(8, 4, 4);
    s.procedure.optimizer.momentum = 0.9;
    s.procedure.optimizer.lr = 0.05;
    s.procedure.loss_scaling = {std::ldexp(1.0, 21), true, 2.0, 0.5, 2};
    s.precision.compute = DType::f16;
    s.precision.accumulate = DType::f32;
    s.seed = 20;
    suite.push_back(s);
  }
  // The vision recipe people bring to accumulation, without convolutions:
  // 4x4 spatial positions per image, per-channel normalization, dense
  // per-position classes; micro-batch 2, effective batch 32 (N = 16).
  for (const bool batch_norm : {true, false}) {
    ScenarioSpec s;
    s.name = batch_norm ? "vision_batchnorm_mb2_n16" : "vision_groupnorm_mb2_n16";
    s.model.input_features = 8;
    s.model.positions = 16;
    const ref::LayerSpec norm = batch_norm ? ref::LayerSpec{LayerKind::batch_norm, 0, 0} : ref::LayerSpec{LayerKind::group_norm, 0, 4};
    s.model.layers = {{LayerKind::linear, 16}, norm, {LayerKind::relu, 0},
                      {LayerKind::linear, 16}, norm, {LayerKind::relu, 0}, {LayerKind::linear, 10}};
    s.model.loss = LossKind::cross_entropy;
    s.split = equal_split(2, 16, 2);
    s.seed = 17;
    suite.push_back(s);
  }
  return suite;
}

const ScenarioSpec* find_scenario(const std::vector<ScenarioSpec>& suite, const std::string& name) {
  for (const ScenarioSpec& s : suite)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace gradeq
