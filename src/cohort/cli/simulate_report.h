// `cohort simulate --html FILE`: one self-contained page (the console's chart library, uPlot,
// inlined) with the predicted scaling efficiency and step-time breakdown against workers, one
// curve per configuration, and the same data as `--json`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cohort::cli {

// Throws Error when the file cannot be written.
void write_simulate_report(const std::string& path, const nlohmann::json& data);

}  // namespace cohort::cli
