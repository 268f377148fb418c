// npy.cpp — the .npy reader and writer.
#include "harness/core/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace gradeq {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw NpyError(where + ": " + what); }

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

NpyArray read_npy(const std::filesystem::path& path) {
  const std::string where = path.filename().string();
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(where, "cannot be read");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0);
  char magic[8];
  if (size < 10 || !in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(where, "is not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  if (major != 1 && major != 2) bad(where, ".npy version " + std::to_string(major) + " (1 or 2 expected)");
  unsigned char len[4] = {0, 0, 0, 0};
  if (!in.read(reinterpret_cast<char*>(len), major == 1 ? 2 : 4)) bad(where, "truncated header");
  const std::size_t header_len = major == 1 ? (len[0] | len[1] << 8)
                                            : (len[0] | len[1] << 8 | len[2] << 16 | static_cast<std::size_t>(len[3]) << 24);
  const std::streamoff data_at = (major == 1 ? 10 : 12) + static_cast<std::streamoff>(header_len);
  if (header_len > 65536 || data_at > size) bad(where, "truncated header");
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto field = [&](const std::string& key) -> std::string {
    const std::size_t at = header.find("'" + key + "':");
    if (at == std::string::npos) bad(where, "header has no '" + key + "'");
    std::size_t from = header.find_first_not_of(' ', at + key.size() + 3);
    if (from == std::string::npos) bad(where, "header is malformed");
    if (header[from] == '\'') return header.substr(from + 1, header.find('\'', from + 1) - from - 1);
    if (header[from] == '(') return header.substr(from + 1, header.find(')', from) - from - 1);
    return header.substr(from, header.find_first_of(",}", from) - from);
  };
  NpyArray a;
  a.descr = field("descr");
  if (a.descr != "<f4" && a.descr != "<f8" && a.descr != "<i4" && a.descr != "<i8")
    bad(where, "dtype '" + a.descr + "' (float32, float64, int32 or int64, little-endian, expected)");
  if (field("fortran_order") != "False") bad(where, "is in Fortran order (C order expected)");
  std::stringstream dims(field("shape"));
  std::string dim;
  long count = 1;
  while (std::getline(dims, dim, ',')) {
    const std::size_t first = dim.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    long d = -1;
    try {
      std::size_t used = 0;
      d = std::stol(dim.substr(first), &used);
      if (dim.find_first_not_of(' ', first + used) != std::string::npos) d = -1;
    } catch (const std::exception&) {
      d = -1;
    }
    if (d < 0 || d > (1L << 40)) bad(where, "shape (" + field("shape") + ") is malformed");
    a.shape.push_back(d);
    count *= d;
    if (count > (1L << 40)) bad(where, "shape (" + field("shape") + ") is too large");
  }
  const long item = a.descr[2] == '4' ? 4 : 8;
  if (size - data_at != count * item)
    bad(where, "holds " + std::to_string(size - data_at) + " bytes of data; its shape (" + field("shape") + ") needs " +
                   std::to_string(count * item));
  a.values.resize(static_cast<std::size_t>(count));
  std::vector<char> raw(static_cast<std::size_t>(count * item));
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  for (long i = 0; i < count; ++i) {
    const char* p = raw.data() + i * item;
    if (a.descr == "<f4") {
      float v;
      std::memcpy(&v, p, 4);
      a.values[i] = v;
    } else if (a.descr == "<f8") {
      std::memcpy(&a.values[i], p, 8);
    } else if (a.descr == "<i4") {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      a.values[i] = v;
    } else {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      a.values[i] = static_cast<double>(v);
    }
  }
  return a;
}

std::string npy_dtype_name(const std::string& descr) {
  if (descr == "<f4") return "float32";
  if (descr == "<f8") return "float64";
  if (descr == "<i4") return "int32";
  if (descr == "<i8") return "int64";
  return descr;
}

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
