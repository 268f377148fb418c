// window_set.h — the one self-describing format for a training run's
// windows: what `--dump` writes and what `gradeq verify` reads, so that a
// run made outside gradeq (a PyTorch loop, python/gradeq_export) is
// judged with the same verdicts and bounds as a backend's.
//
// A window set is a directory: manifest.json and NumPy .npy files
// (harness/core/npy.h; 2-D [rows, cols] unless said otherwise).
// The manifest (docs/VERIFY.md documents every key):
//   format            "gradeq-window-set"; schema_version 4 (3: the same,
//                     without combinators in the model; read as well)
//   scenario          the scenario as config keys (harness/core/config.h): the
//                     model, loss, procedure with every hyper-parameter,
//                     clip, schedule, loss scaling, normalization, dtypes
//                     and the arithmetic the run declares; the split says
//                     how each window was cut into micro-batches
//   run_seed          the --seed given (written by --dump; informative)
//   model, parameters, buffers
//                     derived from the scenario, for readers: the graph's
//                     nodes with their widths, argument, eps and momentum,
//                     a combinator's branch nested ("body"); parameter
//                     names ("layer<l>.weight", "layer<l>.<j>.weight" in a
//                     branch) with shapes and the names of the same tensors
//                     in a torch.nn.Sequential ("<l>.weight", "<l>.<j>.weight").
//                     A reader that finds them checks them.
//   windows[w]        inputs [rows, features], and targets [rows, outputs]
//                     (mse) or classes [rows] (cross-entropy, -100 = padding)
//   initial           the parameters before the first window
//   runs              K_acc (required by verify: the accumulated run),
//                     K_full (optional), R_acc, R_full (the reference, as
//                     dumped; verify recomputes it): per window, "skipped"
//                     and "tensors", one file per entry of the run-record
//                     schema (harness/core/run_record.h) — gradients as
//                     accumulation made them (before the clip), the
//                     clipped ones, parameters after the step,
//                     optimizer state, running statistics, counters. A
//                     skipped window has no gradients.
//   bounds            the bound each verdict used, per window and tensor
//                     (written by --dump)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/core/equivalence.h"

namespace gradeq {

inline constexpr int kWindowSetSchemaVersion = 4;
inline constexpr const char* kWindowSetFormat = "gradeq-window-set";

// A window set that cannot be read: a missing, extra or misshapen file, a
// wrong dtype, an unknown schema version, a manifest that contradicts
// itself. The message names the file. The CLI maps it to exit code 2.
class WindowSetError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// "K_acc_w0_grad_layer0.weight.npy": the file of a tensor of a run's window.
std::string window_set_file(const std::string& run, std::size_t window, const std::string& tensor);

// Writes the scenario's inputs, initial parameters and every run of `runs`
// (K_full, K_acc, R_full, R_acc) with the bounds the verdicts used. A
// skipped window's gradients are not written. Returns the files written
// (manifest included).
int write_window_set(const std::filesystem::path& dir, const Scenario& scenario, const Runs& runs,
                     std::uint64_t run_seed);

struct WindowSet {
  Scenario scenario;                // from the manifest and the files, not generated
  KernelRun k_acc;                  // the external accumulated run
  std::optional<KernelRun> k_full;  // and its full-batch run, where given
};

// Reads and checks a window set: WindowSetError with the file and what is
// wrong, before any work. Its verdicts are the gate's (verify_window_set,
// harness/gate/gate.h).
WindowSet read_window_set(const std::filesystem::path& dir);

}  // namespace gradeq
