// dump.cpp — the .npy writer.
#include "harness/dump.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gradeq {
namespace {

template <class T>
void write_npy_impl(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const T> values,
                    const char* descr) {
  long count = 1;
  for (long d : shape) count *= d;
  if (count != static_cast<long>(values.size())) throw std::invalid_argument("write_npy: shape and data disagree");
  std::ostringstream header;
  header << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) header << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  header << "), }";
  std::string h = header.str();
  // Magic (6) + version (2) + length (2) + header must be a multiple of 64.
  const std::size_t unpadded = 10 + h.size() + 1;
  h.append((64 - unpadded % 64) % 64, ' ');
  h.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t len = static_cast<std::uint16_t>(h.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  if (!out) throw std::runtime_error("error writing " + path.string());
}


}  // namespace

void write_npy(const std::filesystem::path& p, const std::vector<long>& shape, std::span<const double> v) {
  write_npy_impl(p, shape, v, "<f8");
}
void write_npy(const std::filesystem::path& p, const std::vector<long>& shape, std::span<const float> v) {
  write_npy_impl(p, shape, v, "<f4");
}
void write_npy(const std::filesystem::path& p, const std::vector<long>& shape, std::span<const std::int32_t> v) {
  write_npy_impl(p, shape, v, "<i4");
}

}  // namespace gradeq
