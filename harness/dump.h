// dump.h — NumPy .npy files (format 1.0, little-endian float64 / float32 /
// int32, C order), as a window set (harness/window_set.h) holds them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>


namespace gradeq {

void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const double> values);
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const float> values);
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const std::int32_t> values);

}  // namespace gradeq
