#include "cohort/train/worker.h"

#include <malloc.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cohort/base/clock.h"
#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/host.h"
#include "cohort/base/log.h"
#include "cohort/comm/communicator.h"
#include "cohort/elastic/agent.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/elastic/rank_claim.h"
#include "cohort/elastic/reports.h"
#include "cohort/store/connect.h"
#include "cohort/trace/hang_report.h"
#include "cohort/train/trainer.h"

namespace cohort::train {

using nlohmann::json;
using store::to_bytes;
using store::to_string;

namespace {

// A training step frees and allocates the same large buffers (activations, their gradients,
// convolution workspaces) every time. glibc hands blocks over 128 KiB back to the kernel as soon
// as they are freed, so every step faulted them in again (page faults, zeroing, cgroup charging:
// about 7% of the cnn's step here). Kept in the heap up to mmap's limit, they are reused.
void keep_freed_memory() {
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

int run_worker(const WorkerOptions& options) {
  keep_freed_memory();
  std::unique_ptr<store::Store> store;
  std::shared_ptr<comm::FlightRecorder> recorder;
  std::unique_ptr<trace::FlightReporter> reporter;  // reads the recorder: declared after it
  int rank = options.rank;
  // How long a failing worker tries to tell the coordinator why: no longer than the coordinator
  // itself waits before it declares the worker lost (a coordinator that is gone must not keep a
  // worker alive for the store's whole timeout).
  std::chrono::milliseconds last_words{3000};
  // Progress, events and live status go by a thread of their own: training never waits on the
  // coordinator, which may be away for a while (elastic.coordinator_wait_s).
  std::unique_ptr<elastic::JobReports> reports;
  json status;  // the last live status published (job/status/<rank>)
  auto publish_status = [&](json s) {
    s["rank"] = rank;
    s["host"] = host_name();
    s["pid"] = ::getpid();
    if (!s.contains("time")) s["time"] = wall_seconds();
    status = s;
    if (reports) {
      reports->status(s);
    } else {
      store->set(elastic::keys::status(rank), to_bytes(s.dump()));
    }
  };
  try {
    store = store::connect(options.join, {.token = options.token});
    std::string yaml = to_string(store->get(elastic::keys::kConfig));
    JobConfig cfg = parse_job_config(yaml, "job config from " + options.join);
    last_words = std::chrono::milliseconds(static_cast<long>(cfg.elastic.failure_timeout_s * 1000));
    // A coordinator out of reach for longer than this has declared this worker lost anyway.
    store::set_reconnect_timeout(*store, last_words);
    int world = static_cast<int>(cfg.workers);
    // Ranks from `workers` on belong to replacements.
    rank = elastic::claim_rank(*store, rank, world,
                               static_cast<int>(cfg.workers + cfg.elastic.max_restarts),
                               to_bytes(json{{"host", host_name()}, {"pid", ::getpid()}}.dump()));
    log::set_context(rank);
    spdlog::info("joined job '{}' as rank {} of {} (store {})", cfg.name, rank, world,
                 options.join);
    const auto coordinator_wait =
        std::chrono::milliseconds(static_cast<long>(cfg.elastic.coordinator_wait_s * 1000));
    reports = std::make_unique<elastic::JobReports>(
        store::connect(options.join, {.token = options.token,
                                      .timeout = std::chrono::seconds(10),
                                      .reconnect_timeout = std::chrono::seconds(1)}),
        rank);

    // One flight recorder across membership epochs: the reporter answers for whichever
    // communicator is current.
    recorder = std::make_shared<comm::FlightRecorder>(
        rank, static_cast<size_t>(cfg.debug.flight_recorder_entries));
    auto reporter_store =
        store::connect(options.join, {.token = options.token, .reconnect_timeout = last_words});
    reporter = std::make_unique<trace::FlightReporter>(
        std::move(reporter_store), elastic::keys::kDebugPrefix, *recorder, rank);
    auto ms = [](double s) { return std::chrono::milliseconds(static_cast<long>(s * 1000)); };
    const std::string run_dir = to_string(store->get(elastic::keys::kRunDir));
    elastic::WorkerAgent agent(
        *store,
        {.store = options.join,
         .token = options.token,
         .rank = rank,
         .heartbeat = ms(cfg.elastic.heartbeat_s),
         // At least as long as the coordinator waits for the survivors and for joiners.
         .join_timeout = ms(cfg.elastic.join_timeout_s + 2 * cfg.elastic.failure_timeout_s),
         .coordinator_wait = coordinator_wait,
         .standby_dir =
             store::is_etcd(options.join) && cfg.coordinator.standby == "workers" ? run_dir : "",
         .comm = {.token = options.token,
                  .bind_host = options.bind_host,
                  .timeout = ms(cfg.comm.timeout_s),
                  .flight_recorder = recorder,
                  .check_collectives = cfg.debug.check_collectives,
                  .host_cpus = host_cpus_from_environment(),
                  .transport = comm::parse_transport(cfg.comm.transport),
                  .integrity = comm::parse_integrity(cfg.comm.integrity)}});

    TrainerContext ctx{
        .config = cfg,
        .agent = agent,
        .run_dir = run_dir,
        .resume_from = to_string(store->get(elastic::keys::kResume)),
        // Rank 0 of any membership epoch reports; the counter keeps the records in order.
        .report_progress = [&](const json& record) { reports->progress(record); },
        .report_event = [&](const json& event) { reports->event(event); },
        .report_status = publish_status,
        .recorder = recorder,
        .store = options.join,
        .token = options.token,
    };
    json summary = train(ctx);
    summary["host"] = host_name();
    summary["pid"] = ::getpid();
    summary["cpus"] = allowed_cpu_count();  // its affinity mask: a share where cohort run bound it
    status["state"] = "finished";
    status.erase("time");
    publish_status(status);
    // The records first: the coordinator ends the job once it has every summary.
    if (!reports->flush(coordinator_wait))
      spdlog::warn("progress records not sent within elastic.coordinator_wait_s");
    agent.post(elastic::keys::summary(rank), to_bytes(summary.dump()));
    agent.wait_for_a_coordinator(coordinator_wait);
    spdlog::info("finished: {} steps, test accuracy {:.4f}", summary.value("steps", 0L),
                 summary.value("test_accuracy", 0.0));
    return 0;
  } catch (const elastic::ExcludedError& e) {
    // The job went on without this worker; its state is not the job's any more.
    spdlog::warn("excluded from the job, exiting: {}", e.what());
    return kExitExcluded;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    reporter.reset();
    if (reports) reports->flush(last_words);
    reports.reset();  // the last words go straight to the store
    bool reachable = store != nullptr;
    if (store) store->set_timeout(last_words);
    if (store && recorder) {
      // Before the failure record: the launcher reads this when it sees the failure.
      reachable =
          trace::publish_final_report(*store, elastic::keys::kDebugPrefix, *recorder, e.what(),
                                      dynamic_cast<const TimeoutError*>(&e) != nullptr);
    }
    if (reachable && rank >= 0) {
      try {
        status["state"] = "failed";
        status["error"] = e.what();
        status.erase("time");
        publish_status(status);
        store->set(elastic::keys::failed(rank), to_bytes(e.what()));
      } catch (const std::exception&) {
        // The coordinator is gone too; the exit code still reports the failure.
      }
    }
    return dynamic_cast<const ConfigError*>(&e) ? 2 : 1;
  }
}

}  // namespace cohort::train
