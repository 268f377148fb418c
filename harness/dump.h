// dump.h — writes one scenario's tensors as NumPy .npy files (format 1.0,
// little-endian float64 / float32 / int32, C order) and a manifest.json that
// names each file, its shape and dtype, and the model and split. A user
// loads them with numpy.load to look at a failure outside gradeq.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "harness/equivalence.h"

namespace gradeq {

void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const double> values);
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const float> values);
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const std::int32_t> values);

// Inputs, targets (or classes and the mask), initial parameters, and every
// window's gradients, parameters and running statistics of R_full, R_acc,
// K_full and K_acc, plus the reference started from K_acc's state with its
// per-element kernel bounds (what accumulation equivalence compared).
// Returns the number of files written (manifest included).
int dump_scenario(const std::filesystem::path& dir, const Scenario& scenario, const Runs& runs);

}  // namespace gradeq
