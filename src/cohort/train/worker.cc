#include "cohort/train/worker.h"

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/comm/communicator.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/store/tcp_store.h"
#include "cohort/train/trainer.h"

namespace cohort::train {

using nlohmann::json;
using store::to_bytes;
using store::to_string;

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace

int run_worker(const WorkerOptions& options) {
  std::unique_ptr<store::TcpStore> store;
  int rank = options.rank;
  try {
    store = std::make_unique<store::TcpStore>(options.coordinator, options.token);
    std::string yaml = to_string(store->get(elastic::keys::kConfig));
    JobConfig cfg = parse_job_config(yaml, "job config from " + options.coordinator.str());
    int world = static_cast<int>(cfg.workers);
    if (rank < 0) rank = static_cast<int>(store->add(elastic::keys::kNextRank, 1) - 1);
    if (rank >= world) {
      throw ConfigError("rank " + std::to_string(rank) + " is out of range for a job of " +
                        std::to_string(world) + " workers");
    }
    log::set_context(rank);
    store->set(elastic::keys::joined(rank),
               to_bytes(json{{"host", host_name()}, {"pid", ::getpid()}}.dump()));
    spdlog::info("joined job '{}' as rank {} of {} (coordinator {})", cfg.name, rank, world,
                 options.coordinator.str());

    auto timeout = std::chrono::milliseconds(static_cast<long>(cfg.comm.timeout_s * 1000));
    auto comm = comm::Communicator::create(*store, {.rank = rank,
                                                    .size = world,
                                                    .token = options.token,
                                                    .bind_host = options.bind_host,
                                                    .timeout = timeout,
                                                    .store_prefix = elastic::keys::comm_prefix(0)});

    TrainerContext ctx{
        .config = cfg,
        .comm = *comm,
        .run_dir = to_string(store->get(elastic::keys::kRunDir)),
        .resume_from = to_string(store->get(elastic::keys::kResume)),
        .report_progress =
            [&, next = 0L](const json& record) mutable {
              store->set(elastic::keys::metrics(next++), to_bytes(record.dump()));
            },
    };
    json summary = train(ctx);
    summary["host"] = host_name();
    summary["pid"] = ::getpid();
    store->set(elastic::keys::summary(rank), to_bytes(summary.dump()));
    spdlog::info("finished: {} steps, test accuracy {:.4f}", summary.value("steps", 0L),
                 summary.value("test_accuracy", 0.0));
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    if (store && rank >= 0) {
      try {
        store->set(elastic::keys::failed(rank), to_bytes(e.what()));
      } catch (const std::exception&) {
        // The coordinator is gone too; the exit code still reports the failure.
      }
    }
    return dynamic_cast<const ConfigError*>(&e) ? 2 : 1;
  }
}

}  // namespace cohort::train
