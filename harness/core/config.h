// config.h — scenarios from a TOML file, for users who check their own
// models and splits with `gradeq check --config FILE`. Every key is
// validated; an unknown key, a wrong type or an impossible value raises
// std::invalid_argument naming the file, the scenario and the key.
//
//   [[scenario]]
//   name = "my_mlp"
//   input_features = 16
//   positions = 1                       # rows per sample (token sequences)
//   layers = ["linear:32", "gelu", "layernorm", "linear:4"]   # gelu: tanh form;
//                                       # also gelu_erf (nn.GELU()), batchnorm,
//                                       # rmsnorm, groupnorm:<groups>
//   loss = "mse"                        # or "cross_entropy"
//   data = "normal"                     # wide_range, padded_sequences, dyadic
//   split = [[3, 5, 2], [4, 4]]         # samples per micro-batch, per window
//   learning_rate = 0.1
//   seed = 5
//   normalization = "global_count"      # or "equal_split"
//   compute_dtype = "float32"           # bfloat16, float16
//   accumulate_dtype = "float32"
//   compensated = false                 # Kahan-compensated accumulation
//   optimizer = "sgd"                   # adam, adamw
//   momentum = 0.9                      # sgd: momentum, dampening, nesterov
//   weight_decay = 0.01                 # adam/adamw also: betas = [0.9, 0.999], eps
//   clip_max_norm = 1.0                 # clip by global norm once per window
//   warmup_steps = 10                   # with total_steps: warmup then cosine
//   total_steps = 100
//   loss_scale = 65536                  # a power of two; dynamic_loss_scale = true
//   growth_interval = 2000              # to grow it after this many good steps
//   tf32 = false                        # an external run's GEMMs read TF32 operands
//   reduced_precision_reduction = false # its GEMMs may reduce in the compute dtype
//   norm_eps = 1e-5                     # every normalizer's eps (PyTorch's default)
//   batchnorm_momentum = 0.1            # weight of a batch in the running statistics
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/core/scenario.h"

namespace gradeq {

inline constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;  // a scenario file is text, not a device

std::vector<ScenarioSpec> load_scenarios(const std::string& path);
std::vector<ScenarioSpec> parse_scenarios(const std::string& toml_text, const std::string& source_name);

// The same scenario as a JSON object of the config keys (every key written,
// defaults included), and back through the same reader and checks: the
// manifest of a window set (harness/core/window_set.h) carries it this way.
nlohmann::json scenario_to_json(const ScenarioSpec& spec);
ScenarioSpec scenario_from_json(const nlohmann::json& scenario, const std::string& where);

}  // namespace gradeq
