#include "cohort/elastic/coordinator.h"

#include "cohort/elastic/job_protocol.h"

namespace cohort::elastic {

using store::to_bytes;
using store::to_string;

Coordinator::Coordinator(const CoordinatorOptions& options) : options_(options) {
  server_ = std::make_unique<store::StoreServer>(store::StoreServerOptions{
      .bind_host = options.bind_host, .port = options.port, .token = options.token});
  // A wildcard bind is reached through loopback from inside this process.
  net::Endpoint self = server_->endpoint();
  if (self.host.empty() || self.host == "0.0.0.0" || self.host == "::") self.host = "127.0.0.1";
  client_ = std::make_unique<store::TcpStore>(self, options.token);
  client_->set(keys::kConfig, to_bytes(options.config_yaml));
  client_->set(keys::kWorldSize, to_bytes(std::to_string(options.world_size)));
  client_->set(keys::kRunDir, to_bytes(options.run_dir));
  client_->set(keys::kResume, to_bytes(options.resume_from));
}

Coordinator::~Coordinator() {
  client_.reset();
  if (server_) server_->stop();
}

net::Endpoint Coordinator::endpoint() const { return server_->endpoint(); }

std::vector<nlohmann::json> Coordinator::poll_metrics() {
  std::vector<nlohmann::json> out;
  while (client_->check({keys::metrics(next_metric_)})) {
    auto key = keys::metrics(next_metric_);
    auto text = to_string(client_->get(key));
    client_->delete_key(key);
    ++next_metric_;
    try {
      out.push_back(nlohmann::json::parse(text));
    } catch (const nlohmann::json::exception&) {
      // A record we cannot read is skipped; the job goes on.
    }
  }
  return out;
}

int Coordinator::joined_count() {
  int n = 0;
  for (int r = 0; r < options_.world_size; ++r) {
    if (client_->check({keys::joined(r)})) ++n;
  }
  return n;
}

std::optional<std::vector<nlohmann::json>> Coordinator::summaries() {
  std::vector<std::string> ks;
  for (int r = 0; r < options_.world_size; ++r) ks.push_back(keys::summary(r));
  if (!client_->check(ks)) return std::nullopt;
  std::vector<nlohmann::json> out;
  for (const auto& k : ks) out.push_back(nlohmann::json::parse(to_string(client_->get(k))));
  return out;
}

std::optional<std::pair<int, std::string>> Coordinator::failure() {
  for (int r = 0; r < options_.world_size; ++r) {
    if (client_->check({keys::failed(r)})) {
      return std::make_pair(r, to_string(client_->get(keys::failed(r))));
    }
  }
  return std::nullopt;
}

}  // namespace cohort::elastic
