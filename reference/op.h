// op.h — what the reference asks of an op kind. An op kind (linear,
// layernorm, residual, ...) is one record: its config syntax, its
// parameters and buffers, its output width, and its float64 and bounded
// forward and backward. The records themselves live with the training
// loop's calls for the same op (harness/core/ops/, one file each); the
// reference sees them only through this interface, so that the model's
// graph (model.h) and the accumulation procedure (procedure.h) hold no
// list of kinds.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/layers.h"
#include "reference/tensor.h"

namespace gradeq::ref {

class Op;
struct Model;
struct ModelSpec;

// How a parameter's initial values are drawn (harness/core/scenario.cpp):
// `fan_in` N(0, 1/in) (a weight matrix), `small` N(0, 0.1^2) (a bias),
// `gain` 1 + N(0, 0.1^2) and `shift` N(0, 0.1^2) (a normalizer's affine pair).
enum class Init { fan_in, small, gain, shift };

// A parameter or buffer of one node; `name` without the node's prefix
// ("weight"). Buffers start at `start` (BatchNorm's running statistics).
struct TensorInfo {
  std::string name;
  long rows = 0, cols = 0;
  Init init = Init::small;
  double start = 0.0;
};

// An image value: channels x height x width per sample, stored as one row
// of C H W columns in PyTorch's NCHW order (channel c's plane is columns
// [c H W, (c + 1) H W)). channels 0: the value is not an image.
struct ImageShape {
  long channels = 0, height = 0, width = 0;
  bool is_image() const { return channels > 0; }
  long plane() const { return height * width; }
  long size() const { return channels * plane(); }
  bool operator==(const ImageShape&) const = default;
};
std::string describe(const ImageShape& image);  // "16x32x32"

// An option an op takes after its argument, in the config's layer text
// ("conv2d:16:3:stride=2:padding=1"): the positional ones in order, then
// the others as key=value in any order. An option left out takes its
// default; kSameAsArgument: the op's argument (a pool's stride).
struct OptionInfo {
  std::string_view name;
  long default_value = 0;
  bool positional = false;
  long minimum = 0;
};
inline constexpr long kSameAsArgument = -1;

// One node of a resolved model: an op applied to values of the model
// (value 0 is the model's input; node n writes value n + 1).
struct Node {
  const Op* op = nullptr;
  long argument = 0;                 // the op's config argument ("linear:8": 8); 0 where it takes none
  std::vector<long> options;         // the op's options(), in its order, defaults filled in
  std::vector<ImageShape> in_images;  // of the inputs (channels 0 where one is not an image)
  ImageShape out_image;              // of the output
  std::vector<std::size_t> inputs;   // values read: one, or two for a combinator (x, then the branch's output)
  std::string prefix;                // the parameters' prefix: "layer3", "layer1.0"
  std::vector<long> in_widths;       // of the inputs
  long out_width = 0;
  long first_parameter = 0, parameters = 0;  // the node's range in the model's parameter list
  long first_buffer = 0, buffers = 0;
  std::size_t output_value = 0;  // the value it writes
  std::size_t output() const { return output_value; }
};

// A forward call of one node: its inputs, its parameters (the node's own,
// in its parameters() order), the buffers to update (nullptr: not this
// pass), the tape's slot for the statistics the node uses, and the
// window's statistics where the procedure supplies them.
template <class T>
struct OpForward {
  const Model& model;
  const Node& node;
  std::vector<const Matrix<T>*> x;
  const Matrix<T>* params;
  Matrix<T>* running;
  std::optional<NormStatistics<T>>& statistics;
  const std::optional<NormStatistics<T>>* supplied;
};

// A backward call: the inputs, the parameters, the gradient at the node's
// output and what forward kept; the node's parameter gradients are added
// into `sums` (one per parameter), and dx[i] is written for every input
// with `needed[i]` (the gradient with respect to the model's input is
// not: a kernel does not compute it).
template <class T>
struct OpBackward {
  const Model& model;
  const Node& node;
  std::vector<const Matrix<T>*> x;
  const Matrix<T>* params;
  const Matrix<T>& dy;
  const NormStatistics<T>* statistics;
  const NormCoupling<T>* supplied;
  RowSum<T>* sums;
  std::vector<bool> needed;
  std::vector<Matrix<T>>& dx;
};

class Op {
 public:
  virtual ~Op() = default;
  // The config name: "linear", "layernorm", "residual".
  virtual std::string_view name() const = 0;
  // As describe() shows the node: "linear(16)", "groupnorm(4 groups)".
  virtual std::string describe(long argument) const {
    return argument > 0 ? std::string(name()) + "(" + std::to_string(argument) + ")" : std::string(name());
  }
  // With its options: "conv2d(16, kernel 3, stride 2)", those at their
  // default left out.
  std::string describe(long argument, std::span<const long> opts) const;
  // What the argument after ':' is ("output features", "groups"); empty
  // where the op takes none.
  virtual std::string_view argument() const { return {}; }
  // A combinator is written as a table { residual = [ ...branch... ] }: its
  // node reads the block's input and the branch's output.
  virtual bool combines() const { return false; }
  // Throws std::invalid_argument (without a location: the caller adds it)
  // where the argument does not fit the input widths.
  virtual void check(long /*argument*/, std::span<const long> /*in_widths*/) const {}
  // The same, for what depends on the model's description (its positions
  // per sample).
  virtual void check_spec(long /*argument*/, const ModelSpec& /*spec*/) const {}
  virtual long output_width(long /*argument*/, std::span<const long> in_widths) const { return in_widths[0]; }
  virtual std::vector<TensorInfo> parameters(long /*argument*/, std::span<const long> /*in_widths*/) const {
    return {};
  }
  virtual std::vector<TensorInfo> buffers(long /*argument*/, std::span<const long> /*in_widths*/) const { return {}; }
  // The options it takes after its argument (OptionInfo); none by default.
  virtual std::vector<OptionInfo> options() const { return {}; }
  // The node's shape rules, where they read more than the argument and the
  // widths (its options, its input's image): by default the three above.
  // An op that reads its input as an image (a convolution, a pool)
  // overrides these and output_image().
  virtual void check_node(const Node& n) const { check(n.argument, n.in_widths); }
  virtual long node_output_width(const Node& n) const { return output_width(n.argument, n.in_widths); }
  virtual std::vector<TensorInfo> node_parameters(const Node& n) const { return parameters(n.argument, n.in_widths); }
  virtual std::vector<TensorInfo> node_buffers(const Node& n) const { return buffers(n.argument, n.in_widths); }
  // The output's image: by default the first input's, where the output
  // has its width (an element-wise op, a normalizer, a residual block);
  // otherwise none.
  virtual ImageShape output_image(const Node& n) const {
    return !n.in_images.empty() && n.in_images[0].size() == n.out_width ? n.in_images[0] : ImageShape{};
  }
  // A normalizer (it has statistics groups: norm_shape).
  virtual bool normalizes() const { return false; }
  // A normalizer's statistics groups; nullopt for every other op.
  virtual std::optional<NormShape> norm_shape(const Model& /*model*/, const Node& /*node*/) const {
    return std::nullopt;
  }
  // Statistics over the whole batch (BatchNorm): a micro-batch cannot be
  // computed in slices, and the exact procedure supplies the window's.
  virtual bool couples_samples() const { return false; }
  // Whether its input is token ids (an embedding): only such an op reads
  // a token model's input, and it reads nothing else.
  virtual bool reads_token_ids() const { return false; }
  // Whether its one parameter is the model's token embedding's weight
  // [vocabulary, width] (a head tied to the embedding): it declares no
  // parameters of its own, its node reads the embedding's, and its output
  // has the vocabulary's width. The weight has two uses, and its gradient
  // is their sum.
  virtual bool ties_token_embedding() const { return false; }
  // Whether its node also reads a token model's ids, as its second input
  // (attention: keys whose id is the padding token are not seen).
  virtual bool masks_padding_keys() const { return false; }
  // Whether a row's output reads rows at later positions of its sample
  // (bidirectional attention): right padding then reaches the real rows
  // unless a mask keeps it out.
  virtual bool reads_later_positions() const { return false; }

  virtual Matrix<double> forward(const OpForward<double>& call) const = 0;
  virtual Matrix<Bounded> forward(const OpForward<Bounded>& call) const = 0;
  virtual void backward(const OpBackward<double>& call) const = 0;
  virtual void backward(const OpBackward<Bounded>& call) const = 0;
};

// The reference half of an op record from an Impl with two static
// templates, forward(const OpForward<T>&) -> Matrix<T> and
// backward(const OpBackward<T>&), instantiated for double and Bounded.
// Base is the record's interface (ref::Op, or the harness's OpRecord,
// which adds the training loop's calls).
template <class Impl, class Base = Op>
class OpWith : public Base {
 public:
  Matrix<double> forward(const OpForward<double>& c) const override { return Impl::forward(c); }
  Matrix<Bounded> forward(const OpForward<Bounded>& c) const override { return Impl::forward(c); }
  void backward(const OpBackward<double>& c) const override { Impl::backward(c); }
  void backward(const OpBackward<Bounded>& c) const override { Impl::backward(c); }
};

}  // namespace gradeq::ref
