// generators.h — RapidCheck generators of scenarios: shapes at awkward
// sizes (1, primes, powers of two and their neighbours), splits (equal,
// uneven, partial last window, power-of-two), data kinds (normal, wide
// dynamic range, padded sequences, dyadic). Generators only describe; the
// scenario's tensors come from its seed (harness/core/scenario.h), so a shrunk
// counterexample is a small, readable ScenarioSpec.
#pragma once

#include <ostream>

#include <rapidcheck.h>

#include "harness/core/scenario.h"

namespace gradeq {

// How large generated shapes are: small (the gate: hundreds of cases on two
// cores; widths up to 33) or large (widths at the tile boundaries of real
// kernels, 63 to 257, and longer sequences). Set before generating; one
// setting for every thread.
enum class SizeTier { small, large };
std::string size_tier_name(SizeTier t);
void set_size_tier(SizeTier t);
SizeTier size_tier();

// Feature widths a kernel gets wrong: 1, primes, 2^k and 2^k +- 1 (large
// tier: 1 and 2^k +- 1 for k = 6..8).
rc::Gen<long> awkward_width();
// Positions per sample of a sequence model: 2-6 (large tier: 8-32).
rc::Gen<long> sequence_positions();

enum class SplitShape { equal, uneven, partial_last_window, power_of_two };
std::string split_shape_name(SplitShape s);
rc::Gen<Split> split_of(SplitShape shape);
rc::Gen<Split> any_split();

// A model whose layers treat samples independently (linear, relu, gelu,
// layernorm, groupnorm, rmsnorm), with an MSE or cross-entropy head, and
// data to match.
rc::Gen<ScenarioSpec> independent_scenario();
// A causal language model as people fine-tune one, small: token ids over a
// vocabulary of 2-60 (Zipf, a padding token half of the time), token and
// (half of the time) position embeddings, 0-2 pre-LN residual MLP blocks
// (0-1 under 16-bit compute),
// a final LayerNorm, a head tied to the token embedding or not, the
// shifted-label loss over padded sequences; float32, bfloat16 or float16
// compute (float16 with a static loss scale), fused or staged
// accumulation, any optimizer, clip and schedule.
rc::Gen<ScenarioSpec> language_model_scenario();
// A language model around one pre-LN block of multi-head attention (1-4
// heads of 1-9 columns; causal, or a quarter of the time bidirectional
// where a padding token exists), after an MLP block half of the time in
// float32, then the final LayerNorm and a head tied or not; otherwise as
// language_model_scenario(), but in float32 alone on the large tier.
rc::Gen<ScenarioSpec> attention_scenario();
// Images through one or two convolutions (any kernel of 1-3, stride,
// padding, dilation, groups; odd sizes and borders), each followed by an
// activation and at times a max or average pool or an up-sampling, the
// global average pool half of the time, and a linear head, in float32 or
// bfloat16 compute.
rc::Gen<ScenarioSpec> conv_scenario();
// Linear, one or two BatchNorms, an activation; BatchNorm gets >= 2 values
// per channel in every micro-batch; half of them checkpoint activations.
rc::Gen<ScenarioSpec> batchnorm_scenario();
// An optimizer configuration: SGD (momentum, Nesterov, weight decay), Adam,
// AdamW; clipping that binds or none; warmup + cosine or constant.
rc::Gen<ref::ProcedureConfig> procedure_config();
// A batch-independent model trained over 2-4 windows with procedure_config().
rc::Gen<ScenarioSpec> optimizer_scenario();
// Compute dtype float32/bfloat16/float16, accumulation buffer
// float32/bfloat16/float16, plain or Kahan-compensated, float16 with static
// or dynamic loss scaling (windows that overflow are skipped).
rc::Gen<ScenarioSpec> mixed_precision_scenario();
// A model with a normalizer — LayerNorm, RMSNorm, GroupNorm or BatchNorm,
// as often each — in pre-norm blocks (on the raw input first) or post-norm
// ones, under bfloat16, float16 or float32 compute, with either loss,
// padded sequences included, half of them with an optimizer procedure.
rc::Gen<ScenarioSpec> normalized_scenario();
// What one rank of a data-parallel window runs (harness/core/data_parallel.h:
// the split is one rank's): a mixed-precision scenario without Kahan
// compensation, over at least two windows, half of them with an optimizer
// procedure (clipping that binds or none).
rc::Gen<ScenarioSpec> data_parallel_scenario();
// Many micro-batches (64 to 300) of one or two samples, float32 buffer.
rc::Gen<ScenarioSpec> long_accumulation_scenario();
// Token cross-entropy over padded sequences with the equal-split
// normalization shortcut, 1 / (N n_b).
rc::Gen<ScenarioSpec> equal_split_shortcut_scenario();
// A memory case: an independent, batchnorm, normalized or mixed-precision
// model, whose windows are N micro-batches of b samples (N = 2-8, the same
// for every window), activation checkpointing every 0 (off) to L layers.
rc::Gen<ScenarioSpec> memory_scenario();
// Any of the independent, batchnorm, optimizer and mixed-precision scenarios.
rc::Gen<ScenarioSpec> determinism_scenario();
// Linear/ReLU/MSE on dyadic data with power-of-two sizes and splits:
// float32 arithmetic on it is exact.
rc::Gen<ScenarioSpec> exact_scenario();

void showValue(const ScenarioSpec& s, std::ostream& os);

}  // namespace gradeq
