#include "cohort/base/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace cohort::log {
namespace {

std::atomic<int> g_rank{-1};
std::atomic<int> g_epoch{0};
std::atomic<long> g_step{-1};

// %* flag: "r3 e1 s42" (or "launcher" when the process is not a rank).
class ContextFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    int r = g_rank.load(std::memory_order_relaxed);
    if (r < 0) {
      dest.push_back('-');
      return;
    }
    fmt::format_to(std::back_inserter(dest), "r{} e{}", r, g_epoch.load(std::memory_order_relaxed));
    long st = g_step.load(std::memory_order_relaxed);
    if (st >= 0) fmt::format_to(std::back_inserter(dest), " s{}", st);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return spdlog::details::make_unique<ContextFlag>();
  }
};

std::once_flag g_once;

std::unique_ptr<spdlog::formatter> make_formatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<ContextFlag>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%*] %v");
  return formatter;
}

}  // namespace

void set_context(int rank, int epoch, long step) {
  g_rank = rank;
  g_epoch = epoch;
  g_step = step;
}
void set_step(long step) { g_step = step; }
void set_epoch(int epoch) { g_epoch = epoch; }

void init(const std::string& process_name) {
  std::call_once(g_once, [&] {
    auto logger = spdlog::stderr_color_mt(process_name);
    logger->set_formatter(make_formatter());
    const char* lvl = std::getenv("COHORT_LOG_LEVEL");
    logger->set_level(lvl ? spdlog::level::from_str(lvl) : spdlog::level::info);
    spdlog::set_default_logger(logger);
  });
}

void add_file(const std::string& path) {
  init();
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
  sink->set_formatter(make_formatter());
  spdlog::default_logger()->sinks().push_back(std::move(sink));
  spdlog::default_logger()->flush_on(spdlog::level::info);
}

}  // namespace cohort::log
