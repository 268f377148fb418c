// model.cpp — a model's description resolved into its graph: nodes, the
// widths of its values, its parameters and buffers.
#include "reference/model.h"

#include <sstream>

namespace gradeq::ref {
namespace {

// "layer3" -> "3", "layer1.0" -> "1.0": the layer's place in the list, as
// messages name it.
std::string place(const std::string& prefix) { return prefix.substr(5); }

// A layer's options in the op's order, each given or at its default.
std::vector<long> resolved_options(const Op& op, long argument, const std::vector<long>& given) {
  const std::vector<OptionInfo> info = op.options();
  if (!given.empty() && given.size() != info.size())
    throw std::invalid_argument(": it takes " + std::to_string(info.size()) + " options, given " +
                                std::to_string(given.size()));
  std::vector<long> out;
  for (std::size_t i = 0; i < info.size(); ++i) {
    const long v = given.empty() ? info[i].default_value : given[i];
    out.push_back(v == kSameAsArgument ? argument : v);
    if (out.back() < info[i].minimum)
      throw std::invalid_argument(": its " + std::string(info[i].name) + " must be >= " +
                                  std::to_string(info[i].minimum) + ", got " + std::to_string(out.back()));
  }
  return out;
}

class Resolver {
 public:
  explicit Resolver(Model& m) : m_(m) {}

  // Resolves `layers` reading value x; returns the value the last one writes.
  std::size_t resolve(const std::vector<LayerSpec>& layers, const std::string& prefix, std::size_t x, bool top) {
    for (std::size_t j = 0; j < layers.size(); ++j) {
      const LayerSpec& l = layers[j];
      const std::string p = prefix.empty() ? "layer" + std::to_string(j) : prefix + "." + std::to_string(j);
      if (top) m_.block_starts.push_back(m_.nodes.size());
      if (!l.op) throw std::invalid_argument("model: layer " + place(p) + " has no op");
      const std::string where = "model: layer " + place(p) + " (" + std::string(l.op->name()) + ")";
      std::vector<std::size_t> inputs{x};
      if (l.op->combines()) {
        if (l.body.empty()) throw std::invalid_argument(where + ": its branch is empty");
        inputs.push_back(resolve(l.body, p, x, false));
      } else if (!l.body.empty()) {
        throw std::invalid_argument(where + " takes no branch");
      }
      if (l.op->masks_padding_keys() && m_.spec.token_input) inputs.push_back(0);
      x = add(l, p, where, inputs);
    }
    return x;
  }

 private:
  std::size_t add(const LayerSpec& l, const std::string& prefix, const std::string& where,
                  const std::vector<std::size_t>& inputs) {
    Node n;
    n.op = l.op;
    n.argument = l.argument;
    n.inputs = inputs;
    n.prefix = prefix;
    for (std::size_t v : inputs) {
      n.in_widths.push_back(m_.widths[v]);
      n.in_images.push_back(m_.images[v]);
      ++m_.consumers[v];
    }
    try {
      n.options = resolved_options(*l.op, l.argument, l.options);
      l.op->check_node(n);
      l.op->check_spec(l.argument, m_.spec);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + e.what());
    }
    n.out_width = l.op->node_output_width(n);
    n.out_image = l.op->output_image(n);
    const long index = static_cast<long>(m_.nodes.size());
    n.first_parameter = static_cast<long>(m_.parameters.size());
    for (const TensorInfo& t : l.op->node_parameters(n))
      m_.parameters.push_back({prefix + "." + t.name, index, t.rows, t.cols, t.init, t.start});
    n.parameters = static_cast<long>(m_.parameters.size()) - n.first_parameter;
    if (l.op->ties_token_embedding()) tie(n, where);
    n.first_buffer = static_cast<long>(m_.buffers.size());
    for (const TensorInfo& t : l.op->node_buffers(n))
      m_.buffers.push_back({prefix + "." + t.name, index, t.rows, t.cols, t.init, t.start});
    n.buffers = static_cast<long>(m_.buffers.size()) - n.first_buffer;
    n.output_value = m_.widths.size();
    m_.widths.push_back(n.out_width);
    m_.images.push_back(n.out_image);
    m_.consumers.push_back(0);
    m_.nodes.push_back(std::move(n));
    return m_.nodes.back().output_value;
  }

  // A head tied to the token embedding reads the embedding's weight
  // [vocabulary, width]: its input must have the embedding's width, and its
  // output has the vocabulary's.
  void tie(Node& n, const std::string& where) const {
    const Node* embedding = nullptr;
    for (const Node& e : m_.nodes)
      if (!embedding && e.op->reads_token_ids() && e.parameters == 1) embedding = &e;
    if (!embedding || !m_.spec.token_input)
      throw std::invalid_argument(where + ": a tied head needs the model's token embedding (vocabulary, embedding:D)");
    const ParameterInfo& w = m_.parameters[static_cast<std::size_t>(embedding->first_parameter)];
    if (n.in_widths[0] != w.cols)
      throw std::invalid_argument(where + ": its input has width " + std::to_string(n.in_widths[0]) +
                                  ", the tied embedding's " + std::to_string(w.cols));
    n.first_parameter = embedding->first_parameter;
    n.parameters = 1;
    n.out_width = w.rows;
  }

  Model& m_;
};

void describe_layers(std::ostream& os, const std::vector<LayerSpec>& layers) {
  for (std::size_t j = 0; j < layers.size(); ++j) {
    const LayerSpec& l = layers[j];
    if (j > 0) os << "-";
    os << (l.op ? l.op->describe(l.argument, l.options) : std::string("?"));
    if (!l.body.empty()) {
      os << "[";
      describe_layers(os, l.body);
      os << "]";
    }
  }
}

}  // namespace

std::string describe(const ImageShape& image) {
  return std::to_string(image.channels) + "x" + std::to_string(image.height) + "x" + std::to_string(image.width);
}

std::string Op::describe(long argument, std::span<const long> opts) const {
  std::string out = describe(argument);
  const std::vector<OptionInfo> info = options();
  std::string more;
  for (std::size_t i = 0; i < info.size() && i < opts.size(); ++i) {
    const long fallback = info[i].default_value == kSameAsArgument ? argument : info[i].default_value;
    if (info[i].positional || opts[i] != fallback)
      more += ", " + std::string(info[i].name) + " " + std::to_string(opts[i]);
  }
  if (more.empty()) return out;
  if (!out.empty() && out.back() == ')') return out.substr(0, out.size() - 1) + more + ")";
  return out + "(" + more.substr(2) + ")";
}

Model::Model(const ModelSpec& s) : spec(s) {
  if (s.input_features < 1) throw std::invalid_argument("model: input features must be >= 1");
  if (s.positions < 1) throw std::invalid_argument("model: positions per sample must be >= 1");
  if (s.image.is_image()) {
    if (s.image.height < 1 || s.image.width < 1 || s.token_input)
      throw std::invalid_argument("model: an image input has channels, height and width >= 1, and no token ids");
    if (s.image.size() != s.input_features || s.positions != 1)
      throw std::invalid_argument("model: an image input of " + ref::describe(s.image) +
                                  " is one row of C H W = " + std::to_string(s.image.size()) +
                                  " features per sample (positions 1)");
  }
  if (!(s.norm_eps > 0.0)) throw std::invalid_argument("model: norm eps must be > 0");
  if (!(s.bn_momentum >= 0.0 && s.bn_momentum <= 1.0))
    throw std::invalid_argument("model: batchnorm momentum must be in [0, 1]");
  if (s.layers.empty()) throw std::invalid_argument("model: it has no layers");
  widths.push_back(s.input_features);
  images.push_back(s.image);
  consumers.push_back(0);
  Resolver(*this).resolve(s.layers, "", 0, true);
  block_starts.push_back(nodes.size());
  if (s.padding_token >= 0 && (!s.token_input || s.padding_token >= s.input_features))
    throw std::invalid_argument("model: the padding token must be a token id, in [0, vocabulary)");
  for (const Node& n : nodes)
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const std::size_t v = n.inputs[i];
      const bool ids = v == 0 && s.token_input;
      if (ids && i == 1 && n.op->masks_padding_keys()) continue;
      if (ids && !n.op->reads_token_ids())
        throw std::invalid_argument("model: " + std::string(n.op->name()) +
                                    " reads the token ids: only an embedding reads a token model's input");
      if (!ids && n.op->reads_token_ids())
        throw std::invalid_argument("model: " + std::string(n.op->name()) +
                                    " reads token ids: it must be the first layer of a model whose input is tokens "
                                    "(vocabulary)");
    }
  if (s.loss == LossKind::cross_entropy && output_width() < 2)
    throw std::invalid_argument("model: cross-entropy needs >= 2 output classes");
  if (s.loss == LossKind::causal_lm && (!s.token_input || output_width() != s.input_features))
    throw std::invalid_argument("model: causal_lm scores each position against the next token: it needs token input "
                                "(vocabulary) and an output of the vocabulary's width (" +
                                std::to_string(s.input_features) + "), got " + std::to_string(output_width()));
  if (s.head_chunk_rows < 0 || s.head_chunk_vocabulary < 0 || (s.head_chunk_rows > 0) != (s.head_chunk_vocabulary > 0))
    throw std::invalid_argument("model: a chunked head has chunks of >= 1 rows and >= 1 vocabulary columns");
  if (s.head_chunk_rows > 0 && (s.loss == LossKind::mse || !nodes.back().op->ties_token_embedding()))
    throw std::invalid_argument("model: the chunked head is the tied head (tied_head) as the last layer, under "
                                "cross_entropy or causal_lm: it computes the head and its loss together");
}

bool Model::couples_samples() const {
  for (const Node& n : nodes)
    if (n.op->couples_samples()) return true;
  return false;
}

std::string loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::mse: return "mse";
    case LossKind::cross_entropy: return "cross_entropy";
    case LossKind::causal_lm: return "causal_lm";
  }
  return "?";
}

std::string describe(const ModelSpec& spec) {
  std::ostringstream os;
  os << "in(" << spec.input_features << (spec.token_input ? " tokens" : "") << ")-";
  describe_layers(os, spec.layers);
  os << " -> " << loss_name(spec.loss);
  if (spec.positions > 1) os << ", " << spec.positions << " positions/sample";
  if (spec.image.is_image()) os << ", images " << describe(spec.image);
  if (spec.head_chunk_rows > 0)
    os << ", head in chunks of " << spec.head_chunk_rows << " rows x " << spec.head_chunk_vocabulary << " columns";
  return os.str();
}

std::vector<ParameterInfo> parameter_layout(const ModelSpec& spec) { return Model(spec).parameters; }
std::vector<ParameterInfo> buffer_layout(const ModelSpec& spec) { return Model(spec).buffers; }
namespace {
bool any_in(const std::vector<LayerSpec>& layers, const std::function<bool(const Op&)>& test) {
  for (const LayerSpec& l : layers)
    if ((l.op && test(*l.op)) || any_in(l.body, test)) return true;
  return false;
}
}  // namespace

bool any_op(const ModelSpec& spec, const std::function<bool(const Op&)>& test) { return any_in(spec.layers, test); }
bool has_batch_norm(const ModelSpec& spec) {
  return any_op(spec, [](const Op& op) { return op.couples_samples(); });
}

}  // namespace gradeq::ref
