// Numbers of the records Cohort writes as JSON (metrics, status, summaries), read back. JSON has
// no NaN or infinity: nlohmann writes them as null, which a diverged training's loss is. Read as
// nlohmann's value(key, fallback) would, such a null throws; these give NaN for it instead.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>

namespace cohort {

// j[key] as a double: NaN when it is null (a number that was not finite), `absent` when j has no
// such key or is not an object, or the key holds something other than a number.
inline double json_number(const nlohmann::json& j, const char* key, double absent) {
  if (!j.is_object()) return absent;
  const auto it = j.find(key);
  if (it == j.end()) return absent;
  if (it->is_null()) return NAN;
  return it->is_number() ? it->get<double>() : absent;
}

}  // namespace cohort
