// types.cpp — memory categories, the fit, sizes as text.
#include "harness/core/memory/types.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

namespace gradeq {

std::string memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::scratch: return "scratch";
  }
  return "?";
}

double MemoryUsage::total() const { return std::accumulate(bytes.begin(), bytes.end(), 0.0); }

double ScenarioMemory::worst_relative_error() const {
  const auto rel = [](double measured, double predicted) {
    return measured > 0.0 ? std::abs(measured - predicted) / measured : HUGE_VAL;
  };
  return std::max(rel(accumulated.peak, predicted_accumulated()), rel(full_batch.peak, predicted_full_batch()));
}

MemoryFit fit_memory(const std::vector<std::pair<long, double>>& points) {
  double n = 0.0, sx = 0.0, sy = 0.0;
  for (const auto& [x, y] : points) {
    n += 1.0;
    sx += static_cast<double>(x);
    sy += y;
  }
  const double mx = sx / n, my = sy / n;
  double sxx = 0.0, sxy = 0.0;
  for (const auto& [x, y] : points) {
    sxx += (static_cast<double>(x) - mx) * (static_cast<double>(x) - mx);
    sxy += (static_cast<double>(x) - mx) * (y - my);
  }
  if (points.size() < 2 || sxx == 0.0) throw std::invalid_argument("fit_memory: needs at least two distinct sizes");
  MemoryFit f;
  f.per_sample = sxy / sxx;
  f.fixed = my - f.per_sample * mx;
  for (const auto& [x, y] : points)
    f.worst_residual = std::max(f.worst_residual, std::abs(f.at(static_cast<double>(x)) - y) / std::max(y, 1.0));
  return f;
}

double parse_bytes(const std::string& text) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  std::string unit(at, end);
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);  // "512 MiB"
  static const std::vector<std::pair<std::string, double>> units = {
      {"", 1.0},       {"B", 1.0},      {"kB", 1e3},       {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12},    {"K", 0x1p10},   {"M", 0x1p20},     {"G", 0x1p30},     {"T", 0x1p40},     {"KiB", 0x1p10},
      {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40}};
  const auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (error != std::errc() || it == units.end() || !std::isfinite(value) || value < 0.0)
    throw std::invalid_argument("'" + text + "' is not a size: expected a number with an optional unit, e.g. 8GiB, "
                                "512MiB, 2GB or 1e9 (B; kB, MB, GB, TB; KiB, MiB, GiB, TiB, also written K, M, G, T)");
  return value * it->second;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && std::abs(bytes) >= 1024.0) {
    bytes /= 1024.0;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return out;
}

}  // namespace gradeq
