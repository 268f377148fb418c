// Scenario description and validation, comparisons (NaN never passes), the
// verdicts of a scenario, and the .npy dump.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <algorithm>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/core/backends.h"
#include "harness/core/ops/registry.h"
#include "harness/core/compare.h"
#include "harness/core/config.h"
#include "harness/core/memory/reference_estimate.h"
#include "harness/core/equivalence.h"
#include "harness/gate/gate.h"
#include "harness/gate/selftest.h"
#include "harness/gate/worker.h"
#include "harness/core/suite.h"
#include "reports/report.h"
#include "kernels/cpu/cpu_backend.h"
#include "support.h"

namespace gradeq::test {
namespace {

ScenarioSpec small_scenario() {
  ScenarioSpec s;
  s.name = "small";
  s.model.input_features = 3;
  s.model.layers = {layer_of("linear", 4), layer_of("relu"), layer_of("linear", 2)};
  s.split = {{2, 3}};
  return s;
}

TEST(Scenario, SplitsDescribeThemselves) {
  EXPECT_EQ(describe_split(equal_split(2, 3, 4)), "[4,4,4] [4,4,4]");
  EXPECT_EQ(describe_split(partial_last_window_split(10, 4, 2)), "[2,2,2,2] [2,2,2,2] [2,2]");
  EXPECT_EQ(describe_split(full_batch_split({{1, 2}, {3}})), "[3] [3]");
  EXPECT_EQ(total_samples({{1, 2}, {3}}), 6);
}

TEST(Scenario, BadInputIsRejectedWithAMessage) {
  auto expect_rejected = [](ScenarioSpec s, const std::string& fragment) {
    try {
      validate(s);
      ADD_FAILURE() << "accepted a scenario with " << fragment;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  ScenarioSpec s = small_scenario();
  s.split = {{2, 0}};
  expect_rejected(s, "micro-batch of 0 samples");
  s.split = {{2, -1}};
  expect_rejected(s, "micro-batch of -1 samples");
  s.split = {};
  expect_rejected(s, "at least one window");
  s.split = {{}};
  expect_rejected(s, "no micro-batches");
  s = small_scenario();
  s.model.input_features = 0;
  expect_rejected(s, "input features");
  s = small_scenario();
  s.model.layers[0].argument = 0;
  expect_rejected(s, "output features");
  s = small_scenario();
  s.data = DataKind::padded_sequences;
  expect_rejected(s, "cross_entropy");
  s = small_scenario();
  s.procedure.loss_scaling.scale = 3.0;
  expect_rejected(s, "power of two");
  s = small_scenario();
  s.procedure.optimizer.lr = -1.0;
  expect_rejected(s, "learning_rate must be finite and in (0, ");
  EXPECT_THROW(partial_last_window_split(0, 4, 2), std::invalid_argument);
}

TEST(Scenario, MaterializeIsDeterministicAndFloat32) {
  const Scenario a = materialize(small_scenario()), b = materialize(small_scenario());
  ASSERT_EQ(a.windows.size(), 1u);
  EXPECT_EQ(a.windows[0].inputs, b.windows[0].inputs);
  EXPECT_EQ(a.windows[0].samples(), 5);
  for (long i = 0; i < a.windows[0].inputs.size(); ++i) {
    const double v = a.windows[0].inputs.data()[i];
    EXPECT_EQ(static_cast<double>(static_cast<float>(v)), v);
  }
}

TEST(Scenario, PaddedSequencesVaryInLength) {
  ScenarioSpec s = small_scenario();
  s.model.loss = ref::LossKind::cross_entropy;
  s.model.positions = 6;
  s.data = DataKind::padded_sequences;
  s.split = {{8, 8}};
  const Scenario sc = materialize(s);
  std::set<long> lengths;
  for (long sample = 0; sample < 16; ++sample) {
    long n = 0;
    for (long t = 0; t < 6; ++t) n += sc.windows[0].classes[sample * 6 + t] != ref::kIgnoreClass;
    EXPECT_GE(n, 1);
    lengths.insert(n);
  }
  EXPECT_GT(lengths.size(), 2u);
}

TEST(Compare, NanAndInfNeverPass) {
  const std::vector<double> expected = {1.0, 2.0}, bound = {1.0, 1.0};
  EXPECT_FALSE(compare_tensor("t", 1, 2, DType::f32, expected, {1.0, std::nan("")}, bound).passed());
  EXPECT_FALSE(compare_tensor("t", 1, 2, DType::f32, expected, {1.0, HUGE_VAL}, bound).passed());
  EXPECT_FALSE(compare_tensor("t", 1, 2, DType::f32, expected, {1.0, 2.0}, {1.0, HUGE_VAL}).passed());
  EXPECT_TRUE(compare_tensor("t", 1, 2, DType::f32, expected, {1.5, 2.0}, bound).passed());
  const TensorCheck c = compare_tensor("t", 1, 2, DType::f32, expected, {1.0, 4.0}, bound);
  EXPECT_FALSE(c.passed());
  EXPECT_EQ(c.worst_index, 1);
  EXPECT_EQ(c.worst_ratio, 2.0);
  EXPECT_NE(c.failure_reason().find("exceeds its bound"), std::string::npos);
}

TEST(Compare, Metrics) {
  const TensorCheck c = compare_tensor("t", 1, 2, DType::f32, {1.0, -2.0}, {1.0 + 0x1p-23, -2.0}, {1.0, 1.0});
  EXPECT_DOUBLE_EQ(c.metrics.max_abs, 0x1p-23);
  EXPECT_DOUBLE_EQ(c.metrics.max_ulp, 1.0);
  EXPECT_NEAR(c.metrics.cosine, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(ulp_in(1.0, DType::bf16), 0x1p-7);
  EXPECT_DOUBLE_EQ(ulp_in(0.0, DType::f16), 0x1p-24);
}

// Every scenario of the default suite, on every backend (cuda skipped with
// the reason where there is no device).
class DefaultSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(DefaultSuite, PassesOnCorrectCode) {
  GRADEQ_BACKEND_OR_SKIP(backend, GetParam());
  for (const ScenarioSpec& s : default_scenarios()) {
    const ScenarioResult r = check_scenario(s, *backend, correct_loop(), ErrorModel{});
    EXPECT_TRUE(r.passed()) << s.name << ": " << r.first_failure();
    EXPECT_FALSE(r.vacuous) << s.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DefaultSuite, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

// The default suite's image scenarios with direct-form convolutions: other
// summation orders than im2col's, under the same bounds.
class DirectConvSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(DirectConvSuite, ImageScenariosPass) {
  GRADEQ_BACKEND_OR_SKIP(backend, GetParam());
  int images = 0;
  for (const ScenarioSpec& s : default_scenarios()) {
    if (s.model.image.channels == 0) continue;
    ++images;
    const ScenarioResult r = check_scenario(s, *backend, correct_loop(), ErrorModel{});
    EXPECT_TRUE(r.passed()) << s.name << ": " << r.first_failure();
    EXPECT_FALSE(r.vacuous) << s.name;
  }
  EXPECT_GE(images, 4);
}

INSTANTIATE_TEST_SUITE_P(Backends, DirectConvSuite, ::testing::Values("cpu-direct", "cuda-direct"), [](const auto& info) {
  return info.param.substr(0, info.param.find('-')) + "_direct";
});

// A backend that normalizes each micro-batch by its own item count instead
// of the window's: it forgets the 1/N. The gate must fail.
class ForgetsOneOverN : public CpuBackend {
 public:
  double loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float, const Tensor& dy) override {
    long items = y.rows;
    if (k == LossKind::cross_entropy) {
      std::vector<float> t(static_cast<std::size_t>(targets.size()));
      download(targets, t);
      items = std::count_if(t.begin(), t.end(), [](float c) { return c >= 0; });
    }
    return CpuBackend::loss_forward_backward(k, y, targets, 1.0f / static_cast<float>(items), dy);
  }
};

TEST(Equivalence, ForgottenOneOverNFailsTheGate) {
  ForgetsOneOverN broken;
  const ScenarioSpec s = *find_scenario(default_scenarios(), "mlp_mse_equal");
  const ScenarioResult r = check_scenario(s, broken, correct_loop(), ErrorModel{});
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.accumulation.status, Status::fail);
  EXPECT_EQ(r.math.status, Status::pass) << "the reference is not affected";
  EXPECT_GT(r.accumulation.worst_ratio, 10.0);
}

// A frozen parameter (requires_grad = False) has no gradient, no optimizer
// state and no place in the clip's norm, and must not change: the loop
// that leaves it alone passes; one that steps it anyway fails on its
// weights, named.
class StepsFrozenParameters : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void optimizer_step() override {
    step_learning_rate_ = learning_rate();
    backend_.optimizer_step(make_optimizer_step(procedure().optimizer, step_learning_rate_, step_), params_, grads_,
                            first_moment_, second_moment_);
    ++step_;
  }
};

TEST(Equivalence, FrozenParametersStayAsTheyWere) {
  const std::vector<ScenarioSpec> specs = parse_scenarios(R"(
[[scenario]]
name = "frozen_first_layer"
input_features = 12
layers = ["linear:24", "gelu", "layernorm", "linear:6"]
loss = "mse"
split = [[3, 5, 2, 6], [4, 4]]
optimizer = "adamw"
learning_rate = 1e-2
weight_decay = 0.1
clip_max_norm = 0.05
frozen = ["layer0.weight", "layer0.bias"]
)", "frozen.toml");
  const ScenarioSpec& s = specs.front();
  const Scenario scenario = materialize(s);
  for (const RecordEntry& e : scenario.schema.entries)
    EXPECT_FALSE(e.kind != RecordKind::parameter && e.name.find("layer0.") != std::string::npos)
        << e.name << " recorded for a frozen parameter";
  CpuBackend cpu;
  const Runs runs = execute(scenario, cpu, correct_loop(), ErrorModel{});
  const ScenarioResult r = judge(scenario, runs);
  EXPECT_TRUE(r.passed()) << r.first_failure();
  for (const KernelWindow& w : runs.k_acc.windows)
    EXPECT_EQ(find_tensor(w, "param/layer0.weight").values,
              std::vector<double>(scenario.initial_params[0].data(),
                                  scenario.initial_params[0].data() + scenario.initial_params[0].size()));
  const ScenarioResult stepped =
      check_scenario(s, cpu, [](Backend& b) { return std::make_unique<StepsFrozenParameters>(b); }, ErrorModel{});
  EXPECT_EQ(stepped.kernel.status, Status::fail);
  EXPECT_NE(stepped.kernel.note.find("param/layer0."), std::string::npos) << stepped.kernel.note;
  EXPECT_THROW(parse_scenarios("[[scenario]]\nname = \"x\"\ninput_features = 2\nlayers = [\"linear:2\"]\n"
                               "split = [[1]]\nfrozen = [\"layer0.weight\", \"layer0.bias\"]\n", "all.toml"),
               std::invalid_argument);
  try {
    parse_scenarios("[[scenario]]\nname = \"x\"\ninput_features = 2\nlayers = [\"linear:2\"]\nsplit = [[1]]\n"
                    "frozen = [\"layer3.weight\"]\n", "bad.toml");
    ADD_FAILURE() << "an unknown frozen parameter was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'layer3.weight' is not a parameter of the model (layer0.weight, "
                                         "layer0.bias)"),
              std::string::npos)
        << e.what();
  }
}

// Without dynamic loss scaling every run's first window starts from the
// initial state and no kernel decision enters it, so execute() reuses the
// reference's own first window. It must be bit for bit the window a run
// from the kernel's state computes.
TEST(Equivalence, ReusedFirstWindowIsTheOneComputedFromTheKernelRun) {
  CpuBackend cpu;
  long reused = 0;
  for (const ScenarioSpec& spec : default_scenarios()) {
    if (spec.procedure.loss_scaling.dynamic) continue;
    const Scenario s = materialize(spec);
    const Runs runs = execute(s, cpu, correct_loop(), ErrorModel{});
    const Split full = full_batch_split(spec.split);
    auto expect_same = [&](const ReferenceWindow& reused_window, const std::vector<long>& micro_batches,
                           const KernelWindow& kernel, bool impose) {
      const ReferenceWindow computed = run_reference_window(s, 0, micro_batches, nullptr, ErrorModel{},
                                                            ref::SkipRule{kernel.skipped, impose});
      ASSERT_EQ(computed.tensors.size(), reused_window.tensors.size()) << spec.name;
      EXPECT_EQ(computed.loss, reused_window.loss) << spec.name;
      for (std::size_t t = 0; t < computed.tensors.size(); ++t) {
        const ReferenceTensor &a = computed.tensors[t], &b = reused_window.tensors[t];
        EXPECT_EQ(a.value, b.value) << spec.name << " " << a.name;
        EXPECT_EQ(a.kernel_bound, b.kernel_bound) << spec.name << " " << a.name;
        EXPECT_EQ(a.reference_bound, b.reference_bound) << spec.name << " " << a.name;
      }
      ++reused;
    };
    expect_same(runs.r_full_at_k_full.windows[0], full[0], runs.k_full.windows[0], false);
    expect_same(runs.r_acc_at_k_acc.windows[0], spec.split[0], runs.k_acc.windows[0], false);
    expect_same(runs.r_full_at_k_acc.windows[0], full[0], runs.k_acc.windows[0], true);
  }
  EXPECT_GT(reused, 0) << "no default scenario without dynamic loss scaling";
}

// A long check reports where it is: the kernel runs, then every window of
// both reference runs as it starts and every micro-batch of the
// accumulated one, then the later windows from the kernel's states; and
// reporting changes nothing it computes.
TEST(Equivalence, ProgressNamesEveryWindowAndMicroBatch) {
  CpuBackend cpu;
  const ScenarioSpec spec = *find_scenario(default_scenarios(), "partial_last_window");  // windows of 4, 4 and 2
  std::vector<std::string> lines;
  std::mutex mutex;
  const ProgressSink sink = [&](const std::string& line) {
    const std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  };
  const ScenarioResult reported = check_scenario(spec, cpu, correct_loop(), ErrorModel{}, sink);
  const ScenarioResult silent = check_scenario(spec, cpu, correct_loop(), ErrorModel{});
  auto seen = [&](const std::string& text) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(seen("kernel: full batch"));
  EXPECT_TRUE(seen("kernel: accumulated"));
  for (std::size_t w = 0; w < spec.split.size(); ++w) {
    const std::string window = "window " + std::to_string(w + 1) + "/3";
    EXPECT_TRUE(seen("reference: full batch " + window)) << window;
    for (std::size_t b = 1; b <= spec.split[w].size(); ++b)
      EXPECT_TRUE(seen("accumulated " + window + ", micro-batch " + std::to_string(b) + "/" +
                       std::to_string(spec.split[w].size())))
          << window << " micro-batch " << b;
  }
  EXPECT_TRUE(seen("reference from kernel states:"));
  EXPECT_FALSE(seen("micro-batch 1/1")) << "a one-micro-batch window has nothing to count";
  ASSERT_EQ(reported.kernel.checks.size(), silent.kernel.checks.size());
  for (std::size_t i = 0; i < reported.kernel.checks.size(); ++i)
    EXPECT_EQ(reported.kernel.checks[i].worst_ratio, silent.kernel.checks[i].worst_ratio) << i;
  EXPECT_EQ(reported.accumulation.worst_ratio, silent.accumulation.worst_ratio);
}

// The estimate counts a weight gradient's per-pair sums after a normalizer
// (reference/matmul_sources.cpp, pair_sums) where the rule follows the statistics
// one by one: a GroupNorm over at most 8 samples (two sources each) meets
// each output with at most 16. A token normalizer's rows meet it with
// more, and the rule folds them all, also where both operands of dW = dy^T
// x hold exact zeros (x after a ReLU and an RMSNorm of it, dy on padded
// tokens): outputs_that_fold counts them without the sums. Measured: a
// padded ReLU-RMSNorm-linear model kept 262 MB of them at 4,096 rows before
// that count, none after (docs/PERFORMANCE.md §2).
TEST(Equivalence, EstimateCountsPairSumsWhereTheRuleFollowsSources) {
  const auto estimate = [](std::vector<ref::LayerSpec> layers, DataKind data) {
    ScenarioSpec s = *find_scenario(default_scenarios(), "token_ce_padded_uneven");
    s.model.layers = std::move(layers);
    s.data = data;
    s.split = {{2, 2}};  // a pass over at most 4 samples of 8 positions
    validate(s);
    return estimated_peak_bytes(s);
  };
  const std::vector<ref::LayerSpec> relu_rms_linear{layer_of("linear", 32), layer_of("layernorm"),
                                                     layer_of("relu"),     layer_of("rmsnorm"),
                                                     layer_of("linear", 11)};
  EXPECT_EQ(estimate(relu_rms_linear, DataKind::padded_sequences), estimate(relu_rms_linear, DataKind::normal))
      << "zeros in x and dy: the rule still folds a token normalizer's statistics";
  // The same parameters (a weight and a bias per feature) and widths; no
  // token normalizer before, whose statistics would meet every output.
  const std::vector<ref::LayerSpec> relu_layer_norm_linear{layer_of("linear", 32),
                                                           layer_of("relu"),
                                                           layer_of("layernorm"),
                                                           layer_of("linear", 11)};
  std::vector<ref::LayerSpec> relu_group_norm_linear = relu_layer_norm_linear;
  relu_group_norm_linear[2] = layer_of("groupnorm", 4);
  EXPECT_GT(estimate(relu_group_norm_linear, DataKind::normal), estimate(relu_layer_norm_linear, DataKind::normal))
      << "a GroupNorm's statistics over a few samples: followed one by one, their sums kept";
}

// A scenario whose two reference runs at once would not fit in the memory
// allowed, but one at a time would, runs them in turn, with the same
// results; one that does not fit even then is refused; no limit, no change.
TEST(Equivalence, ReferenceRunsGoInTurnWhereBothAtOnceWouldNotFit) {
  ScenarioSpec spec = *find_scenario(default_scenarios(), "partial_last_window");
  const double at_once = estimated_peak_bytes(spec);
  ScenarioSpec in_turn_spec = spec;
  in_turn_spec.reference_runs_in_turn = true;
  const double in_turn = estimated_peak_bytes(in_turn_spec);
  ASSERT_LT(in_turn, at_once);

  fit_to_memory(spec, 0.0);
  EXPECT_FALSE(spec.reference_runs_in_turn) << "no limit";
  fit_to_memory(spec, at_once);
  EXPECT_FALSE(spec.reference_runs_in_turn) << "both fit at once";
  fit_to_memory(spec, 0.5 * (in_turn + at_once));
  EXPECT_TRUE(spec.reference_runs_in_turn);
  EXPECT_EQ(spec.reference_slice_samples, 0) << "in turn fits: no slices";
  ScenarioSpec smallest_spec = in_turn_spec;
  smallest_spec.reference_slice_samples = 1;
  try {
    ScenarioSpec refused = spec;
    fit_to_memory(refused, 0.99 * estimated_peak_bytes(smallest_spec));
    ADD_FAILURE() << "a scenario that does not fit even in turn and in slices is refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("even with its reference runs in turn and its passes in slices of 1 sample"),
              std::string::npos)
        << e.what();
  }

  CpuBackend cpu;
  const ScenarioSpec at_once_spec = *find_scenario(default_scenarios(), "partial_last_window");
  std::vector<std::string> lines;
  const ScenarioResult in_turn_result =
      check_scenario(spec, cpu, correct_loop(), ErrorModel{}, [&](const std::string& l) { lines.push_back(l); });
  const ScenarioResult at_once_result = check_scenario(at_once_spec, cpu, correct_loop(), ErrorModel{});
  ASSERT_EQ(in_turn_result.kernel.checks.size(), at_once_result.kernel.checks.size());
  for (std::size_t i = 0; i < in_turn_result.kernel.checks.size(); ++i)
    EXPECT_EQ(in_turn_result.kernel.checks[i].worst_ratio, at_once_result.kernel.checks[i].worst_ratio) << i;
  EXPECT_EQ(in_turn_result.accumulation.worst_ratio, at_once_result.accumulation.worst_ratio);
  EXPECT_EQ(in_turn_result.math.worst_ratio, at_once_result.math.worst_ratio);
  // In turn: the accumulated run starts after the full-batch run's last window.
  const auto first = [&](const std::string& text) {
    return std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; }) -
           lines.begin();
  };
  const long full_done = first("reference: full batch window 3/3"), accumulated_starts = first("accumulated window 1/3");
  ASSERT_LT(accumulated_starts, static_cast<long>(lines.size()));
  EXPECT_LT(full_done, accumulated_starts);
  CheckReport report;
  report.scenarios = {in_turn_result};
  EXPECT_NE(report_json(report).dump().find("\"reference_runs_in_turn\":true"), std::string::npos);
}

// Where even runs in turn would not fit, passes over more samples than fit
// go in slices: of the largest micro-batch's samples, halved until the
// scenario fits; the verdicts are the same, the kernel's and accumulation's
// ratios the same up to float64 summation order; the progress counts the slices, and the
// console line and report.json say so. Through BatchNorm a pass cannot be
// sliced: refused.
TEST(Equivalence, PassesGoInSlicesWhereEvenRunsInTurnWouldNotFit) {
  const ScenarioSpec at_once_spec = *find_scenario(default_scenarios(), "token_ce_padded_uneven");  // largest micro-batch: 5
  const auto estimate = [&](long slice) {
    ScenarioSpec s = at_once_spec;
    s.reference_runs_in_turn = true;
    s.reference_slice_samples = slice;
    return estimated_peak_bytes(s);
  };
  ASSERT_LT(estimate(5), estimate(0));
  ASSERT_LT(estimate(2), estimate(5));
  ASSERT_LT(estimate(1), estimate(2));
  ScenarioSpec spec = at_once_spec;
  fit_to_memory(spec, 0.5 * (estimate(5) + estimate(0)));
  EXPECT_TRUE(spec.reference_runs_in_turn);
  EXPECT_EQ(spec.reference_slice_samples, 5);
  fit_to_memory(spec, 0.5 * (estimate(1) + estimate(2)));
  EXPECT_EQ(spec.reference_slice_samples, 1);
  fit_to_memory(spec, 0.5 * (estimate(2) + estimate(5)));
  EXPECT_EQ(spec.reference_slice_samples, 2) << "5 halved";
  ScenarioSpec batch_norm = *find_scenario(default_scenarios(), "vision_batchnorm_mb2_n16");
  ScenarioSpec batch_norm_in_turn = batch_norm;
  batch_norm_in_turn.reference_runs_in_turn = true;
  try {
    fit_to_memory(batch_norm, 0.99 * estimated_peak_bytes(batch_norm_in_turn));
    ADD_FAILURE() << "BatchNorm cannot be sliced";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("through BatchNorm a pass cannot be sliced"), std::string::npos) << e.what();
  }

  CpuBackend cpu;
  std::vector<std::string> lines;
  const ScenarioResult sliced =
      check_scenario(spec, cpu, correct_loop(), ErrorModel{}, [&](const std::string& l) { lines.push_back(l); });
  const ScenarioResult whole = check_scenario(at_once_spec, cpu, correct_loop(), ErrorModel{});
  EXPECT_TRUE(sliced.passed());
  const auto same = [](const Verdict& a, const Verdict& b, const char* what) {
    EXPECT_EQ(a.status, b.status) << what;
    EXPECT_NEAR(a.worst_ratio, b.worst_ratio, 1e-6 * b.worst_ratio + 1e-12) << what;
  };
  same(sliced.kernel, whole.kernel, "kernel correctness");
  same(sliced.accumulation, whole.accumulation, "accumulation equivalence");
  // Math equivalence measures the two float64 references against their own
  // bounds, the scale at which summation order moves them: the same verdict.
  EXPECT_EQ(sliced.math.status, whole.math.status);
  // The full batch of window 1 (12 samples) in 6 slices of 2; its micro-batch of 5 in 3.
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.find("full batch window 1/2, row slice 5/6") != std::string::npos; }),
            lines.end());
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.find("full batch window 1/2, row slice 6/6") != std::string::npos; }),
            lines.end())
      << "the last slice is reported too";
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) {
                           return l.find("accumulated window 1/2, micro-batch 2/4, row slice 2/3") != std::string::npos;
                         }),
            lines.end());
  CheckReport report;
  report.scenarios = {sliced};
  EXPECT_NE(report_json(report).dump().find("\"reference_slice_samples\":2"), std::string::npos);
  EXPECT_NE(check_summary(report).find("reference runs in turn and in slices of 2 samples to fit in memory"),
            std::string::npos)
      << check_summary(report);
}

// A progress board shows every part's latest status on one line, in the order
// the parts were declared, whichever reports first (two threads race to it).
TEST(ProgressBoard, ShowsEveryPartOnOneLine) {
  std::vector<std::string> lines;
  ProgressBoard board([&](const std::string& l) { lines.push_back(l); }, "reference", {"full batch", "accumulated"});
  // The accumulated run reports first: the parts keep their declared order.
  board.set("accumulated", "window 1/2, micro-batch 1/4");
  board.set("full batch", "window 1/2");
  board.set("full batch", "window 2/2");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "reference: accumulated window 1/2, micro-batch 1/4");
  EXPECT_EQ(lines[1], "reference: full batch window 1/2; accumulated window 1/2, micro-batch 1/4");
  EXPECT_EQ(lines[2], "reference: full batch window 2/2; accumulated window 1/2, micro-batch 1/4");
  EXPECT_THROW(board.set("kernel", "window 1/2"), std::logic_error);
}

// Jobs shared with a worker process: each runs once, results come back by
// index, in the order given; both processes take jobs when `first` keeps
// this one busy.
TEST(ShareJobs, EveryJobOnceByIndexInBothProcesses) {
  const pid_t parent = getpid();
  for (bool with_worker : {false, true}) {
    const std::vector<std::size_t> order = {3, 0, 4, 1, 5, 2, 7, 6};
    auto job = [&](std::size_t i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return std::to_string(i * i) + (getpid() == parent ? " here" : " worker");
    };
    auto busy = [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); };
    const std::vector<std::string> r = share_jobs(order.size(), job, busy, with_worker, order);
    ASSERT_EQ(r.size(), order.size());
    long worker_jobs = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r[i].substr(0, r[i].find(' ')), std::to_string(i * i));
      worker_jobs += r[i].ends_with(" worker");
    }
    if (with_worker) {
      EXPECT_GT(worker_jobs, 0) << "the worker took the jobs while this process was busy";
    } else {
      EXPECT_EQ(worker_jobs, 0);
    }
  }
  EXPECT_THROW(share_jobs(2, [](std::size_t) { return std::string(); }, {}, false, {0, 0}), std::invalid_argument);
}

TEST(ShareJobs, AWorkerThatFailsOrDiesIsAnError) {
  const pid_t parent = getpid();
  auto busy = [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); };
  auto throws_there = [&](std::size_t) -> std::string {
    if (getpid() != parent) throw std::runtime_error("no such tensor");
    return "ok";
  };
  try {
    share_jobs(4, throws_there, busy, true);
    ADD_FAILURE() << "a job that threw in the worker was not reported";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no such tensor"), std::string::npos) << e.what();
  }
  auto dies_there = [&](std::size_t) -> std::string {
    if (getpid() != parent) std::raise(SIGKILL);
    return "ok";
  };
  try {
    share_jobs(4, dies_there, busy, true);
    ADD_FAILURE() << "a worker killed by a signal was not reported";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("signal 9"), std::string::npos) << e.what();
  }
}

// What a worker hands back is the run itself, bit for bit.
TEST(ShareJobs, PropertyRunsSurviveTheTrip) {
  PropertyRun r;
  r.name = "AccumulationEquivalence";
  r.passed = false;
  r.cases = 17;
  r.counterexample = "split [[3, 1]]\nwith a tab\t";
  r.counterexample_spec = *find_scenario(default_scenarios(), "token_ce_padded_uneven");
  r.message = "accumulation equivalence: grad/layer0.weight: error 2.5 x bound";
  r.reproduce = "reproduce=BchdlNGdvJ3XzFGbj5WZ";
  r.worst_ratio = HUGE_VAL;
  r.worst_case = "case";
  r.discarded_vacuous = 2;
  r.discarded_ill_conditioned = 1;
  r.seconds = 0.1 + 0.2;
  const PropertyRun back = decode_property_run(encode_property_run(r));
  EXPECT_EQ(encode_property_run(back), encode_property_run(r));
  EXPECT_EQ(back.worst_ratio, HUGE_VAL);
  EXPECT_EQ(back.seconds, 0.1 + 0.2);
  EXPECT_EQ(back.counterexample, r.counterexample);
  ASSERT_TRUE(back.counterexample_spec.has_value());
  EXPECT_EQ(scenario_to_json(*back.counterexample_spec), scenario_to_json(*r.counterexample_spec));
  EXPECT_EQ(back.discarded_vacuous, 2);
  EXPECT_FALSE(back.passed);
}

// The whole gate (suite and properties), as `gradeq check` runs it: passes
// on the host backend, fails with the broken one.
TEST(Gate, PassesOnCorrectCodeAndFailsWhenOneOverNIsForgotten) {
  GateOptions options;
  options.cases = 20;
  CpuBackend cpu;
  const CheckReport good = run_gate(options, cpu);
  EXPECT_TRUE(good.passed());
  EXPECT_EQ(good.scenarios.size(), default_scenarios().size());
  ForgetsOneOverN broken;
  const CheckReport bad = run_gate(options, broken);
  EXPECT_FALSE(bad.passed());
  long failed_scenarios = 0;
  for (const ScenarioResult& s : bad.scenarios) failed_scenarios += !s.passed();
  EXPECT_GE(failed_scenarios, 5) << "every scenario with N > 1 must catch it";
  bool accumulation_property_failed = false;
  for (const PropertyRun& p : bad.properties)
    if (p.name == "AccumulationEquivalence") accumulation_property_failed = !p.passed && !p.counterexample.empty();
  EXPECT_TRUE(accumulation_property_failed) << "the property fails with a shrunk counterexample";
}

// The campaign holds correct code to the error model's claim, not merely to
// "no false alarm": above 1/F of a bound the model is wrong even if no
// case failed.
TEST(SelfTest, CampaignFailsAboveHalfTheBound) {
  SelfTestReport r;
  r.campaign = Campaign{};
  r.campaign->cases = 1;
  r.campaign->worst_ratio = 0.5;
  EXPECT_TRUE(r.campaign->calibrated());
  EXPECT_TRUE(r.passed());
  r.campaign->worst_ratio = std::nextafter(0.5, 1.0);
  EXPECT_FALSE(r.campaign->calibrated());
  EXPECT_FALSE(r.passed());
  r.campaign->worst_ratio = 0.1;
  r.campaign->false_alarms = 1;
  EXPECT_FALSE(r.passed());
}

}  // namespace
}  // namespace gradeq::test

namespace gradeq {
namespace {

// The writers: report.json carries its schema version and no failure text
// on passing checks; junit.xml names its suite after the backend, counts
// failures and errors apart, and maps a case the error model could not
// decide to an <error>, a failing one to a <failure>.
TEST(Reports, JsonAndJunitSayWhatHappened) {
  GateOptions options;
  options.scenarios = {"mlp_mse_equal", "exact_dyadic"};
  options.run_properties = false;
  CpuBackend cpu;
  CheckReport report = run_gate(options, cpu);
  ASSERT_EQ(report.scenarios.size(), 2u);
  ASSERT_TRUE(report.passed());
  const nlohmann::json j = report_json(report);
  EXPECT_EQ(j.at("schema_version"), 3);
  EXPECT_EQ(j.at("not_run"), 0);
  long checks = 0;
  for (const auto& s : j.at("scenarios"))
    for (const auto& v : s.at("verdicts"))
      for (const auto& t : v.at("tensors")) {
        EXPECT_EQ(t.at("failure"), "") << t.at("tensor");
        ++checks;
      }
  EXPECT_GT(checks, 0);
  std::string junit = report_junit(report);
  EXPECT_NE(junit.find("<testsuite name=\"gradeq.cpu\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("failures=\"0\" errors=\"0\" skipped=\"0\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<property name=\"seed\" value=\"1\"/>"), std::string::npos) << junit;

  // A property that did not run is <skipped>, counted, and neither passes nor fails.
  PropertyRun left_out;
  left_out.name = "Exactness";
  left_out.ran = false;
  left_out.message = "not run: RC_PARAMS replays only KernelCorrectness";
  report.properties.push_back(left_out);
  EXPECT_TRUE(report.passed());
  EXPECT_EQ(report.not_run(), 1);
  junit = report_junit(report);
  EXPECT_NE(junit.find("failures=\"0\" errors=\"0\" skipped=\"1\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<skipped message=\"not run: RC_PARAMS replays only KernelCorrectness\"/>"), std::string::npos)
      << junit;
  const nlohmann::json with_skip = report_json(report);
  EXPECT_EQ(with_skip.at("not_run"), 1);
  EXPECT_EQ(with_skip.at("properties").back().at("ran"), false);
  EXPECT_EQ(with_skip.at("properties").back().at("passed"), false);
  EXPECT_NE(check_summary(report).find("1 not run"), std::string::npos) << check_summary(report);
  report.properties.pop_back();

  report.scenarios[0].kernel.status = Status::inconclusive;
  report.scenarios[0].kernel.note = "no finite bound";
  report.scenarios[1].accumulation.status = Status::fail;
  report.scenarios[1].accumulation.note = "outside its bound";
  junit = report_junit(report);
  EXPECT_NE(junit.find("failures=\"1\" errors=\"1\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<error message=\"kernel correctness inconclusive: no finite bound\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<failure message=\"accumulation equivalence: outside its bound\""), std::string::npos) << junit;
}

// Drift against a baseline, both ways: an identical baseline flags
// nothing; one with tighter ratios flags exactly the tensors that grew past
// the rule (2x and 0.05); a changed verdict, a check new or missing, another
// schema version or other scenarios are said.
TEST(Reports, DriftFlagsWhatGrewAndNothingElse) {
  GateOptions options;
  options.scenarios = {"mlp_mse_equal", "token_ce_padded_uneven"};
  options.properties = {"Exactness"};
  CpuBackend cpu;
  const nlohmann::json now = report_json(run_gate(options, cpu));
  EXPECT_TRUE(compare_to_baseline(now, now).at("flags").empty());

  nlohmann::json tight = now;
  long expected = 0;
  for (auto& sc : tight["scenarios"])
    for (auto& v : sc["verdicts"])
      for (auto& t : v["tensors"]) {
        if (!t["worst_ratio"].is_number()) continue;
        const double r = t["worst_ratio"];
        // A third of r: grown 3x. Flagged where the growth is >= 0.05, and
        // not where the divergence is expected (BatchNorm's, not here).
        t["worst_ratio"] = r / 3.0;
        expected += r - r / 3.0 >= kDriftFloor && r > 0.0;
      }
  const nlohmann::json drift = compare_to_baseline(now, tight);
  long grown = 0;
  for (const auto& f : drift.at("flags")) grown += f.at("kind") == "grown";
  EXPECT_GT(expected, 0);
  EXPECT_EQ(grown, expected) << drift.dump(1);
  EXPECT_FALSE(drift_markdown(drift).find("| grown |") == std::string::npos);

  nlohmann::json changed = now;
  changed["scenarios"][0]["verdicts"][1]["status"] = "FAIL";
  changed["scenarios"][1]["verdicts"][0]["tensors"].erase(0);
  changed["properties"][0]["passed"] = false;
  const nlohmann::json d2 = compare_to_baseline(now, changed);
  std::map<std::string, long> kinds;
  for (const auto& f : d2.at("flags")) ++kinds[f.at("kind").get<std::string>()];
  EXPECT_EQ(kinds["verdict changed"], 2) << d2.dump(1);
  EXPECT_EQ(kinds["new"], 1) << d2.dump(1);

  nlohmann::json other_version = now;
  other_version["schema_version"] = 1;
  EXPECT_THROW(compare_to_baseline(now, other_version), std::invalid_argument);
  nlohmann::json other_scenarios = now;
  other_scenarios["scenarios"].erase(0);
  EXPECT_THROW(compare_to_baseline(now, other_scenarios), std::invalid_argument);

  // JUnit: one drift test case, a failure only when asked.
  const CheckReport report = run_gate(options, cpu);
  EXPECT_EQ(report_junit(report, &drift, false).find("<failure"), std::string::npos);
  EXPECT_NE(report_junit(report, &drift, true).find("<failure message=\"grown: "), std::string::npos);
}

// Beside another run: every tensor both ran, each with both ratios as
// they were written; the table's rows largest first, with the quotient;
// a document that is not a report, of another schema, or with nothing in
// common is refused.
TEST(Reports, BesideSetsEachTensorNextToTheOtherRuns) {
  GateOptions options;
  options.scenarios = {"mlp_mse_equal", "token_ce_padded_uneven"};
  options.properties = {"Exactness"};
  CpuBackend cpu;
  const nlohmann::json now = report_json(run_gate(options, cpu));
  nlohmann::json other = now;
  other["backend"] = "other";
  long tensors = 0;
  for (auto& sc : other["scenarios"])
    for (auto& v : sc["verdicts"])
      for (auto& t : v["tensors"]) {
        ++tensors;
        if (t["worst_ratio"].is_number()) t["worst_ratio"] = t["worst_ratio"].get<double>() / 4.0;
      }
  const nlohmann::json b = compare_beside(now, other);
  ASSERT_EQ(static_cast<long>(b.at("tensors").size()), tensors);
  for (const auto& t : b.at("tensors"))
    if (t.at("ratio").is_number()) {
      EXPECT_EQ(t.at("other_ratio").get<double>(), t.at("ratio").get<double>() / 4.0);
    }
  EXPECT_EQ(b.at("properties").size(), 1u);
  EXPECT_EQ(b.at("other_backend"), "other");

  const std::vector<std::vector<std::string>> table = beside_table(b);
  ASSERT_GT(table.size(), 2u);
  EXPECT_EQ(table[0].back(), "cpu / other");
  for (std::size_t i = 2; i < table.size(); ++i) EXPECT_GE(std::stod(table[i - 1][3]), std::stod(table[i][3]));
  for (std::size_t i = 1; i < table.size(); ++i)
    if (!table[i][5].empty()) {
      EXPECT_EQ(table[i][5], "4");
    }
  EXPECT_NE(beside_markdown(b).find("## Beside backend other"), std::string::npos);

  // Fewer scenarios there: the common ones are set beside, the rest counted.
  nlohmann::json fewer = other;
  fewer["scenarios"].erase(0);
  EXPECT_EQ(compare_beside(now, fewer).at("scenarios_only_here"), 1);
  nlohmann::json nothing = other;
  nothing["scenarios"] = nlohmann::json::array();
  nothing["properties"] = nlohmann::json::array();
  EXPECT_THROW(compare_beside(now, nothing), std::invalid_argument);
  nlohmann::json other_version = other;
  other_version["schema_version"] = 1;
  EXPECT_THROW(compare_beside(now, other_version), std::invalid_argument);
  EXPECT_THROW(compare_beside(now, nlohmann::json::object()), std::invalid_argument);
}

}  // namespace
}  // namespace gradeq
