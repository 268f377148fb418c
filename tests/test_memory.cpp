// test_memory.cpp — memory accounting: the loop's measured bytes by category
// against the prediction from shapes, the checkpointing layout, the fit,
// sizes, and the mutants B24 / B25 seen by the numbers they change.
#include <cstring>

#include <gtest/gtest.h>

#include "harness/core/equivalence.h"
#include "harness/core/ops/registry.h"
#include "harness/core/loop_mutants.h"
#include "harness/core/memory/loop_plan.h"
#include "harness/core/measured_memory.h"
#include "harness/core/memory/reference_estimate.h"
#include "harness/core/mutants.h"
#include "harness/core/suite.h"
#include "harness/core/training_loop.h"
#include "kernels/cpu/cpu_backend.h"

namespace gradeq {
namespace {

KernelRun run(const ScenarioSpec& s, Backend& backend, const LoopFactory& loop = correct_loop()) {
  return loop(backend)->run(materialize(s), s.split);
}

long largest_micro_batch(const Split& split) {
  long b = 0;
  for (const auto& w : split) b = std::max(b, *std::max_element(w.begin(), w.end()));
  return b;
}

// On the host backend every category but scratch is the prediction to the
// byte, for every default scenario, plain and checkpointed.
TEST(Memory, MeasuredCategoriesAreThePredictionOnEveryDefaultScenario) {
  CpuBackend backend;
  for (ScenarioSpec s : default_scenarios()) {
    for (long k : {0L, 1L, 2L}) {
      s.checkpoint_every = k;
      const MemoryUsage measured = run(s, backend).memory;
      const MemoryUsage predicted = loop_memory(s, largest_micro_batch(s.split));
      for (MemoryCategory c : kAllMemoryCategories) {
        if (c == MemoryCategory::scratch) continue;
        EXPECT_EQ(measured[c], predicted[c]) << s.name << ", checkpoint every " << k << ": " << memory_category_name(c);
      }
      // The host backend's scratch, the largest of: the float32 product of
      // a weight gradient and its column sums (a linear layer's, or a tied
      // head's: the token embedding's weight); a convolution's taps and
      // output rows with its weight gradient's product; a token embedding's
      // per-token sums [V, D]; a chunked head's tiles, dx's sums, a chunk's
      // dw sum and three values per row (at the largest micro-batch's
      // rows, which padding per micro-batch may shorten).
      double largest = 0.0;
      const ref::Model graph(s.model);
      const long rows = largest_micro_batch(s.split) * s.model.positions;
      for (const ref::Node& node : graph.nodes) {
        if (node.parameters == 0) continue;
        const ref::ParameterInfo& w = graph.parameters[static_cast<std::size_t>(node.first_parameter)];
        if (node.op->reads_token_ids()) largest = std::max(largest, 4.0 * static_cast<double>(w.rows * w.cols));
        if (node.op->name() == "conv2d") {
          // im2col's taps and a group's output rows, [samples H_out W_out] by
          // [C_in/groups k k] and [C_out/groups]; the weight gradient's
          // product and column sums too.
          const long count = largest_micro_batch(s.split) * node.out_image.plane();
          const long out_per_group = w.rows / node.options.at(4);
          largest = std::max(largest, 4.0 * static_cast<double>(count * (w.cols + out_per_group) + w.rows * (w.cols + 1)));
          continue;
        }
        if (node.op->ties_token_embedding() && graph.chunked_head()) {
          const long block = std::min(s.model.head_chunk_rows, rows);
          const long chunk = std::min(s.model.head_chunk_vocabulary, w.rows);
          largest = std::max(
              largest, 4.0 * static_cast<double>(2 * block * chunk + rows * w.cols + chunk * w.cols + 3 * rows));
        } else if (w.init == ref::Init::fan_in || node.op->ties_token_embedding()) {
          largest = std::max(largest, 4.0 * static_cast<double>(w.rows * (w.cols + 1)));
        }
      }
      EXPECT_EQ(measured[MemoryCategory::scratch], largest) << s.name;
      EXPECT_EQ(measured.peak, measured.total()) << s.name;
    }
  }
}

TEST(Memory, SgdWithoutMomentumHoldsNoOptimizerState) {
  ScenarioSpec s = default_scenarios().front();
  s.procedure.optimizer = {};
  EXPECT_EQ(loop_memory(s, 4)[MemoryCategory::optimizer_state], 0.0);
  s.procedure.optimizer.momentum = 0.9;
  EXPECT_GT(loop_memory(s, 4)[MemoryCategory::optimizer_state], 0.0);
}

TEST(Memory, CheckpointingKeepsBlockInputsAndSharesTheInterior) {
  ref::ModelSpec m;
  m.input_features = 4;
  m.layers = {layer_of("linear", 8), layer_of("gelu"), layer_of("linear", 16),
              layer_of("relu"),   layer_of("linear", 2)};
  // widths: 4 8 8 16 16 2
  const LoopPlan plain = loop_plan(ref::Model(m), 0);
  EXPECT_EQ(plain.slot_widths, (std::vector<long>{4, 8, 8, 16, 16, 2}));
  const LoopPlan two = loop_plan(ref::Model(m), 2);
  // Blocks [0,2) [2,4) [4,5): kept inputs 0, 2, 4 and the output 5; the
  // interior activations 1 and 3 share one slot of the wider, 16.
  EXPECT_EQ(two.slot_widths, (std::vector<long>{16, 4, 8, 16, 2}));
  EXPECT_EQ(two.slot_of, (std::vector<std::size_t>{1, 0, 2, 0, 3, 4}));
  const LoopPlan all = loop_plan(ref::Model(m), 5);  // one block: only the input and the output kept
  EXPECT_EQ(all.slot_widths, (std::vector<long>{8, 8, 16, 16, 4, 2}));
}

TEST(Memory, CheckpointedGradientsAreBitwiseThePlainOnes) {
  CpuBackend backend;
  for (ScenarioSpec s : default_scenarios()) {
    s.checkpoint_every = 0;  // plain: every value kept
    const KernelRun plain = run(s, backend);
    s.checkpoint_every = 2;
    const KernelRun checkpointed = run(s, backend);
    for (std::size_t w = 0; w < plain.windows.size(); ++w)
      for (const RunTensor& t : plain.windows[w].tensors) {
        const std::vector<double>& c = find_tensor(checkpointed.windows[w], t.name).values;
        ASSERT_EQ(t.values.size(), c.size());
        // Bit for bit: a skipped window's overflowed gradient holds NaN and Inf.
        EXPECT_EQ(std::memcmp(t.values.data(), c.data(), c.size() * sizeof(double)), 0) << s.name << " " << t.name;
      }
    EXPECT_LE(checkpointed.memory[MemoryCategory::activations], plain.memory[MemoryCategory::activations]) << s.name;
  }
}

TEST(Memory, KeptGraphsGrowThePeakWithN) {
  CpuBackend backend;
  ScenarioSpec s = default_scenarios().front();
  const Mutant* b24 = find_mutant("B24");
  ASSERT_NE(b24, nullptr);
  s.split = equal_split(1, 2, 4);
  const double two = run(s, backend, b24->loop).memory.peak;
  s.split = equal_split(1, 4, 4);
  const double four = run(s, backend, b24->loop).memory.peak;
  EXPECT_GT(four, two);
  EXPECT_EQ(run(s, backend).memory.peak, (s.split = equal_split(1, 2, 4), run(s, backend).memory.peak));
}

TEST(Memory, RecomputeThroughBatchNormMovesRunningStatisticsTwice) {
  CpuBackend backend;
  ScenarioSpec s;
  for (const ScenarioSpec& d : default_scenarios())
    if (ref::has_batch_norm(d.model)) s = d;
  ASSERT_TRUE(ref::has_batch_norm(s.model));
  s.checkpoint_every = 2;
  const KernelRun correct = run(s, backend);
  const KernelRun mutant = run(s, backend, find_mutant("B25")->loop);
  bool differs = false;
  for (const RunTensor& t : correct.windows.back().tensors)
    if (t.kind == RecordKind::statistic) differs = differs || t.values != find_tensor(mutant.windows.back(), t.name).values;
  EXPECT_TRUE(differs);
}

TEST(Memory, PredictionOfAScenarioHoldsOnTheHost) {
  CpuBackend backend;
  for (const ScenarioSpec& s : default_scenarios()) {
    const ScenarioResult r = check_scenario(s, backend, correct_loop(), ErrorModel{});
    ScenarioMemory m = r.memory;
    predict_memory(m, s, backend, correct_loop());
    EXPECT_TRUE(m.holds()) << s.name << ": " << m.worst_relative_error();
    EXPECT_LT(m.accumulated.peak, m.full_batch.peak) << s.name;
  }
}

TEST(Memory, FitIsLeastSquares) {
  const MemoryFit f = fit_memory({{1, 110.0}, {2, 120.0}, {4, 140.0}});
  EXPECT_DOUBLE_EQ(f.fixed, 100.0);
  EXPECT_DOUBLE_EQ(f.per_sample, 10.0);
  EXPECT_LT(f.worst_residual, 1e-15);
  EXPECT_GT(fit_memory({{1, 100.0}, {2, 300.0}, {3, 300.0}}).worst_residual, 0.1);
  EXPECT_THROW(fit_memory({{2, 1.0}, {2, 2.0}}), std::invalid_argument);
}

TEST(Memory, SizesParseWithTheirUnits) {
  EXPECT_EQ(parse_bytes("8GiB"), 8.0 * 0x1p30);
  EXPECT_EQ(parse_bytes("512 MiB"), 512.0 * 0x1p20);
  EXPECT_EQ(parse_bytes("2GB"), 2e9);
  EXPECT_EQ(parse_bytes("16G"), 16.0 * 0x1p30);
  EXPECT_EQ(parse_bytes("1e9"), 1e9);
  EXPECT_EQ(parse_bytes("100B"), 100.0);
  for (const char* bad : {"", "lots", "8 GiBs", "-1GiB", "GiB", "nan", "inf", " 8GiB", "0x10", "8GiB "})
    EXPECT_THROW(parse_bytes(bad), std::invalid_argument) << bad;
  EXPECT_EQ(format_bytes(1536.0), "1.50 KiB");
  EXPECT_EQ(format_bytes(900.0), "900 B");
}

}  // namespace
}  // namespace gradeq
