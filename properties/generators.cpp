// generators.cpp — scenario generators. Sizes stay small (a property runs
// hundreds of cases on two cores) but always include the edge cases.
#include "properties/generators.h"

#include <numeric>

namespace gradeq {
namespace {

using ref::LayerKind;
using ref::LayerSpec;

rc::Gen<long> power_of_two(long max_exponent) {
  return rc::gen::map(rc::gen::inRange<long>(0, max_exponent + 1), [](long e) { return 1L << e; });
}

rc::Gen<std::uint64_t> seed() { return rc::gen::inRange<std::uint64_t>(1, 1u << 30); }

// A number of GroupNorm groups that divides `channels` (1 and `channels` included).
rc::Gen<long> group_count(long channels) {
  std::vector<long> divisors;
  for (long g = 1; g <= channels; ++g)
    if (channels % g == 0) divisors.push_back(g);
  return rc::gen::elementOf(divisors);
}

}  // namespace

rc::Gen<long> awkward_width() { return rc::gen::element(1L, 2L, 3L, 4L, 5L, 7L, 8L, 9L, 11L, 13L, 15L, 16L, 17L, 31L, 32L, 33L); }

std::string split_shape_name(SplitShape s) {
  switch (s) {
    case SplitShape::equal: return "equal";
    case SplitShape::uneven: return "uneven";
    case SplitShape::partial_last_window: return "partial last window";
    case SplitShape::power_of_two: return "power of two";
  }
  return "?";
}

rc::Gen<Split> split_of(SplitShape shape) {
  switch (shape) {
    case SplitShape::equal:
      return rc::gen::exec([] {
        const long windows = *rc::gen::inRange<long>(1, 3);
        return equal_split(windows, *rc::gen::inRange<long>(1, 7), *rc::gen::inRange<long>(1, 9));
      });
    case SplitShape::uneven:
      return rc::gen::exec([] {
        const long windows = *rc::gen::inRange<long>(1, 3);
        Split s;
        for (long w = 0; w < windows; ++w)
          s.push_back(*rc::gen::container<std::vector<long>>(static_cast<std::size_t>(*rc::gen::inRange<long>(2, 7)),
                                                             rc::gen::inRange<long>(1, 9)));
        return s;
      });
    case SplitShape::partial_last_window:
      return rc::gen::exec([] {
        const long window = *rc::gen::inRange<long>(2, 6);
        const long full_windows = *rc::gen::inRange<long>(1, 3);
        const long remainder = *rc::gen::inRange<long>(1, window);
        return partial_last_window_split(full_windows * window + remainder, window, *rc::gen::inRange<long>(1, 7));
      });
    case SplitShape::power_of_two:
      return rc::gen::exec([] {
        const long windows = *rc::gen::inRange<long>(1, 3);
        return equal_split(windows, *power_of_two(3), *power_of_two(3));
      });
  }
  return rc::gen::just(Split{{1}});
}

rc::Gen<Split> any_split() {
  return rc::gen::exec([] {
    const SplitShape shape = *rc::gen::element(SplitShape::equal, SplitShape::uneven,
                                              SplitShape::partial_last_window, SplitShape::power_of_two);
    return *split_of(shape);
  });
}

rc::Gen<ScenarioSpec> independent_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated";
    s.model.loss = *rc::gen::element(ref::LossKind::mse, ref::LossKind::cross_entropy);
    const bool sequences = s.model.loss == ref::LossKind::cross_entropy && *rc::gen::arbitrary<bool>();
    s.model.positions = sequences ? *rc::gen::inRange<long>(2, 7) : 1;
    s.model.input_features = *awkward_width();
    const long hidden_blocks = *rc::gen::inRange<long>(0, 3);
    for (long b = 0; b < hidden_blocks; ++b) {
      const long width = *awkward_width();
      s.model.layers.push_back({LayerKind::linear, width});
      const LayerKind kind = *rc::gen::element(LayerKind::relu, LayerKind::gelu, LayerKind::layer_norm,
                                               LayerKind::group_norm, LayerKind::rms_norm);
      s.model.layers.push_back({kind, 0, kind == LayerKind::group_norm ? *group_count(width) : 0});
      if (ref::is_norm(kind) && *rc::gen::arbitrary<bool>()) s.model.layers.push_back({LayerKind::gelu, 0});
    }
    const long outputs = s.model.loss == ref::LossKind::cross_entropy ? *rc::gen::inRange<long>(2, 12)
                                                                      : *rc::gen::inRange<long>(1, 6);
    s.model.layers.push_back({LayerKind::linear, outputs});
    s.data = sequences ? DataKind::padded_sequences
                       : *rc::gen::element(DataKind::normal, DataKind::wide_range, DataKind::dyadic);
    s.split = *any_split();
    s.seed = *seed();
    return s;
  });
}

rc::Gen<ScenarioSpec> batchnorm_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated batchnorm";
    s.model.loss = *rc::gen::element(ref::LossKind::mse, ref::LossKind::cross_entropy);
    s.model.positions = *rc::gen::inRange<long>(1, 5);
    s.model.input_features = *awkward_width();
    const long width = *awkward_width();
    s.model.layers = {{LayerKind::linear, width}, {LayerKind::batch_norm, 0}};
    s.model.layers.push_back({*rc::gen::element(LayerKind::relu, LayerKind::gelu), 0});
    if (*rc::gen::arbitrary<bool>()) {
      s.model.layers.push_back({LayerKind::linear, *awkward_width()});
      s.model.layers.push_back({LayerKind::batch_norm, 0});
    }
    s.model.layers.push_back({LayerKind::linear, s.model.loss == ref::LossKind::cross_entropy
                                                     ? *rc::gen::inRange<long>(2, 8)
                                                     : *rc::gen::inRange<long>(1, 5)});
    s.data = DataKind::normal;
    s.split = *any_split();
    // BatchNorm needs two values per channel in every micro-batch; with
    // fewer than four its statistics are so uncertain in float32 that most
    // cases are ill-conditioned and discarded (NUMERICS §7).
    for (auto& window : s.split)
      for (long& n : window)
        while (n * s.model.positions < 4) ++n;
    s.seed = *seed();
    return s;
  });
}

rc::Gen<ScenarioSpec> exact_scenario() {
  return rc::gen::exec([] {
    ScenarioSpec s;
    s.name = "generated exact";
    s.model.loss = ref::LossKind::mse;
    s.model.input_features = *awkward_width();
    if (*rc::gen::arbitrary<bool>()) {
      s.model.layers.push_back({LayerKind::linear, *awkward_width()});
      s.model.layers.push_back({LayerKind::relu, 0});
    }
    s.model.layers.push_back({LayerKind::linear, *power_of_two(2)});
    s.data = DataKind::dyadic;
    // One window: a second step would multiply fractional bits of updated
    // weights by each other and leave float32's 24 bits.
    s.split = equal_split(1, *power_of_two(3), *power_of_two(3));
    s.procedure.optimizer.lr = 0.0625;  // 2^-4: the update stays dyadic
    s.seed = *seed();
    return s;
  });
}

void showValue(const ScenarioSpec& s, std::ostream& os) {
  os << "{model: " << ref::describe(s.model) << "; data: " << data_kind_name(s.data)
     << "; split: " << describe_split(s.split) << "; compute: " << dtype_name(s.precision.compute)
     << ", accumulate: " << dtype_name(s.precision.accumulate) << "; seed: " << s.seed << "}";
}

}  // namespace gradeq
