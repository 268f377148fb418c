// loop_plan.h — what the training loop allocates, planned from the model's
// graph and the scenario alone: the slots of the activations, the
// gradient buffers by liveness, the optimizer state used. TrainingLoop::
// allocate() allocates this plan, and loop_memory() predicts its bytes from
// the same plan, so the two cannot disagree (docs/MEMORY.md).
#pragma once

#include <cstddef>
#include <vector>

#include "harness/core/memory/types.h"
#include "harness/core/scenario.h"
#include "kernels/check.h"
#include "reference/model.h"

namespace gradeq {

// The optimizer state a configuration steps with (SGD without momentum: none).
OptimizerStateUse optimizer_state_use(const ref::OptimizerSpec& o);
// Where a micro-batch's activations and their gradients live.
//
// Value v of the model (its input, then each node's output) is stored in
// slots[slot_of[v]], a [rows, width] buffer. Without checkpointing each
// value has its own slot. With activation checkpointing every k blocks
// (top-level elements of the layer list: an op, or a combinator with its
// branch), the blocks form groups [0, k), [k, 2k), ...: the groups'
// inputs and the output keep their own slots, and the values inside a
// group share slots with the other groups' (slot i: the widest value i + 1
// nodes into a group), so that only one group's are alive at a time: the
// forward overwrites them group after group, and the backward recomputes
// each group's forward from its kept input before going back through it.
//
// Backward's gradients live in `gradient_buffers` buffers of [rows, the
// widest value], planned by liveness: a value's gradient takes a free
// buffer when backward first reaches one of its readers and gives it back
// once its own node is done. A value read by several nodes (the input of
// a residual block) gets its later readers' gradients in a further buffer
// each, added into its own (`add`). A chain needs two buffers.
//
// A token model's input, its ids, has a float32 slot of one column
// (`ids_slot`), whatever the compute dtype: bfloat16 holds whole numbers
// only up to 256.
struct LoopPlan {
  static constexpr std::size_t kNoSlot = static_cast<std::size_t>(-1);
  std::vector<long> slot_widths;
  std::size_t ids_slot = kNoSlot;
  std::vector<std::size_t> slot_of;  // per value
  std::size_t gradient_buffers = 0;
  std::size_t output_gradient = 0;   // the loss's dy
  struct Step {
    std::size_t dy = 0;
    std::vector<std::size_t> dx;  // per input: the buffer its gradient is written into
    std::vector<std::size_t> sum;  // per input: where dx is added (== dx: it is the value's first)
  };
  std::vector<Step> steps;  // per node
  std::vector<std::size_t> group_starts;  // the checkpoint groups' first nodes, and the node count
};
LoopPlan loop_plan(const ref::Model& model, long checkpoint_every);

// What the training loop allocates for the scenario when its largest
// micro-batch has `micro_batch_samples` samples, from the shapes and dtypes
// alone (scratch is the backend's and is not predicted: 0). With
// `spec.checkpoint_every` > 0 the activations are the checkpointed ones.
MemoryUsage loop_memory(const ScenarioSpec& spec, long micro_batch_samples);

// Activation bytes per sample (the slope of loop_memory's activations):
// those of two micro-batch sizes differ by exactly this per sample.
double activation_bytes_per_sample(const ScenarioSpec& spec);

}  // namespace gradeq
