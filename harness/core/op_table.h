// op_table.h — the op table: every op of the Backend interface beside the
// float64 reference op that checks it, as data (in the way PyTorch's OpInfo
// lists ops). An entry prepares its op on a backend at a size and a dtype,
// from a seed; the prepared op runs (what a benchmark times) and verifies
// itself: outputs reset (NaN where the op overwrites, seeded values where it
// accumulates), one run, every element within the bound the tolerance model
// gives (harness/core/tolerance.h, deterministic form), no NaN, and not every
// expected value zero (a check that cannot fail proves nothing). The backend
// op tests and both benchmark files run this one table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace gradeq {

// The size of one op: rows of a batch, and the features going in and out.
// Element-wise, normalizer, loss and optimizer ops are [rows, in] (`out`
// unused); list ops run over `out` tensors of rows x in + k elements.
struct OpSize {
  long rows = 1, in = 1, out = 1;
};

struct OpVerdict {
  bool passed = true;
  std::string message;       // the first element outside its bound, or why there is nothing to check
  double worst_ratio = 0.0;  // largest |kernel - reference| / bound over every output
  // A diagnostic, not a verdict, for ops that have a plain form (attention):
  // FlashAttention's ratio, max |kernel - reference| over max |plain -
  // reference|, where `plain` is the same math in the same dtype in natural
  // order (the host kernel); the largest over the outputs. Absent for other
  // ops, and where the plain form is exact.
  std::optional<double> natural_order_ratio;
};

// One op prepared on a backend: inputs uploaded, outputs allocated.
class PreparedOp {
 public:
  virtual ~PreparedOp() = default;
  // The op once. Accumulating outputs keep accumulating; verify() resets them.
  virtual void run() = 0;
  virtual OpVerdict verify() = 0;
  double bytes = 0.0;  // moved by one run, for a bandwidth figure
  double flops = 0.0;  // computed by one run, for an arithmetic-rate figure
};

struct OpSpec {
  std::string name;  // "linear_backward_weight"
  std::string what;  // one line
  std::vector<OpSize> test_sizes;  // what the op tests run: awkward sizes included
  // The dtype is that of the activations, their gradients and the compute
  // copy of the weights (bfloat16 / float16 inputs are exact in their
  // dtype); buffers, master weights and optimizer state stay float32.
  std::function<std::unique_ptr<PreparedOp>(Backend&, const OpSize&, DType, std::uint64_t seed)> prepare;
};

const std::vector<OpSpec>& op_table();
// Throws std::invalid_argument for a name not in the table.
const OpSpec& find_op(const std::string& name);

// The size a benchmark validates its op at before timing it: its own, or,
// where the float64 reference would take too long (rows x in x out above
// max_work), the largest dimension halved until it fits.
OpSize validation_size(const OpSize& s, double max_work = 0x1p23);

}  // namespace gradeq
