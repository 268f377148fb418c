// json_number.h — how every report writes a number JSON cannot hold: NaN
// and Inf become the strings "nan", "inf" and "-inf" (JSON has no
// non-finite numbers; null would hide which one it was); and how the
// comparisons of two report.json documents (drift, beside) read them back.
#pragma once

#include <cmath>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace gradeq {

inline nlohmann::json json_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

// A ratio as json_number wrote it; absent: 0.
inline double ratio_of(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>() == "nan" ? NAN : HUGE_VAL;
  return 0.0;
}

// The items of a report.json list by their `key` (pointers into the
// document: no copies).
inline std::map<std::string, const nlohmann::json*> by_name(const nlohmann::json& list, const char* key) {
  std::map<std::string, const nlohmann::json*> out;
  for (const nlohmann::json& item : list) out[item.value(key, "")] = &item;
  return out;
}

}  // namespace gradeq
