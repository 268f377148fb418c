// scenario.cpp — splits, validation, and seeded generation of a scenario's
// tensors. Every generated value is rounded to float32 so that the float64
// reference and the kernels start from identical numbers.
#include "harness/core/scenario.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

namespace gradeq {
namespace {

// Portable, seeded draws: mt19937_64's sequence is fixed by the standard;
// the distributions are written here so results do not depend on the
// standard library's implementation of std::normal_distribution.
class SeededRandom {
 public:
  explicit SeededRandom(std::uint64_t seed) : engine_(seed) {}
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1p-53; }  // [0, 1)
  double normal() {                                                            // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  long integer(long lo, long hi) { return lo + static_cast<long>(uniform() * static_cast<double>(hi - lo + 1)); }

 private:
  std::mt19937_64 engine_;
};

double as_float32(double v) { return static_cast<double>(static_cast<float>(v)); }

ref::Matrix<double> draw(SeededRandom& rng, long rows, long cols, DataKind kind, double scale = 1.0) {
  ref::Matrix<double> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) {
    double v = 0.0;
    switch (kind) {
      case DataKind::normal:
      case DataKind::padded_sequences: v = scale * rng.normal(); break;
      case DataKind::wide_range: v = scale * rng.normal() * std::ldexp(1.0, static_cast<int>(rng.integer(-10, 2))); break;
      case DataKind::dyadic: v = static_cast<double>(rng.integer(-2, 2)); break;
      case DataKind::files: throw std::logic_error("data read from files is not generated");
    }
    m.data()[i] = as_float32(v);
  }
  return m;
}

ref::Matrix<double> filled(long rows, long cols, double v) { return ref::Matrix<double>::Constant(rows, cols, v); }

ref::Tensors<double> initial_parameters(const ScenarioSpec& s, SeededRandom& rng) {
  const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(s.model);
  const bool dyadic = s.data == DataKind::dyadic;
  ref::Tensors<double> params;
  for (const ref::ParameterInfo& p : layout) {
    switch (p.init) {
      // Dyadic weights stay small integers; others are scaled like a
      // standard initialization so activations keep unit size.
      case ref::Init::fan_in:
      case ref::Init::small:
        params.push_back(dyadic ? draw(rng, p.rows, p.cols, DataKind::dyadic)
                                : draw(rng, p.rows, p.cols, DataKind::normal,
                                       p.init == ref::Init::fan_in ? 1.0 / std::sqrt(static_cast<double>(p.cols)) : 0.1));
        break;
      // Normalizer affine parameters: gamma near 1, beta near 0.
      case ref::Init::gain:
      case ref::Init::shift: {
        const bool gain = p.init == ref::Init::gain;
        ref::Matrix<double> m = draw(rng, p.rows, p.cols, DataKind::normal, 0.1);
        if (gain) m.array() += 1.0;
        for (long i = 0; i < m.size(); ++i) m.data()[i] = as_float32(m.data()[i]);
        params.push_back(dyadic ? filled(p.rows, p.cols, gain ? 1.0 : 0.0) : m);
        break;
      }
    }
  }
  return params;
}

// Token ids from a Zipf distribution over the vocabulary, P(v) ∝ 1 / (v + 1)^1.1:
// the first tokens repeat hundreds of times in a window of thousands, as
// real text's do, so that an embedding's per-token sums are long.
ref::Matrix<double> zipf_tokens(SeededRandom& rng, long rows, long vocabulary) {
  std::vector<double> cumulative(static_cast<std::size_t>(vocabulary));
  double total = 0.0;
  for (long v = 0; v < vocabulary; ++v) cumulative[static_cast<std::size_t>(v)] = total += std::pow(v + 1.0, -1.1);
  ref::Matrix<double> ids(rows, 1);
  for (long r = 0; r < rows; ++r) {
    const double u = rng.uniform() * total;
    ids(r, 0) = static_cast<double>(std::min<long>(
        vocabulary - 1, std::lower_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin()));
  }
  return ids;
}

ref::Batch make_window(const ScenarioSpec& s, SeededRandom& rng, long samples) {
  const long rows = samples * s.model.positions;
  const long outputs = ref::Model(s.model).output_width();
  ref::Batch b;
  b.positions = s.model.positions;
  b.inputs = s.model.token_input ? zipf_tokens(rng, rows, s.model.input_features)
                                 : draw(rng, rows, s.model.input_features, s.data);
  if (s.model.loss == ref::LossKind::mse) {
    b.targets = s.data == DataKind::dyadic ? draw(rng, rows, outputs, DataKind::dyadic)
                                           : draw(rng, rows, outputs, DataKind::normal);
    return b;
  }
  b.classes.resize(static_cast<std::size_t>(rows));
  // A causal LM's labels are its own token ids (shifted by the loss), and
  // its sequences hold at least two tokens: one alone predicts nothing.
  const bool next_token = s.model.loss == ref::LossKind::causal_lm;
  const long shortest = next_token ? std::min(2L, s.model.positions) : 1;
  for (long sample = 0; sample < samples; ++sample) {
    const long length =
        s.data == DataKind::padded_sequences ? rng.integer(shortest, s.model.positions) : s.model.positions;
    for (long t = 0; t < s.model.positions; ++t) {
      const long r = sample * s.model.positions + t;
      const int label = next_token ? static_cast<int>(b.inputs(r, 0)) : static_cast<int>(rng.integer(0, outputs - 1));
      b.classes[static_cast<std::size_t>(r)] = t < length ? label : ref::kIgnoreClass;
    }
  }
  // A token model's padded positions hold the padding token.
  if (s.model.token_input && s.model.padding_token >= 0)
    for (long r = 0; r < rows; ++r)
      if (b.classes[static_cast<std::size_t>(r)] == ref::kIgnoreClass) b.inputs(r, 0) = static_cast<double>(s.model.padding_token);
  return b;
}

bool is_power_of_two(double v) {
  int e = 0;
  return v > 0.0 && std::frexp(v, &e) == 0.5;
}

}  // namespace

std::string data_kind_name(DataKind k) {
  switch (k) {
    case DataKind::normal: return "normal";
    case DataKind::wide_range: return "wide_range";
    case DataKind::padded_sequences: return "padded_sequences";
    case DataKind::dyadic: return "dyadic";
    case DataKind::files: return "files";
  }
  return "?";
}

std::string describe_split(const Split& split) {
  std::ostringstream os;
  for (std::size_t w = 0; w < split.size(); ++w) {
    if (w) os << " ";
    os << "[";
    for (std::size_t b = 0; b < split[w].size(); ++b) os << (b ? "," : "") << split[w][b];
    os << "]";
  }
  return os.str();
}

std::string describe_procedure(const ref::ProcedureConfig& p) {
  std::ostringstream os;
  os << ref::optimizer_name(p.optimizer);
  if (p.clip.enabled) os << ", clip " << p.clip.max_norm;
  if (p.schedule.warmup_cosine)
    os << ", warmup " << p.schedule.warmup_steps << " + cosine to " << p.schedule.total_steps;
  if (p.normalization == ref::Normalization::equal_split) os << ", equal-split normalization";
  if (p.loss_scaling.dynamic) {
    os << ", dynamic loss scale from " << p.loss_scaling.scale << " (growth every " << p.loss_scaling.growth_interval
       << ")";
  } else if (p.loss_scaling.scale != 1.0) {
    os << ", loss scale " << p.loss_scaling.scale;
  }
  if (p.compensated) os << ", Kahan-compensated accumulation";
  if (p.staged) os << ", staged accumulation (each micro-batch's gradient in the compute dtype, then added)";
  if (!p.frozen.empty()) os << ", " << p.frozen.size() << " frozen parameter" << (p.frozen.size() == 1 ? "" : "s");
  if (p.loss_scaling.dynamic && (p.loss_scaling.growth_factor != 2.0 || p.loss_scaling.backoff_factor != 0.5))
    os << ", growth x" << p.loss_scaling.growth_factor << ", backoff x" << p.loss_scaling.backoff_factor;
  if (p.batch_norm == ref::BatchNormMode::exact_window) os << ", exact-window batchnorm";
  if (p.ranks > 1 || p.sharded)
    os << ", data-parallel over " << p.ranks << " rank" << (p.ranks == 1 ? "" : "s") << (p.sharded ? " (sharded)" : "");
  return os.str();
}

std::string describe_scenario(const ScenarioSpec& s) {
  std::ostringstream os;
  os << "model: " << ref::describe(s.model) << "; data: "
     << (s.data == DataKind::files ? "read from files" : data_kind_name(s.data))
     << "; split: " << describe_split(s.split) << "; " << describe_procedure(s.procedure)
     << "; compute: " << dtype_name(s.precision.compute) << (s.precision.tf32 ? " (TF32 GEMMs)" : "")
     << (s.precision.reduced_precision_reduction ? " (reduced-precision reductions)" : "")
     << ", accumulate: " << dtype_name(s.precision.accumulate);
  if (s.checkpoint_every > 0) os << "; activation checkpointing every " << s.checkpoint_every << " layer(s)";
  if (s.data != DataKind::files) os << "; seed: " << s.seed;  // data read from files has none
  return os.str();
}

Split full_batch_split(const Split& split) {
  Split full;
  for (const auto& window : split) full.push_back({std::accumulate(window.begin(), window.end(), 0L)});
  return full;
}

long total_samples(const Split& split) {
  long n = 0;
  for (const auto& w : split) n += std::accumulate(w.begin(), w.end(), 0L);
  return n;
}

Split equal_split(long windows, long micro_batches, long micro_batch_samples) {
  return Split(static_cast<std::size_t>(windows), std::vector<long>(static_cast<std::size_t>(micro_batches), micro_batch_samples));
}

Split partial_last_window_split(long micro_batches, long window, long micro_batch_samples) {
  if (micro_batches < 1 || window < 1 || micro_batch_samples < 1)
    throw std::invalid_argument("split: micro-batches, window and micro-batch size must be >= 1");
  Split s;
  for (long first = 0; first < micro_batches; first += window)
    s.push_back(std::vector<long>(static_cast<std::size_t>(std::min(window, micro_batches - first)), micro_batch_samples));
  return s;
}

namespace {

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument(what); }

std::string number_text(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

// key: must be finite and in [lo, hi] (or (lo, hi] with open_low), got v.
void require_in(const std::string& key, double v, double lo, double hi, bool open_low = false, bool open_high = false) {
  const bool ok = std::isfinite(v) && (open_low ? v > lo : v >= lo) && (open_high ? v < hi : v <= hi);
  if (ok) return;
  const std::string range = std::string(open_low ? "(" : "[") + number_text(lo) + ", " +
                            (std::isinf(hi) ? std::string("inf") : number_text(hi)) + (open_high || std::isinf(hi) ? ")" : "]");
  refuse(key + " must be finite and in " + range + ", got " + number_text(v));
}

// a * b, or a refusal naming what overflowed.
long checked_product(long a, long b, const std::string& what) {
  long out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) || out > kMaxElements)
    refuse(what + " is too large (" + std::to_string(a) + " x " + std::to_string(b) + "; at most " +
           std::to_string(kMaxElements) + ")");
  return out;
}

}  // namespace

bool valid_scenario_name(const std::string& name) {
  const std::string markup = "\"\\|`<>&";  // what JUnit, Markdown and a shell would have to escape
  return !name.empty() && name.size() <= 64 && name.front() != ' ' && name.back() != ' ' &&
         std::all_of(name.begin(), name.end(), [&](char c) {
           return c >= 0x20 && c < 0x7f && markup.find(c) == std::string::npos;
         });
}

void validate(const ScenarioSpec& s) {
  if (!valid_scenario_name(s.name))
    refuse("name: 1-64 printable characters, no quote, backslash, | ` < > & or edge space (it names tests and "
           "report rows), got a name of " + std::to_string(s.name.size()) + " characters");
  ref::validate(s.model);
  require_in("norm_eps", s.model.norm_eps, 0.0, 1.0, /*open_low=*/true);
  const ref::Model model(s.model);
  const std::vector<long>& widths = model.widths;
  for (long w : widths) checked_product(w, 1, "a layer width");
  const std::size_t parameters = model.parameters.size();
  if (parameters == 0)
    refuse("layers: the model has no parameters (no linear or normalizer layer): there is no gradient to accumulate");
  for (std::size_t f : s.procedure.frozen)
    if (f >= parameters) refuse("frozen: parameter " + std::to_string(f) + " is not one of the model's");
  if (s.procedure.frozen.size() >= parameters)
    refuse("frozen: every parameter is frozen: there is no gradient to accumulate");
  if (s.split.empty()) refuse("split: at least one window is needed");
  if (s.checkpoint_every < 0 || s.checkpoint_every > static_cast<long>(s.model.layers.size()))
    refuse("checkpoint_every: blocks of 1 to " + std::to_string(s.model.layers.size()) +
           " layers (the model's), got " + std::to_string(s.checkpoint_every));
  long window_rows_max = 0;
  for (std::size_t w = 0; w < s.split.size(); ++w) {
    if (s.split[w].empty()) refuse("split: window " + std::to_string(w) + " has no micro-batches");
    long samples = 0;
    for (long n : s.split[w]) {
      if (n < 1)
        refuse("split: window " + std::to_string(w) + " has a micro-batch of " + std::to_string(n) +
               " samples; each needs >= 1");
      if (__builtin_add_overflow(samples, n, &samples) || samples > kMaxElements)
        refuse("split: window " + std::to_string(w) + " has too many samples");
    }
    window_rows_max = std::max(window_rows_max, checked_product(samples, s.model.positions, "a window's rows"));
  }
  for (long w : widths) checked_product(window_rows_max, w, "a window's activations (rows x features)");
  if (ref::has_batch_norm(s.model))
    for (const auto& window : s.split)
      for (long n : window)
        if (n * s.model.positions < 2)
          refuse("split: batchnorm needs >= 2 values per channel in every micro-batch, but a micro-batch of " +
                 std::to_string(n) + " sample(s) x " + std::to_string(s.model.positions) + " position(s) has " +
                 std::to_string(n * s.model.positions));
  if (s.data == DataKind::padded_sequences && s.model.loss == ref::LossKind::mse)
    refuse("data: padded_sequences needs the cross_entropy or causal_lm loss (padding is an ignore mask)");
  if (s.procedure.padding != ref::Padding::fixed) {
    if (s.data != DataKind::padded_sequences)
      refuse("padding: only padded_sequences data has padding to cut (data is " + data_kind_name(s.data) + ")");
    for (const ref::Node& node : model.nodes)
      if (const std::optional<ref::NormShape> shape = node.op->norm_shape(model, node);
          shape && shape->kind != ref::NormKind::layer && shape->kind != ref::NormKind::rms)
        refuse("padding: a BatchNorm's or GroupNorm's statistics span a sample's positions, padded ones included; "
               "only padding = \"fixed\" keeps them the same in a micro-batch and in the full batch");
      else if (node.op->reads_later_positions() && s.model.padding_token < 0)
        refuse("padding: " + std::string(node.op->name()) +
               " reads every position of a sample, padded ones included, unless they are masked: padding other "
               "than \"fixed\" needs a padding_token (its keys are masked)");
  }

  const ref::OptimizerSpec& o = s.procedure.optimizer;
  require_in("learning_rate", o.lr, 0.0, kMaxLearningRate, /*open_low=*/true);
  require_in("weight_decay", o.weight_decay, 0.0, kMaxLearningRate);
  if (o.kind == ref::OptimizerKind::sgd) {
    require_in("momentum", o.momentum, 0.0, 1.0);
    require_in("dampening", o.dampening, 0.0, 1.0);
    if (o.nesterov && (o.momentum == 0.0 || o.dampening != 0.0))
      refuse("nesterov needs momentum > 0 and dampening = 0 (as in PyTorch)");
  } else {
    require_in("betas[0]", o.beta1, 0.0, 1.0, false, /*open_high=*/true);
    require_in("betas[1]", o.beta2, 0.0, 1.0, false, /*open_high=*/true);
    require_in("eps", o.eps, 0.0, 1.0, /*open_low=*/true);
  }
  if (s.procedure.clip.enabled) require_in("clip_max_norm", s.procedure.clip.max_norm, 0.0, 1e30, /*open_low=*/true);
  const ref::ScheduleSpec& sch = s.procedure.schedule;
  if (sch.warmup_cosine && (sch.warmup_steps < 0 || sch.total_steps <= sch.warmup_steps))
    refuse("warmup_steps and total_steps: 0 <= warmup_steps < total_steps, got " + std::to_string(sch.warmup_steps) +
           " and " + std::to_string(sch.total_steps));
  const ref::LossScaling& ls = s.procedure.loss_scaling;
  if (!is_power_of_two(ls.scale) || ls.scale < kMinLossScale || ls.scale > kMaxLossScale)
    refuse("loss_scale must be a power of two in [2^-24, 2^24] (scaling is then exact in every dtype), got " +
           number_text(ls.scale));
  if (ls.dynamic && (!is_power_of_two(ls.growth_factor) || !is_power_of_two(ls.backoff_factor) ||
                     ls.growth_factor <= 1.0 || ls.backoff_factor >= 1.0 || ls.growth_interval < 1))
    refuse("dynamic loss scaling needs power-of-two growth > 1 and backoff < 1, and a growth_interval >= 1");
}

std::uint64_t mix_seed(std::uint64_t run_seed, std::uint64_t item) {
  std::uint64_t z = run_seed * 0x9e3779b97f4a7c15ull + item + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z == 0 ? 1 : z;
}

std::uint64_t name_seed(std::uint64_t run_seed, const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis and prime
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix_seed(run_seed, h);
}

Scenario materialize(const ScenarioSpec& spec) {
  validate(spec);
  SeededRandom rng(spec.seed);
  Scenario s{spec, run_schema(spec), initial_parameters(spec, rng), {}, std::nullopt};
  for (const auto& window : spec.split)
    s.windows.push_back(make_window(spec, rng, std::accumulate(window.begin(), window.end(), 0L)));
  return s;
}

}  // namespace gradeq
