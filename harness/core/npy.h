// npy.h — NumPy .npy files, read and written: the arrays of a window set
// (harness/core/window_set.h). Little-endian, C order; the writer writes format
// 1.0, the reader takes 1.0 and 2.0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gradeq {

// A .npy file that cannot be read. The message starts with the file's name.
class NpyError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One .npy array, values widened to double.
struct NpyArray {
  std::string descr;        // "<f4", "<f8", "<i4", "<i8"
  std::vector<long> shape;
  std::vector<double> values;
};
// Strict: the magic, version 1.0 or 2.0, one of the descrs above, C order,
// and a file exactly as long as its header says. NpyError otherwise.
NpyArray read_npy(const std::filesystem::path& path);

// "float32", "float64", "int32", "int64" for the descrs above; any other
// descr as it is.
std::string npy_dtype_name(const std::string& descr);

// Writes values of the given shape (their count must be its product) as
// "<f8", "<f4" or "<i4".
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const double> values);
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const float> values);
void write_npy(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const std::int32_t> values);

}  // namespace gradeq
