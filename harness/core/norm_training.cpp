// norm_training.cpp — the normalizer training sweep, on the float64
// reference with its bounds.
#include "harness/core/norm_training.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include "harness/core/config.h"
#include "harness/core/equivalence.h"
#include "harness/core/ops/registry.h"
#include "harness/core/reference_run.h"
#include "harness/core/tolerance.h"
#include "reference/model.h"
#include "reference/procedure.h"

namespace gradeq {
namespace {

constexpr double kMomentum = 0.9;
constexpr double kNoise = 0.5;  // the pixel noise's standard deviation

// The net, its normalizer a placeholder: two 3x3 convolutions (8 and 16
// channels), each followed by the normalizer and a ReLU, a 2x2 max pool
// between them, global average pooling and a linear classifier.
std::vector<std::string> layer_texts(const std::string& norm, long classes) {
  return {"conv2d:8:3:padding=1", norm, "relu", "maxpool:2", "conv2d:16:3:padding=1", norm, "relu", "global_avgpool",
          "linear:" + std::to_string(classes)};
}

// A uniform draw in [0, 1) and a standard normal one (Box-Muller), from a
// splitmix64 stream: the same images on every platform.
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : state_(seed) {}
  double uniform() { return static_cast<double>(mix_seed(state_, ++count_) >> 11) * 0x1p-53; }
  double normal() {
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }
  long below(long n) { return static_cast<long>(uniform() * static_cast<double>(n)); }

 private:
  std::uint64_t state_, count_ = 0;
};

// The task: stripes of period 4 in one of `classes` orientations (class c
// at angle c pi / classes), at a random phase, contrast and colour, in
// noise of standard deviation 0.5. Position-free, so a convolution with
// global pooling learns it; the noise keeps it from being solved in one
// step.
ref::Batch stripes(const NormTrainingOptions& o, long samples, std::uint64_t seed) {
  Draws d(seed);
  const ref::ImageShape& im = o.image;
  ref::Batch b;
  b.inputs = ref::Matrix<double>(samples, im.size());
  b.positions = 1;
  for (long s = 0; s < samples; ++s) {
    const long c = d.below(o.classes);
    b.classes.push_back(static_cast<int>(c));
    const double angle = std::numbers::pi * static_cast<double>(c) / static_cast<double>(o.classes);
    const double fy = std::sin(angle), fx = std::cos(angle), phase = 2.0 * std::numbers::pi * d.uniform();
    const double contrast = 0.5 + d.uniform();
    std::vector<double> colour(static_cast<std::size_t>(im.channels));
    for (double& k : colour) k = 0.5 + d.uniform();
    for (long ch = 0; ch < im.channels; ++ch)
      for (long y = 0; y < im.height; ++y)
        for (long x = 0; x < im.width; ++x) {
          const double wave = std::sin(2.0 * std::numbers::pi * (fy * static_cast<double>(y) + fx * static_cast<double>(x)) / 4.0 + phase);
          b.inputs(s, (ch * im.height + y) * im.width + x) = contrast * colour[static_cast<std::size_t>(ch)] * wave + kNoise * d.normal();
        }
  }
  return b;
}

// A trajectory's state after a window, as float64 tensors in the model's
// layout: its parameters and running statistics.
struct State {
  ref::Tensors<double> params, buffers;
};

ref::Matrix<double> matrix_of(const ReferenceTensor& t) {
  ref::Matrix<double> m(t.rows, t.cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = t.value[static_cast<std::size_t>(i)];
  return m;
}

State state_of(const Scenario& s, const ReferenceWindow& w, const State& start) {
  State out = start;
  for (const RecordEntry& e : s.schema.entries) {
    if (e.kind == RecordKind::parameter) out.params[e.index] = matrix_of(find_tensor(w, e.name));
    if (e.kind == RecordKind::statistic) out.buffers[e.index] = matrix_of(find_tensor(w, e.name));
  }
  return out;
}

double distance(const ref::Tensors<double>& a, const ref::Tensors<double>& b) {
  double d = 0.0;
  for (std::size_t t = 0; t < a.size(); ++t) d += (a[t] - b[t]).squaredNorm();
  return std::sqrt(d);
}

// Evaluation mode on the held-out set: BatchNorm normalizes with its running
// statistics (supplied to the forward, which then leaves them alone), the
// other normalizers as in training. Mean cross-entropy and accuracy.
TrainingPoint evaluate(const ref::Model& model, const State& st, const ref::Batch& held_out, double train_loss) {
  ref::WindowNorms<double> running;
  running.statistics.resize(model.nodes.size());
  for (std::size_t n = 0; n < model.nodes.size(); ++n) {
    const ref::Node& node = model.nodes[n];
    if (!node.op->couples_samples()) continue;
    const ref::Matrix<double>& mean = st.buffers[node.first_buffer];
    const ref::Matrix<double>& var = st.buffers[node.first_buffer + 1];
    ref::NormStatistics<double> s;
    for (long c = 0; c < mean.cols(); ++c) {
      s.mean.push_back(mean(0, c));
      s.rstd.push_back(1.0 / std::sqrt(var(0, c) + model.spec.norm_eps));
      s.unbiased_var.push_back(var(0, c));
    }
    running.statistics[n] = std::move(s);
  }
  const ref::Tape<double> tape = ref::forward<double>(model, st.params, held_out.inputs, nullptr, &running);
  const ref::Matrix<double>& logits = tape.output();
  double loss = 0.0;
  long right = 0;
  for (long r = 0; r < logits.rows(); ++r) {
    long best = 0;
    for (long c = 1; c < logits.cols(); ++c)
      if (logits(r, c) > logits(r, best)) best = c;
    const double top = logits(r, best);
    double sum = 0.0;
    for (long c = 0; c < logits.cols(); ++c) sum += std::exp(logits(r, c) - top);
    const int label = held_out.classes[static_cast<std::size_t>(r)];
    loss += top + std::log(sum) - logits(r, label);
    right += best == label;
  }
  const double n = static_cast<double>(logits.rows());
  return {train_loss, loss / n, static_cast<double>(right) / n};
}

// Per window, the largest |acc - full| / (acc's float64 bound + full's) over
// every parameter element; +inf where the difference is not finite or has
// no bound to fall within.
double worst_ratio(const Scenario& s, const ReferenceWindow& acc, const ReferenceWindow& full) {
  double worst = 0.0;
  for (const RecordEntry& e : s.schema.entries) {
    if (e.kind != RecordKind::parameter) continue;
    const ReferenceTensor& a = find_tensor(acc, e.name);
    const ReferenceTensor& f = find_tensor(full, e.name);
    for (std::size_t i = 0; i < a.value.size(); ++i) {
      const double diff = std::abs(a.value[i] - f.value[i]);
      const double bound = math_bound(a.reference_bound[i], f.reference_bound[i]);
      const double ratio = !std::isfinite(diff) ? HUGE_VAL : diff == 0.0 ? 0.0 : bound > 0.0 ? diff / bound : HUGE_VAL;
      worst = std::max(worst, ratio);
    }
  }
  return worst;
}

std::vector<TrainingPoint> points_of(const Scenario& s, const ref::Model& model, const ReferenceRun& run,
                                     const State& start, const ref::Batch& held_out) {
  std::vector<TrainingPoint> out;
  for (const ReferenceWindow& w : run.windows) out.push_back(evaluate(model, state_of(s, w, start), held_out, w.loss));
  return out;
}

}  // namespace

bool NormTrainingCurve::within_reach() const {
  for (double r : worst_ratio)
    if (!(r <= 1.0)) return false;
  return true;
}

bool NormTraining::passed() const {
  for (const NormTrainingCurve& c : curves)
    if (!c.expected_divergence && !c.within_reach()) return false;
  return true;
}

ScenarioSpec norm_training_scenario(const NormTrainingOptions& o, const std::string& norm, long micro_batch) {
  if (micro_batch < 1 || o.effective_batch % micro_batch != 0)
    throw std::invalid_argument("sweep norms: micro-batch size " + std::to_string(micro_batch) +
                                " does not divide the effective batch " + std::to_string(o.effective_batch));
  std::ostringstream split;
  for (long w = 0; w < o.windows; ++w) {
    split << (w ? ", [" : "[");
    for (long m = 0; m < o.effective_batch / micro_batch; ++m) split << (m ? ", " : "") << micro_batch;
    split << "]";
  }
  std::ostringstream layers;
  for (const std::string& l : layer_texts(norm, o.classes)) layers << (layers.tellp() > 0 ? ", \"" : "[\"") << l << "\"";
  layers << "]";
  std::ostringstream toml;
  toml << "[[scenario]]\nname = \"norm_training\"\nimage = [" << o.image.channels << ", " << o.image.height << ", "
       << o.image.width << "]\nlayers = " << layers.str() << "\nloss = \"cross_entropy\"\nsplit = [" << split.str()
       << "]\nlearning_rate = " << o.learning_rate << "\nmomentum = " << kMomentum << "\nseed = " << o.seed << "\n";
  return parse_scenarios(toml.str(), "sweep norms (" + norm + ")").at(0);
}

NormTraining run_norm_training(const NormTrainingOptions& o, const ProgressSink& progress) {
  const auto started = std::chrono::steady_clock::now();
  if (o.windows < 1) throw std::invalid_argument("sweep norms: --windows must be >= 1");
  if (o.classes < 2 || o.held_out < 1) throw std::invalid_argument("sweep norms: needs 2 classes and a held-out set");
  NormTraining out;
  out.options = o;
  std::ostringstream model;
  for (const std::string& l : layer_texts("NORM", o.classes)) model << l << "-";
  model << "> cross_entropy, images " << ref::describe(o.image) << ", SGD lr " << o.learning_rate << " momentum "
        << kMomentum << ", effective batch " << o.effective_batch;
  out.model = model.str();
  out.task = std::to_string(o.classes) + " classes of stripes (period 4, one orientation per class, random phase, "
             "contrast and colour, noise " + std::to_string(kNoise).substr(0, 3) + "); " + std::to_string(o.windows) + " windows of fresh samples, " +
             std::to_string(o.held_out) + " held-out samples";
  const ref::Batch held_out = stripes(o, o.held_out, mix_seed(o.seed, 0x4e1d));
  for (const std::string& norm : o.norms) {
    // The one-batch trajectory, shared by every micro-batch size.
    Scenario full_sc = materialize(norm_training_scenario(o, norm, o.effective_batch));
    for (long w = 0; w < o.windows; ++w)
      full_sc.windows[static_cast<std::size_t>(w)] = stripes(o, o.effective_batch, mix_seed(o.seed, static_cast<std::uint64_t>(w + 1)));
    const ref::Model model(full_sc.spec.model);
    const State start{full_sc.initial_params,
                      ref::initial_state<double>(full_sc.spec.model, full_sc.spec.procedure, full_sc.initial_params).buffers};
    const auto status = [&](const std::string& run) {
      return progress ? ProgressSink([&progress, norm, run](const std::string& s) { progress("sweep norms: " + norm + ", " + run + ": " + s); })
                      : ProgressSink{};
    };
    const ReferenceRun full = run_reference(full_sc, full_sc.spec.split, ErrorModel{}, status("one batch"));
    out.norms.push_back(norm);
    out.one_batch.push_back(points_of(full_sc, model, full, start, held_out));
    std::vector<State> full_states;
    for (const ReferenceWindow& w : full.windows) full_states.push_back(state_of(full_sc, w, start));
    for (long b : o.micro_batch_sizes) {
      const ScenarioSpec spec = norm_training_scenario(o, norm, b);
      Scenario sc = full_sc;
      sc.spec = spec;
      NormTrainingCurve c;
      c.norm = norm;
      c.micro_batch = b;
      c.micro_batches = o.effective_batch / b;
      c.expected_divergence = !expects_equivalence(spec);
      const ReferenceRun acc = run_reference(sc, spec.split, ErrorModel{},
                                             status("micro-batch " + std::to_string(b) + " (N = " + std::to_string(c.micro_batches) + ")"));
      c.accumulated = points_of(sc, model, acc, start, held_out);
      for (std::size_t w = 0; w < acc.windows.size(); ++w) {
        const State a = state_of(sc, acc.windows[w], start);
        const State& f = full_states[w];
        const double moved = distance(f.params, start.params);
        c.distance.push_back(distance(a.params, f.params) / moved);
        c.worst_ratio.push_back(worst_ratio(sc, acc.windows[w], full.windows[w]));
        if (!start.buffers.empty()) c.running_drift.push_back(distance(a.buffers, f.buffers) / distance(f.buffers, start.buffers));
      }
      out.curves.push_back(std::move(c));
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace gradeq
