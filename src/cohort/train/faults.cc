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
  if (f.factor > 0) what += " (" + std::to_string(f.factor) + "x its compute)";
  if (f.every > 0) what += " for " + std::to_string(f.every) + " steps";
  spdlog::warn("injecting fault: {} after {} steps (faults: in the job file)", what, completed);
  spdlog::default_logger()->flush();
}

// SplitMix64's finaliser: a well-mixed 64-bit hash of x.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

FaultInjector::FaultInjector(const std::vector<FaultConfig>& all, int64_t rank, int64_t workers,
                             uint64_t seed)
    : rank_(rank), workers_(workers), seed_(seed) {
  for (const auto& f : all) {
    if (f.rank == rank || f.kind == FaultKind::Stragglers) faults_.push_back(f);
  }
}

int64_t FaultInjector::straggler(const FaultConfig& f, int64_t completed, int64_t workers,
                                 uint64_t seed) {
  if (f.kind != FaultKind::Stragglers || completed < f.at_step || workers < 1) return -1;
  const auto window = static_cast<uint64_t>((completed - f.at_step) / f.every);
  return static_cast<int64_t>(mix(mix(seed) ^ window) % static_cast<uint64_t>(workers));
}

void FaultInjector::at_step(int64_t completed, comm::Communicator* comm) {
  for (const auto& f : faults_) {
    if (f.kind == FaultKind::Slow) {
      if (completed == f.at_step) announce(f, completed);
      continue;
    }
    if (f.kind == FaultKind::Stragglers) {
      if (completed >= f.at_step && (completed - f.at_step) % f.every == 0 &&
          straggler(f, completed, workers_, seed_) == rank_) {
        announce(f, completed);
      }
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
      case FaultKind::Stragglers:
        break;
    }
  }
}

double FaultInjector::slowdown(int64_t completed, double busy_s) const {
  double s = 0;
  for (const auto& f : faults_) {
    if (f.kind == FaultKind::Slow && completed >= f.at_step) {
      s += f.factor > 0 ? (f.factor - 1) * busy_s : f.seconds;
    } else if (straggler(f, completed, workers_, seed_) == rank_) {
      s += (f.factor - 1) * busy_s;
    }
  }
  return s;
}

}  // namespace cohort::train
