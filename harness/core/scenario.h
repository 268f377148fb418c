// scenario.h — what one equivalence check runs: a model, data of a given
// kind, a split of the data into windows of micro-batches, the procedure's
// configuration and the kernel's precision; all generated from one seed.
//
// A ScenarioSpec is the declarative description (what a user writes, what a
// property generates, what a report names); materialize() turns it into the
// float32-representable tensors every run starts from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/run_record.h"
#include "kernels/dtype.h"
#include "reference/procedure.h"

namespace gradeq {

enum class DataKind {
  normal,            // N(0, 1) inputs and targets
  wide_range,        // N(0, 1) scaled by 2^k, k uniform in [-10, 2], per element: 12 binades
  padded_sequences,  // token sequences of random length in [1, positions]; the rest is padding
  dyadic,            // small integers: float32 arithmetic on them is exact
  files,             // not generated: read from a window set's files (gradeq verify)
};

std::string data_kind_name(DataKind k);

// The kernel's precision configuration.
struct PrecisionSpec {
  DType compute = DType::f32;     // activations and the compute copy of the weights
  DType accumulate = DType::f32;  // the gradient accumulation buffer
  // What an external run declares of its arithmetic (docs/NUMERICS.md §11):
  bool tf32 = false;                         // GEMMs read float32 operands as TF32 (10-bit mantissa)
  bool reduced_precision_reduction = false;  // GEMM reductions may accumulate in the compute dtype
};

// A split: the micro-batch sizes (in samples) of each window. One window is
// one optimizer step.
using Split = std::vector<std::vector<long>>;

std::string describe_split(const Split& split);
// Every window's micro-batches merged into one: the full-batch counterpart.
Split full_batch_split(const Split& split);
long total_samples(const Split& split);

// Common split shapes.
Split equal_split(long windows, long micro_batches, long micro_batch_samples);
// A stream of `micro_batches` micro-batches of equal size, grouped into windows
// of `window` micro-batches; the last window is partial when it does not divide.
Split partial_last_window_split(long micro_batches, long window, long micro_batch_samples);

struct ScenarioSpec {
  std::string name;
  ref::ModelSpec model;
  DataKind data = DataKind::normal;
  Split split;
  ref::ProcedureConfig procedure;
  PrecisionSpec precision;
  std::uint64_t seed = 1;
  // Activation checkpointing in the training loop: the layers form blocks
  // of this many; only each block's input is kept, and the backward
  // recomputes the block's forward (harness/core/training_loop.h). 0: off. The
  // arithmetic is the same, so the reference ignores it.
  long checkpoint_every = 0;
  // How the reference runs, not what it computes: the full-batch and the
  // accumulated reference runs go one after the other instead of at once
  // (harness/core/equivalence.cpp), holding one run's parameter-sized state at a
  // time for up to twice the time. The gate sets it where both at once would not
  // fit in the memory allowed (fit_to_memory, harness/core/memory/reference_estimate.h); the
  // results are the same either way.
  bool reference_runs_in_turn = false;
  // How the reference runs, too: a micro-batch of more samples than this
  // (the full batch, above all) is computed in slices of this many samples
  // (ref::ProcedureConfig::slice_samples), holding one slice's activations
  // at a time. 0: whole. The gate sets it where even runs in turn would
  // not fit; the results are the same up to float64 summation order.
  long reference_slice_samples = 0;
};

// Domains (docs: README "A config file"): what validate() accepts.
inline constexpr long kMaxElements = 1L << 40;        // any one size or product of sizes
inline constexpr double kMaxLearningRate = 1e6;
inline constexpr double kMinLossScale = 0x1p-24, kMaxLossScale = 0x1p24;

// Throws std::invalid_argument naming the first thing that is wrong: the
// key, its domain and the value. Every size product is checked for
// overflow. Names: 1-64 printable ASCII characters without markup.
void validate(const ScenarioSpec& spec);
bool valid_scenario_name(const std::string& name);

// One line with everything that defines the scenario: model, data, split,
// procedure, precision, seed.
std::string describe_scenario(const ScenarioSpec& spec);
std::string describe_procedure(const ref::ProcedureConfig& p);

struct Scenario {
  ScenarioSpec spec;
  RunSchema schema;  // what every run of it records
  ref::Tensors<double> initial_params;
  std::vector<ref::Batch> windows;  // one batch per window, in order
  // Where the first window starts when it is not a fresh optimizer: the
  // schema's non-gradient entries (parameters, optimizer state, running
  // statistics, counters), e.g. a window set exported mid-training.
  std::optional<KernelWindow> initial_state;
};

Scenario materialize(const ScenarioSpec& spec);

// Deterministic per-item seed derived from a run seed (splitmix64).
std::uint64_t mix_seed(std::uint64_t run_seed, std::uint64_t item);
// The seed of a named item (a property, a mutant's cell): the name's FNV-1a
// hash mixed into the run seed, so an item's seed does not depend on which
// other items were selected.
std::uint64_t name_seed(std::uint64_t run_seed, const std::string& name);

}  // namespace gradeq
