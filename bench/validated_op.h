// validated_op.h — a benchmark of one op of the op table
// (harness/core/op_table.h): the op is first verified against the float64
// reference on the same backend and dtype (at its own size, or at
// validation_size() where the reference would take too long), and only
// then timed; a disagreement ends the benchmark with SkipWithError. The
// rate counters come from the op's own bytes and flops.
#pragma once

#include <string>

#include <benchmark/benchmark.h>

#include "harness/core/op_table.h"

namespace gradeq::bench {

// time(run) runs `run` once per benchmark iteration and records the time.
template <class Time>
void validated_op(benchmark::State& state, Backend& backend, const std::string& name, const OpSize& size, DType dtype,
                  Time&& time) {
  const OpSpec& op = find_op(name);
  const OpVerdict verdict = op.prepare(backend, validation_size(size), dtype, 1)->verify();
  if (!verdict.passed) {
    state.SkipWithError((name + " disagrees with the reference: " + verdict.message).c_str());
    return;
  }
  const auto prepared = op.prepare(backend, size, dtype, 2);
  time([&] { prepared->run(); });
  if (prepared->flops > 0)
    state.counters["flops_per_s"] = benchmark::Counter(prepared->flops, benchmark::Counter::kIsIterationInvariantRate);
  if (prepared->bytes > 0 && prepared->flops == 0)
    state.counters["bytes_per_s"] = benchmark::Counter(prepared->bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["validated_worst_ratio"] = benchmark::Counter(verdict.worst_ratio);
  if (verdict.natural_order_ratio)  // attention: FlashAttention's ratio, a diagnostic
    state.counters["natural_order_ratio"] = benchmark::Counter(*verdict.natural_order_ratio);
}

}  // namespace gradeq::bench
