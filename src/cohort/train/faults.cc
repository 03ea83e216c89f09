#include "cohort/train/faults.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "cohort/base/log.h"

namespace cohort::train {
namespace {

void announce(const FaultConfig& f, int64_t completed) {
  std::string what = std::string(fault_kind_name(f.kind));
  if (f.seconds > 0) what += " (" + std::to_string(f.seconds) + " s)";
  spdlog::warn("injecting fault: {} after {} steps (faults: in the job file)", what, completed);
  spdlog::default_logger()->flush();
}

}  // namespace

FaultInjector::FaultInjector(const std::vector<FaultConfig>& all, int64_t rank) {
  for (const auto& f : all) {
    if (f.rank == rank) faults_.push_back(f);
  }
}

void FaultInjector::at_step(int64_t completed, comm::Communicator* comm) {
  for (const auto& f : faults_) {
    if (f.kind == FaultKind::Slow) {
      if (completed == f.at_step) announce(f, completed);
      continue;
    }
    if (completed != f.at_step || fired_.count(&f - faults_.data())) continue;
    fired_.insert(&f - faults_.data());  // a rollback to an earlier step does not repeat it
    announce(f, completed);
    switch (f.kind) {
      case FaultKind::Kill:
        ::kill(::getpid(), SIGKILL);
        break;
      case FaultKind::Hang:
        if (f.seconds > 0) {
          std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
        } else {
          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        }
        break;
      case FaultKind::Disconnect:
        if (comm) comm->cut_connections();
        break;
      case FaultKind::Slow:
        break;
    }
  }
}

double FaultInjector::slowdown(int64_t completed) const {
  double s = 0;
  for (const auto& f : faults_) {
    if (f.kind == FaultKind::Slow && completed >= f.at_step) s += f.seconds;
  }
  return s;
}

}  // namespace cohort::train
