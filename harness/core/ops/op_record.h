// op_record.h — an op kind's record: the reference's half (ref::Op: config
// syntax, parameters, shapes, float64 and bounded math) and the training
// loop's half (its calls on the Backend). One record per op kind, each in
// its own file in this folder; the registry (registry.h) lists them all,
// and nothing else in gradeq names an op kind.
#pragma once

#include <optional>
#include <vector>

#include "kernels/backend.h"
#include "reference/model.h"

namespace gradeq {

// One node's call on the backend, forward or backward, over the first
// `rows` rows of the micro-batch in hand.
struct LoopCall {
  LoopCall(Backend& b, const ref::Model& m, const ref::Node& n, long r) : backend(b), model(m), node(n), rows(r) {}
  Backend& backend;
  const ref::Model& model;
  const ref::Node& node;
  long rows = 0;
  std::vector<Tensor> x;         // the inputs, [rows, width]
  const Tensor* params = nullptr;  // the node's parameters as forward and backward read them
  const Tensor* buffers = nullptr;  // the node's buffers
  bool update_running = false;    // forward: update the buffers (not when checkpointing recomputes)
  Tensor saved_mean, saved_rstd;  // a normalizer's statistics (attention's row max and sum), written by forward, read by backward
  Tensor y;                       // forward: the output (overwrite); backward: what forward wrote
  Tensor dy;                      // backward: the gradient at the output
  std::vector<Tensor> dx;         // backward: per input (overwrite)
  std::vector<bool> needed;       // backward: whether dx[i] is read (the model's input's is not)
  const Tensor* grads = nullptr;  // backward: the node's parameter gradients (accumulate)
};

class OpRecord : public ref::Op {
 public:
  virtual void loop_forward(const LoopCall& call) const = 0;
  virtual void loop_backward(const LoopCall& call) const = 0;
  // The statistics groups a normalizer saves for backward at `rows` rows
  // (one float32 mean and 1/sigma each); 0 for every other op.
  virtual long saved_groups(const ref::Model& /*model*/, const ref::Node& /*node*/, long /*rows*/) const { return 0; }
  // How often the properties draw this op as the layer after a hidden
  // linear one in an independent model (properties/generators.cpp),
  // relative to the other ops' weights; 0: never there (the ops placed by
  // a model's structure: linear, the combinators; or drawn by generators of
  // their own: BatchNorm, which couples the samples of a micro-batch).
  virtual int generator_weight() const { return 0; }
};

template <class Impl>
using OpRecordWith = ref::OpWith<Impl, OpRecord>;

// The backend's description of a normalizer node; nullopt for other ops.
std::optional<NormConfig> norm_config(const ref::Model& model, const ref::Node& node);

}  // namespace gradeq
