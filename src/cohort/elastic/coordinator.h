// The coordinator of one job: hosts the rendezvous store, publishes the job, and collects what the
// workers report (progress records, final summaries, failures). It runs inside `cohort run` (the
// embedded default) or as `cohort coordinator` when workers are started by a cluster's launcher.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/net/socket.h"
#include "cohort/store/tcp_store.h"

namespace cohort::elastic {

struct CoordinatorOptions {
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;
  int world_size = 1;
  std::string config_yaml;  // resolved job file
  std::string run_dir;
  std::string resume_from;  // checkpoint path or empty
};

class Coordinator {
 public:
  explicit Coordinator(const CoordinatorOptions& options);
  ~Coordinator();

  net::Endpoint endpoint() const;
  int world_size() const { return options_.world_size; }

  // New progress records since the last call, in order.
  std::vector<nlohmann::json> poll_metrics();
  // Ranks that have joined so far.
  int joined_count();
  // The final summaries once every rank has posted one.
  std::optional<std::vector<nlohmann::json>> summaries();
  // The first failure a worker reported, if any: (rank, message).
  std::optional<std::pair<int, std::string>> failure();

 private:
  CoordinatorOptions options_;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::TcpStore> client_;
  long next_metric_ = 0;
};

}  // namespace cohort::elastic
