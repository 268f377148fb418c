// Padding under accumulation: a data collator pads each micro-batch to its
// own longest sample (padding = "micro_batch"), to the window's longest
// ("window") or to the model's positions ("fixed"). The real tokens are the
// same in every form; the micro-batch runs through the model at its own
// length, and what reads a row's position must read the batch's length.
#include <set>

#include <gtest/gtest.h>

#include "harness/core/config.h"
#include "harness/core/equivalence.h"
#include "harness/core/scenario.h"
#include "harness/core/suite.h"
#include "harness/core/training_loop.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/forwarding_backend.h"
#include "reference/procedure.h"

namespace gradeq {
namespace {

ScenarioSpec lm_small(ref::Padding padding) {
  ScenarioSpec s = *find_scenario(default_scenarios(), "lm_small");
  s.procedure.padding = padding;
  return s;
}

// Each micro-batch is cut to its longest sample, the full batch to the
// window's; no real row is lost, and the item counts (the normaliser) do
// not change.
TEST(Padding, EachMicroBatchIsCutToItsLongestSample) {
  const ScenarioSpec s = lm_small(ref::Padding::micro_batch);
  ASSERT_EQ(s.procedure.padding, ref::Padding::micro_batch) << "the default suite's small LM pads per micro-batch";
  const Scenario scenario = materialize(s);
  const ref::Batch& window = scenario.windows[0];
  const long p = s.model.positions;
  std::set<long> lengths;
  long first = 0;
  for (long n : s.split[0]) {
    const ref::Batch fixed = window.slice(first, n);
    const ref::Batch mb = ref::micro_batch_of(window, first, n, s.procedure);
    EXPECT_EQ(mb.positions, fixed.longest_real());
    EXPECT_EQ(mb.items(ref::LossKind::causal_lm), fixed.items(ref::LossKind::causal_lm));
    for (long sample = 0; sample < n; ++sample)
      for (long t = 0; t < mb.positions; ++t) {
        EXPECT_EQ(mb.inputs(sample * mb.positions + t, 0), fixed.inputs(sample * p + t, 0));
        EXPECT_EQ(mb.classes[static_cast<std::size_t>(sample * mb.positions + t)],
                  fixed.classes[static_cast<std::size_t>(sample * p + t)]);
      }
    for (long t = mb.positions; t < p; ++t)  // what was cut is padding only
      for (long sample = 0; sample < n; ++sample)
        EXPECT_EQ(fixed.classes[static_cast<std::size_t>(sample * p + t)], ref::kIgnoreClass);
    lengths.insert(mb.positions);
    first += n;
  }
  EXPECT_GE(lengths.size(), 3u) << "the micro-batches' padded lengths differ";
  EXPECT_LT(*lengths.begin(), p);
  const ref::Batch full = ref::micro_batch_of(window, 0, window.samples(), s.procedure);
  EXPECT_EQ(full.positions, window.longest_real());
  EXPECT_EQ(full.positions, *lengths.rbegin());
  ref::ProcedureConfig to_window = s.procedure;
  to_window.padding = ref::Padding::window;
  EXPECT_EQ(ref::micro_batch_of(window, 0, 1, to_window).positions, window.longest_real());
  to_window.padding = ref::Padding::fixed;
  EXPECT_EQ(ref::micro_batch_of(window, 0, 1, to_window).positions, p);
}

// A position-embedding kernel that takes its sequence length from the
// configuration rather than from the batch it is handed: under fixed
// padding the two agree and it passes; padded per micro-batch (or to the
// window), its rows are not whole samples of that length, and the op's
// contract refuses the call (kernels/check.h) rather than let rows land on
// the wrong positions.
class ConfiguredLengthPositions : public ForwardingBackend {
 public:
  ConfiguredLengthPositions(Backend& inner, long configured) : ForwardingBackend(inner), configured_(configured) {}
  void position_embedding_forward(const Tensor& x, const Tensor& p, long, const Tensor& y) override {
    ForwardingBackend::position_embedding_forward(x, p, configured_, y);
  }
  void position_embedding_backward(const Tensor& dy, long, const Tensor& dp) override {
    ForwardingBackend::position_embedding_backward(dy, configured_, dp);
  }

 private:
  long configured_;
};

TEST(Padding, APositionKernelReadingTheConfiguredLengthIsRefusedWhenPadded) {
  CpuBackend cpu;
  for (ref::Padding padding : {ref::Padding::fixed, ref::Padding::micro_batch, ref::Padding::window}) {
    const ScenarioSpec s = lm_small(padding);
    ConfiguredLengthPositions buggy(cpu, s.model.positions);
    const ScenarioResult correct = check_scenario(s, cpu, correct_loop(), ErrorModel{});
    EXPECT_EQ(correct.kernel.status, Status::pass) << static_cast<int>(padding);
    EXPECT_EQ(correct.accumulation.status, Status::pass) << static_cast<int>(padding);
    // This window's longest sample fills the 16 positions, so padded to
    // the window it is as if fixed.
    const bool cut = padding == ref::Padding::micro_batch ||
                     (padding == ref::Padding::window && materialize(s).windows[0].longest_real() < s.model.positions);
    if (padding == ref::Padding::window) {
      EXPECT_FALSE(cut);
    }
    if (!cut) {
      EXPECT_EQ(check_scenario(s, buggy, correct_loop(), ErrorModel{}).kernel.status, Status::pass);
      continue;
    }
    try {
      (void)check_scenario(s, buggy, correct_loop(), ErrorModel{});
      ADD_FAILURE() << "a position kernel at the configured length passed under padding " << static_cast<int>(padding);
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find("are not whole samples of 16 positions"), std::string::npos) << e.what();
    }
  }
}

std::string rejection(const std::string& keys) {
  try {
    (void)parse_scenarios("[[scenario]]\nname = \"t\"\nsplit = [[2, 2]]\n" + keys + "\n", "padding.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Padding, TheKeyIsCheckedAgainstTheDataAndTheModel) {
  const std::string lm = "vocabulary = 11\npositions = 4\nloss = \"causal_lm\"\npadding_token = 0\n"
                         "layers = [\"embedding:8\", \"layernorm\", \"tied_head\"]\n";
  EXPECT_EQ(rejection(lm + "data = \"padded_sequences\"\npadding = \"micro_batch\""), "accepted");
  EXPECT_EQ(rejection(lm + "data = \"padded_sequences\"\npadding = \"window\""), "accepted");
  EXPECT_NE(rejection(lm + "data = \"padded_sequences\"\npadding = \"longest\"").find("padding"), std::string::npos);
  EXPECT_NE(rejection(lm + "padding = \"micro_batch\"").find("only padded_sequences data has padding to cut"),
            std::string::npos);
  EXPECT_NE(rejection("input_features = 4\npositions = 4\nloss = \"cross_entropy\"\ndata = \"padded_sequences\"\n"
                      "padding = \"micro_batch\"\nlayers = [\"linear:8\", \"groupnorm:2\", \"linear:3\"]")
                .find("GroupNorm's statistics span a sample's positions"),
            std::string::npos);
  const ScenarioSpec s = parse_scenarios("[[scenario]]\nname = \"t\"\nsplit = [[2, 2]]\n" + lm +
                                             "data = \"padded_sequences\"\npadding = \"micro_batch\"\n",
                                         "padding.toml")
                             .front();
  EXPECT_EQ(scenario_to_json(s).at("padding"), "micro_batch");
  EXPECT_EQ(scenario_from_json(scenario_to_json(s), "back").procedure.padding, ref::Padding::micro_batch);
}

}  // namespace
}  // namespace gradeq
