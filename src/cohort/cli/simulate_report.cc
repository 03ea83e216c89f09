#include "cohort/cli/simulate_report.h"

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/monitor/web_assets.h"

namespace cohort::cli {
namespace {

std::string asset(std::string_view name) {
  const monitor::WebAsset* a = monitor::find_web_asset(name);
  if (!a) throw Error("the binary lacks its web asset " + std::string(name));
  return std::string(a->body);
}

// JSON inside a <script> element: no "</" may end it early.
std::string script_safe(std::string s) {
  for (size_t at = s.find("</"); at != std::string::npos; at = s.find("</", at + 2)) s.replace(at, 2, "<\\/");
  return s;
}

}  // namespace

void write_simulate_report(const std::string& path, const nlohmann::json& data) {
  std::string page = asset("simulate.html");
  auto put = [&page](const std::string& marker, const std::string& text) {
    const size_t at = page.find(marker);
    if (at == std::string::npos) throw Error("simulate.html lacks " + marker);
    page.replace(at, marker.size(), text);
  };
  put("/*UPLOT_CSS*/", asset("uPlot.min.css"));
  put("/*UPLOT_JS*/", script_safe(asset("uPlot.iife.min.js")));
  put("/*DATA*/", script_safe(data.dump()));
  put("/*REPORT_JS*/", script_safe(asset("simulate.js")));
  write_file_atomically(path, page);
}

}  // namespace cohort::cli
