// model.h — a model is a graph of ops ending in a loss. Its description
// (ModelSpec: the config's list of layers, where a combinator's branch
// nests) is resolved once into a Model: nodes in forward order, each with
// its op, the values it reads, its widths and its parameters' place. The
// float64 forward and backward walk the nodes. Tensors the kernel stores
// are passed through stored(), which is the identity for T = double and
// one rounding for T = Bounded.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/op.h"
#include "reference/tensor.h"

namespace gradeq::ref {

// One element of a model's layer list: an op and its argument, or a
// combinator and its branch (`body`), which nests.
struct LayerSpec {
  const Op* op = nullptr;
  long argument = 0;
  std::vector<LayerSpec> body;
  std::vector<long> options;  // the op's options(), in its order (empty: every one at its default)
};

struct ModelSpec {
  // The input's width. With token_input, the vocabulary: the input is a
  // token id per row, a one-hot row of this width stored as its index
  // ([rows, 1], whole numbers), read only by an embedding.
  long input_features = 1;
  bool token_input = false;
  long padding_token = -1;  // the id of padded positions (an embedding's padding_idx); < 0: none
  long positions = 1;  // rows per sample
  // An image input (channels > 0): each sample one row of C H W columns
  // (ImageShape), input_features their count and positions 1.
  ImageShape image;
  std::vector<LayerSpec> layers;
  LossKind loss = LossKind::mse;
  // The tied head and its cross-entropy in chunks (a fused linear
  // cross-entropy, its logits never held whole): blocks of head_chunk_rows
  // rows by chunks of head_chunk_vocabulary columns, an online log-sum-exp
  // over the chunks in order. 0: the head's logits whole, then the loss.
  long head_chunk_rows = 0, head_chunk_vocabulary = 0;
  double norm_eps = 1e-5;      // PyTorch's default for Batch/Layer/GroupNorm
  double bn_momentum = 0.1;    // PyTorch's default
};

std::string loss_name(LossKind kind);
// "in(8)-linear(16)-batchnorm-relu-linear(3) -> mse"; a combinator as
// "residual[layernorm-linear(8)]".
std::string describe(const ModelSpec& spec);

struct ParameterInfo {
  std::string name;  // "layer1.weight", "layer2.0.bias"
  long layer = 0;    // the node that owns it
  long rows = 0, cols = 0;
  Init init = Init::small;
  double start = 0.0;  // a buffer's initial value
};

// The resolved graph. Value 0 is the model's input and node n writes value
// n + 1; the last node's output is the model's output. Top-level element
// b of the layer list is nodes [block_starts[b], block_starts[b + 1]):
// activation checkpointing keeps the values between them.
struct Model {
  // Throws std::invalid_argument with a message naming the layer
  // ("model: layer 1.2 (groupnorm): ...").
  explicit Model(const ModelSpec& spec);

  ModelSpec spec;
  std::vector<Node> nodes;
  std::vector<long> widths;          // per value
  std::vector<ImageShape> images;    // per value (channels 0: not an image)
  std::vector<long> consumers;       // per value: the node inputs that read it
  std::vector<ParameterInfo> parameters, buffers;
  std::vector<std::size_t> block_starts;

  std::size_t values() const { return widths.size(); }
  long output_width() const { return widths.back(); }
  // The head and its loss computed together in chunks (ModelSpec).
  bool chunked_head() const { return spec.head_chunk_rows > 0; }
  // The columns value v is stored with in the training loop: its width,
  // but 1 for token ids, and none for a chunked head's logits.
  long stored_width(std::size_t v) const {
    if (v + 1 == widths.size() && chunked_head()) return 0;
    return v == 0 && spec.token_input ? 1 : widths[v];
  }
  // The widest value a gradient is kept for: every value's, but token ids
  // have none, nor a chunked head's logits.
  long widest_gradient() const {
    long w = 0;
    const std::size_t end = chunked_head() ? widths.size() - 1 : widths.size();
    for (std::size_t v = spec.token_input ? 1 : 0; v < end; ++v) w = std::max(w, widths[v]);
    return w;
  }
  bool couples_samples() const;  // a BatchNorm somewhere
};

// Throws std::invalid_argument with a message naming what is wrong.
inline void validate(const ModelSpec& spec) { (void)Model(spec); }
std::vector<ParameterInfo> parameter_layout(const ModelSpec& spec);
// Whether some layer's op, at any depth, satisfies `test` (without
// resolving the model: it may not be valid yet).
bool any_op(const ModelSpec& spec, const std::function<bool(const Op&)>& test);
std::vector<ParameterInfo> buffer_layout(const ModelSpec& spec);
bool has_batch_norm(const ModelSpec& spec);

template <class T>
using Tensors = std::vector<Matrix<T>>;

// BatchNorm statistics and backward coupling supplied from outside, per
// node (nullopt: compute from the batch at hand). Used by the exact
// BatchNorm-under-accumulation procedure, which computes them over the
// whole window.
template <class T>
struct WindowNorms {
  std::vector<std::optional<NormStatistics<T>>> statistics;
  std::vector<std::optional<NormCoupling<T>>> coupling;
};

// Everything backward needs from forward: every value (the input and each
// node's output) and the statistics each normalizer used.
template <class T>
struct Tape {
  Tensors<T> values;
  std::vector<std::optional<NormStatistics<T>>> statistics;  // per node
  const Matrix<T>& output() const { return values.back(); }
};

// running: the buffers to update (training mode), or nullptr.
template <class T>
Tape<T> forward(const Model& model, const Tensors<T>& params, const Matrix<T>& x, Tensors<T>* running = nullptr,
                const WindowNorms<T>* window = nullptr) {
  Tape<T> tape;
  tape.values.reserve(model.values());
  tape.statistics.resize(model.nodes.size());
  tape.values.push_back(quantized(x, Storage::compute));
  for (std::size_t n = 0; n < model.nodes.size(); ++n) {
    const Node& node = model.nodes[n];
    std::vector<const Matrix<T>*> in;
    for (std::size_t v : node.inputs) in.push_back(&tape.values[v]);
    const std::optional<NormStatistics<T>>* supplied =
        window && window->statistics.size() > n && window->statistics[n] ? &window->statistics[n] : nullptr;
    const OpForward<T> call{model,
                            node,
                            std::move(in),
                            params.data() + node.first_parameter,
                            running && node.buffers > 0 ? running->data() + node.first_buffer : nullptr,
                            tape.statistics[n],
                            supplied};
    tape.values.push_back(stored(node.op->forward(call), Storage::compute));
  }
  return tape;
}

// A pass's parameter gradients as its nodes make them: for each
// parameter, one fresh gradient per node that uses it, in the order
// backward reaches them. A weight with one use has one; a tied weight has
// two (the head's, then the embedding's), and the training loop adds each
// into the gradient buffer as it comes (procedure.h).
template <class T>
using Contributions = std::vector<Tensors<T>>;

// Each parameter's gradient: the sum of its contributions, as one
// addition each (the math; the procedure adds them as the loop does).
template <class T>
Tensors<T> total(Contributions<T>&& parts) {
  Tensors<T> out;
  for (Tensors<T>& p : parts) {
    Matrix<T> sum = std::move(p.at(0));
    for (std::size_t i = 1; i < p.size(); ++i) sum = Matrix<T>(sum + p[i]);
    out.push_back(std::move(sum));
  }
  return out;
}

template <class T>
struct Backward {
  Tensors<T> grads;        // fresh parameter gradients (not accumulated, not stored)
  Tensors<T> value_grads;  // the gradient arriving at each value
};

namespace detail {

// Backward from dy at the output. Gradients are fresh: the caller adds them
// into its accumulation buffer. A value read by several nodes gets the sum
// of their gradients, each stored, added in the order backward reaches
// them, as a kernel adds a branch's gradient into the residual stream.
// With `value_grads`, the gradient arriving at each value is kept there.
// With `release` (the tape itself, given away by the caller), each value
// is freed as soon as the backward of its last reader is done: at real
// widths the tape is most of a pass's memory. With `slice_sums` (per node,
// one per parameter it uses) the pass is over one slice of a batch's rows:
// its reductions over rows are added there and nothing is returned;
// otherwise each is decided as soon as its node is done.
template <class T>
Contributions<T> backward_pass(const Model& model, const Tensors<T>& params, const Tape<T>& tape,
                               const Matrix<T>& dy_out, const WindowNorms<T>* window, Tensors<T>* value_grads,
                               Tape<T>* release, std::vector<std::vector<RowSum<T>>>* slice_sums = nullptr) {
  Contributions<T> grads(slice_sums ? 0 : params.size());
  if (value_grads) value_grads->assign(model.values(), Matrix<T>());
  Tensors<T> g(model.values());
  std::vector<bool> reached(model.values(), false);
  std::vector<long> readers = model.consumers;
  g.back() = dy_out;
  reached.back() = true;
  for (std::size_t n = model.nodes.size(); n-- > 0;) {
    const Node& node = model.nodes[n];
    const std::size_t out = node.output();
    if (value_grads) (*value_grads)[out] = g[out];
    std::vector<const Matrix<T>*> x;
    std::vector<bool> needed;
    for (std::size_t v : node.inputs) {
      x.push_back(&tape.values[v]);
      needed.push_back(v > 0);
    }
    std::vector<RowSum<T>> local(slice_sums ? 0 : static_cast<std::size_t>(node.parameters));
    RowSum<T>* sums = slice_sums ? (*slice_sums)[n].data() : local.data();
    const NormCoupling<T>* supplied =
        window && window->coupling.size() > n && window->coupling[n] ? &*window->coupling[n] : nullptr;
    std::vector<Matrix<T>> dx(node.inputs.size());
    node.op->backward(OpBackward<T>{model, node, std::move(x), params.data() + node.first_parameter, g[out],
                                    tape.statistics[n] ? &*tape.statistics[n] : nullptr, supplied, sums,
                                    std::move(needed), dx});
    if (!slice_sums)
      for (long k = 0; k < node.parameters; ++k)
        grads[static_cast<std::size_t>(node.first_parameter + k)].push_back(
            std::move(local[static_cast<std::size_t>(k)]).result());
    g[out] = Matrix<T>();
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const std::size_t v = node.inputs[i];
      if (v == 0) continue;
      Matrix<T> d = stored(dx[i], Storage::compute);
      g[v] = reached[v] ? stored(Matrix<T>(g[v] + d), Storage::compute) : std::move(d);
      reached[v] = true;
    }
    if (release) {
      for (std::size_t v : node.inputs)
        if (--readers[v] == 0) release->values[v] = Matrix<T>();
      release->statistics[n].reset();
    }
  }
  return grads;
}

// The row sums of a pass in slices: per node, one per parameter it uses.
template <class T>
std::vector<std::vector<RowSum<T>>> slice_sums_for(const Model& model) {
  std::vector<std::vector<RowSum<T>>> sums;
  for (const Node& node : model.nodes) sums.emplace_back(static_cast<std::size_t>(node.parameters));
  return sums;
}

// The contributions the slices' sums decide, in backward order.
template <class T>
Contributions<T> decided(const Model& model, std::vector<std::vector<RowSum<T>>>&& sums, std::size_t parameters) {
  Contributions<T> out(parameters);
  for (std::size_t n = model.nodes.size(); n-- > 0;)
    for (long k = 0; k < model.nodes[n].parameters; ++k)
      out[static_cast<std::size_t>(model.nodes[n].first_parameter + k)].push_back(
          std::move(sums[n][static_cast<std::size_t>(k)]).result());
  return out;
}

}  // namespace detail

// Backward from dy at the output, keeping the gradient arriving at each
// value (the exact BatchNorm procedure's coupling needs them).
template <class T>
Backward<T> backward_with_value_grads(const Model& model, const Tensors<T>& params, const Tape<T>& tape,
                                      const Matrix<T>& dy_out, const WindowNorms<T>* window = nullptr) {
  Backward<T> out;
  out.grads = total(detail::backward_pass(model, params, tape, dy_out, window, &out.value_grads,
                                          static_cast<Tape<T>*>(nullptr)));
  return out;
}

// The parameters' gradients alone, from a tape that is kept.
template <class T>
Tensors<T> backward(const Model& model, const Tensors<T>& params, const Tape<T>& tape, const Matrix<T>& dy_out) {
  return total(detail::backward_pass(model, params, tape, dy_out, static_cast<const WindowNorms<T>*>(nullptr),
                                     static_cast<Tensors<T>*>(nullptr), static_cast<Tape<T>*>(nullptr)));
}

// Each parameter's contributions, from a tape given away: each value is
// freed once its last reader's backward is done.
template <class T>
Contributions<T> backward_contributions(const Model& model, const Tensors<T>& params, Tape<T>&& tape,
                                        const Matrix<T>& dy_out, const WindowNorms<T>* window = nullptr) {
  return detail::backward_pass(model, params, tape, dy_out, window, static_cast<Tensors<T>*>(nullptr), &tape);
}

// The parameters' gradients alone, from a tape given away.
template <class T>
Tensors<T> backward(const Model& model, const Tensors<T>& params, Tape<T>&& tape, const Matrix<T>& dy_out,
                    const WindowNorms<T>* window = nullptr) {
  return total(backward_contributions(model, params, std::move(tape), dy_out, window));
}

}  // namespace gradeq::ref
