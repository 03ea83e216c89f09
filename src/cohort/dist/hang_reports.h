// Hang reports for torch.distributed collectives, like a Cohort job's (trace/hang_report.h).
//
// Every rank of a group publishes what its collectives are doing into the group's store (a
// FlightReporter, once a second, on a thread of its own). When a collective of the group times
// out on a rank, that rank publishes its final record, asks every rank of the group for its
// record, and writes the diagnosis — who is stuck where, which rank never came — with every
// rank's recent collectives to a file: $COHORT_RUN_DIR/hang-report.txt under `cohort run`, else
// $COHORT_HANG_REPORT, else /tmp/cohort-hang-report-rank<R>-<pid>.txt. The timeout's message names
// the file.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "cohort/comm/flight_recorder.h"
#include "cohort/trace/hang_report.h"

namespace cohort::dist {

class HangReports {
 public:
  HangReports(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              std::shared_ptr<comm::FlightRecorder> recorder);
  ~HangReports();

  // On the rank where a collective timed out (`error`, its message): writes the report and
  // returns its path, or "" when it could not (or another timeout of this group wrote it).
  // Blocks up to a few seconds while the other ranks answer.
  std::string on_timeout(const std::string& error);

 private:
  std::unique_ptr<store::Store> store_;  // the group's store, for the final record and requests
  int rank_, size_;
  std::shared_ptr<comm::FlightRecorder> recorder_;
  std::unique_ptr<trace::FlightReporter> reporter_;  // reads the recorder: declared after it
  std::atomic<bool> reported_{false};
};

}  // namespace cohort::dist
