// The keys a job's coordinator and its workers exchange through the rendezvous store.
//
//   job/config            resolved job file (YAML), set by the coordinator before any worker joins
//   job/world_size        number of workers
//   job/run_dir           the run directory on the coordinator's machine
//   job/resume            checkpoint file to resume from ("" for a fresh start)
//   job/next_rank         counter: a worker without a rank from its launcher takes the next one
//   job/joined/<rank>     set by each worker once it has joined (its host and pid, JSON)
//   job/metrics/<i>       i-th progress record (JSON) from rank 0, i = 0, 1, 2, ...
//   job/metrics_next      counter: the next free i (rank 0 of any membership epoch takes it)
//   job/events/<i>        i-th event (JSON) a worker reports for events.jsonl (e.g. a resume)
//   job/events_next       counter: the next free i
//   job/summary/<rank>    each worker's final report (JSON)
//   job/failed/<rank>     a worker's fatal error (text)
//   job/status/<rank>     each worker's live status (JSON: state, step, step_time, comm_share, ...)
//   comm/e<epoch>/...     the communicator of membership epoch <epoch>
//
// Fault tolerance. <rank> in job/ keys is the worker's id in the job: the launcher's rank (0 ..
// workers-1 at the start, then workers, workers+1, ... for replacements). A worker's rank in a
// communicator is its index in the membership of that epoch.
//   job/heartbeat/<rank>  counter each worker adds 1 to every elastic.heartbeat_s
//   job/epoch             the newest membership epoch the coordinator published (integer)
//   job/membership/<e>    members of epoch e, JSON {"epoch": e, "members": [rank, ...]}
//   job/request/<e>       the coordinator wants epoch e: "abort" (a member was lost: abort the
//                         collectives now) or "grow" (a joiner waits: switch at a snapshot)
//   job/ready/<e>/<rank>  a member has left epoch e-1 and waits for epoch e (JSON)
//   job/waiting/<rank>    a joiner has loaded its data and waits to be admitted
//   job/recovered/<e>     rank 0 of epoch e completed its first step there (JSON)
//   job/abandoned         the coordinator gave up on the job (text); waiting workers stop
//   job/ended             the job is over (completed, failed, cancelled): workers still connected
//                         leave, and say so with job/left/<rank>
//   job/debug/...         flight records and activity for hang reports (trace/hang_report.h)
#pragma once

#include <string>

namespace cohort::elastic::keys {

inline const std::string kConfig = "job/config";
inline const std::string kWorldSize = "job/world_size";
inline const std::string kRunDir = "job/run_dir";
inline const std::string kResume = "job/resume";
inline const std::string kNextRank = "job/next_rank";
// Replacements that claim a fresh rank (a rank already taken is joined again by a process that a
// cluster's launcher restarted under it) count up from the job's worker count.
inline const std::string kNextReplacement = "job/next_replacement";
// One more than the highest rank that has joined, so that the coordinator sees ranks it did not
// start (a worker started by mpirun, srun or Kubernetes).
inline const std::string kRankLimit = "job/rank_limit";
inline std::string joined(int rank) {
  return "job/joined/" + std::to_string(rank);
}
inline std::string metrics(long i) {
  return "job/metrics/" + std::to_string(i);
}
inline std::string summary(int rank) {
  return "job/summary/" + std::to_string(rank);
}
inline std::string failed(int rank) {
  return "job/failed/" + std::to_string(rank);
}
// A worker's live status for the console, rewritten about twice a second (monitor/ reads it).
inline std::string status(int rank) {
  return "job/status/" + std::to_string(rank);
}
inline std::string comm_prefix(int epoch) {
  return "comm/e" + std::to_string(epoch);
}
inline const std::string kMetricsNext = "job/metrics_next";
inline const std::string kEventsNext = "job/events_next";
// i-th event a worker reports for events.jsonl.
inline std::string event(long i) {
  return "job/events/" + std::to_string(i);
}
inline const std::string kEpoch = "job/epoch";
inline const std::string kAbandoned = "job/abandoned";
inline const std::string kEnded = "job/ended";
// Worker <rank> saw job/ended and is leaving.
inline std::string left(int rank) {
  return "job/left/" + std::to_string(rank);
}
// Liveness counter of worker <rank>.
inline std::string heartbeat(int rank) {
  return "job/heartbeat/" + std::to_string(rank);
}
// Members of membership epoch <epoch>.
inline std::string membership(int epoch) {
  return "job/membership/" + std::to_string(epoch);
}
// The coordinator's request for epoch <epoch> ("abort" or "grow").
inline std::string request(int epoch) {
  return "job/request/" + std::to_string(epoch);
}
// Worker <rank> is ready to form epoch <epoch>.
inline std::string ready(int epoch, int rank) {
  return "job/ready/" + std::to_string(epoch) + "/" + std::to_string(rank);
}
// Worker <rank> was declared lost (the cause): a coordinator that takes over the job reads it.
inline std::string lost(int rank) {
  return "job/lost/" + std::to_string(rank);
}
// Where the leading coordinator has read the workers' records up to ({"metrics": i, "events": j}),
// and what its recoveries added up to (RecoveryStats as JSON): for a coordinator that takes over.
inline const std::string kCursors = "job/coordinator_cursors";
inline const std::string kRecoveryStats = "job/recovery_stats";
// A worker that starts a standby coordinator for a job without one ({"rank", "time"}); the
// coordinator that takes the job over removes it.
inline const std::string kStandbyClaim = "job/standby_claim";
// The coordinator that leads (or last led) the job, "<host> pid <pid>" (an etcd store: the lease's
// key job/coordinator goes with its lease, this one stays for its successor to name it).
inline const std::string kLeader = "job/leader";
// The wall-clock time (seconds) the leading coordinator last wrote, a few times per
// elastic.failure_timeout_s: how long its successor's job was without one (coordinator_takeover_seconds).
inline const std::string kLeaderSeen = "job/leader_seen";
// Joiner <rank> waits to be admitted.
inline std::string waiting(int rank) {
  return "job/waiting/" + std::to_string(rank);
}
// Epoch <epoch> completed its first step.
inline std::string recovered(int epoch) {
  return "job/recovered/" + std::to_string(epoch);
}
// The flight records and activity of hang reports: trace::FlightReporter, trace::HangWatch.
inline const std::string kDebugPrefix = "job/debug";

}  // namespace cohort::elastic::keys
