// runs.h — what a run produces, window by window: the kernel's tensors
// (float32 values held as float64) and the reference's (values with their
// propagated bounds). Names: "grad/<param>" (the window's accumulated
// gradient as the optimizer used it: unscaled, then clipped),
// "param/<param>" (weights after the step),
// "stats/<buffer>" (BatchNorm running statistics after the window),
// "state/<param>.<name>" (optimizer state), "state/step" (optimizer steps
// taken), and with dynamic loss scaling "state/loss_scale",
// "state/good_steps", "state/skipped". A skipped window has no "grad/".
#pragma once

#include <string>
#include <vector>

namespace gradeq {

struct RunTensor {
  std::string name;
  long rows = 0, cols = 0;
  std::vector<double> values;
};

struct KernelWindow {
  std::vector<RunTensor> tensors;
  double loss = 0.0;     // normalized loss of the window
  bool skipped = false;  // dynamic loss scaling skipped the step
};

struct KernelRun {
  std::vector<KernelWindow> windows;
};

struct ReferenceTensor {
  std::string name;
  long rows = 0, cols = 0;
  std::vector<double> value, kernel_bound, reference_bound;
};

struct ReferenceWindow {
  std::vector<ReferenceTensor> tensors;
  double loss = 0.0;
  bool skipped = false;
};

struct ReferenceRun {
  std::vector<ReferenceWindow> windows;
};

const RunTensor& find_tensor(const KernelWindow& w, const std::string& name);
const ReferenceTensor& find_tensor(const ReferenceWindow& w, const std::string& name);

}  // namespace gradeq
