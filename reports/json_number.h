// json_number.h — how every report writes a number JSON cannot hold: NaN
// and Inf become the strings "nan", "inf" and "-inf" (JSON has no
// non-finite numbers; null would hide which one it was).
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

namespace gradeq {

inline nlohmann::json json_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

}  // namespace gradeq
