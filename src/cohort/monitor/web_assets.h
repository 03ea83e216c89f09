// The web console's files (web/ and the libraries it uses from web/node_modules), embedded in the
// binary at build time (cmake/EmbedFiles.cmake).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::monitor {

struct WebAsset {
  std::string_view name;  // e.g. "console.js", "uPlot.iife.min.js"
  std::string_view body;
};

const std::vector<WebAsset>& web_assets();
// The asset called `name`, or nullptr.
const WebAsset* find_web_asset(std::string_view name);
// Content-Type by file extension.
std::string content_type_for(std::string_view name);

}  // namespace cohort::monitor
