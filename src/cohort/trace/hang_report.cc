#include "cohort/trace/hang_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "cohort/base/error.h"
#include "cohort/store/prefix_store.h"

namespace cohort::trace {

using comm::CollectiveRecord;
using comm::CollectiveState;
using comm::FlightSnapshot;
using nlohmann::json;
using store::to_bytes;
using store::to_string;

namespace {

std::string activity_key(int rank) {
  return "activity/" + std::to_string(rank);
}
std::string request_key(long n) {
  return "request/" + std::to_string(n);
}
std::string report_key(int rank) {
  return "report/" + std::to_string(rank);
}

comm::OpKind parse_op_kind(const std::string& s) {
  for (int k = 1; k <= static_cast<int>(comm::kLastOpKind); ++k) {
    auto kind = static_cast<comm::OpKind>(k);
    if (comm::op_kind_name(kind) == s) return kind;
  }
  throw Error("flight record: unknown operation '" + s + "'");
}

DType parse_dtype(const std::string& s) {
  for (DType t : kAllDTypes) {
    if (dtype_name(t) == s) return t;
  }
  throw Error("flight record: unknown element type '" + s + "'");
}

CollectiveState parse_state(const std::string& s) {
  for (int k = 0; k <= 3; ++k) {
    auto st = static_cast<CollectiveState>(k);
    if (comm::collective_state_name(st) == s) return st;
  }
  throw Error("flight record: unknown state '" + s + "'");
}

std::string fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string size_text(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 20)) return fixed(static_cast<double>(bytes) / 1e6) + " MB";
  if (bytes >= 1024) return fixed(static_cast<double>(bytes) / 1e3) + " KB";
  return std::to_string(bytes) + " B";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// A record counts as entered when this rank started it (a failed one may never have started: the
// failure of an earlier operation fails everything queued behind it).
bool entered(const CollectiveRecord& r) {
  return r.state == CollectiveState::Started ||
         (r.state == CollectiveState::Failed && r.started_us != 0) ||
         r.state == CollectiveState::Done;
}

struct View {
  const FlightSnapshot* s = nullptr;
  uint64_t done = 0;                         // highest finished sequence number
  const CollectiveRecord* active = nullptr;  // lowest entered and not finished
  const CollectiveRecord* find(uint64_t seq) const {
    for (const auto& r : s->records) {
      if (r.seq == seq) return &r;
    }
    return nullptr;
  }
};

std::string where_in_loop(const comm::Activity& a, int64_t now_us) {
  std::string s = std::string(comm::phase_name(a.phase));
  if (a.step > 0) s += " of step " + std::to_string(a.step);
  if (a.since_us > 0 && now_us >= a.since_us) {
    s += " (for " + fixed(static_cast<double>(now_us - a.since_us) / 1e6) + " s)";
  }
  return s;
}

std::string last_known(const json& a) {
  std::string s = "its last published activity: ";
  s += "finished #" + std::to_string(a.value("last_done", 0UL)) + ", " +
       a.value("phase", std::string("?"));
  long step = a.value("step", -1L);
  if (step > 0) s += " of step " + std::to_string(step);
  return s;
}

// "recv from rank 1 (tag 7, 4.0 KB)".
std::string describe_message(const comm::MessageRecord& m) {
  return std::string(m.sends ? "send to" : "recv from") + " rank " + std::to_string(m.peer) +
         " (tag " + std::to_string(m.tag) + ", " + size_text(m.bytes()) + ")";
}

// The send or recv a rank waits on: its oldest in flight (a rank runs its own in the order
// posted, the next one only beside a waiting one).
const comm::MessageRecord* waiting_message(const View& v) {
  return v.s && !v.s->messages.empty() ? &v.s->messages.front() : nullptr;
}

double waited_s(const View& v, const comm::MessageRecord& m) {
  return static_cast<double>(v.s->taken_us - m.posted_us) / 1e6;
}

// With no collective in flight, the sends and recvs that wait: for each, whether its peer posted
// the matching one (then both wait, and the connection between them is suspect) or not (the
// peer is named, with where its loop stands).
void explain_messages(const std::vector<View>& views, std::string& head,
                      std::vector<int>& culprits) {
  const int n = static_cast<int>(views.size());
  for (int r = 0; r < n; ++r) {
    const View& v = views[static_cast<size_t>(r)];
    const comm::MessageRecord* m = waiting_message(v);
    if (!m) continue;
    head += "; rank " + std::to_string(r) + " has waited " + fixed(waited_s(v, *m)) + " s in " +
            describe_message(*m);
    if (m->peer < 0 || m->peer >= n || !views[static_cast<size_t>(m->peer)].s) continue;
    const View& p = views[static_cast<size_t>(m->peer)];
    const bool matched = std::any_of(p.s->messages.begin(), p.s->messages.end(), [&](auto& o) {
      return o.peer == r && o.tag == m->tag && o.sends != m->sends;
    });
    if (matched) {
      head += ", and rank " + std::to_string(m->peer) + " has the matching " +
              (m->sends ? "recv" : "send") + " in flight: suspect the connection between them";
    } else {
      head += ", which rank " + std::to_string(m->peer) + " never " +
              (m->sends ? "received (posted no recv" : "sent (posted no send") + " to rank " +
              std::to_string(r) + " with tag " + std::to_string(m->tag) + "); rank " +
              std::to_string(m->peer) + " is in " + where_in_loop(p.s->activity, p.s->taken_us);
      if (std::find(culprits.begin(), culprits.end(), m->peer) == culprits.end()) {
        culprits.push_back(m->peer);
      }
    }
  }
}

}  // namespace

std::string describe_record(const CollectiveRecord& r) {
  std::string s = std::string(comm::op_kind_name(r.kind)) + " #" + std::to_string(r.seq) + " (";
  if (!r.label.empty()) s += r.label + ", ";
  return s + size_text(r.bytes()) + ")";
}

json to_json(const FlightSnapshot& s) {
  json recs = json::array();
  for (const auto& r : s.records) {
    recs.push_back({{"seq", r.seq},
                    {"op", comm::op_kind_name(r.kind)},
                    {"dtype", dtype_name(r.dtype)},
                    {"count", r.count},
                    {"bytes", r.bytes()},
                    {"algorithm", comm::algorithm_name(r.algorithm)},
                    {"state", comm::collective_state_name(r.state)},
                    {"queued_us", r.queued_us},
                    {"started_us", r.started_us},
                    {"finished_us", r.finished_us},
                    {"label", r.label}});
  }
  json messages = json::array();
  for (const auto& m : s.messages) {
    messages.push_back({{"id", m.id},
                        {"op", m.sends ? "send" : "recv"},
                        {"peer", m.peer},
                        {"tag", m.tag},
                        {"dtype", dtype_name(m.dtype)},
                        {"count", m.count},
                        {"posted_us", m.posted_us}});
  }
  return json{{"rank", s.rank},
              {"taken_us", s.taken_us},
              {"step", s.activity.step},
              {"phase", comm::phase_name(s.activity.phase)},
              {"phase_since_us", s.activity.since_us},
              {"records", recs},
              {"messages", messages}};
}

FlightSnapshot snapshot_from_json(const json& j) {
  try {
    FlightSnapshot s;
    s.rank = j.at("rank").get<int>();
    s.taken_us = j.at("taken_us").get<int64_t>();
    s.activity.step = j.at("step").get<int64_t>();
    s.activity.phase = comm::parse_phase(j.at("phase").get<std::string>());
    s.activity.since_us = j.at("phase_since_us").get<int64_t>();
    for (const auto& r : j.at("records")) {
      s.records.push_back(
          CollectiveRecord{.seq = r.at("seq").get<uint64_t>(),
                           .kind = parse_op_kind(r.at("op").get<std::string>()),
                           .dtype = parse_dtype(r.at("dtype").get<std::string>()),
                           .count = r.at("count").get<uint64_t>(),
                           .algorithm = comm::parse_algorithm(r.at("algorithm").get<std::string>()),
                           .state = parse_state(r.at("state").get<std::string>()),
                           .queued_us = r.at("queued_us").get<int64_t>(),
                           .started_us = r.at("started_us").get<int64_t>(),
                           .finished_us = r.at("finished_us").get<int64_t>(),
                           .label = r.value("label", std::string())});
    }
    for (const auto& m : j.value("messages", json::array())) {
      const std::string op = m.at("op").get<std::string>();
      if (op != "send" && op != "recv") throw Error("flight record: unknown message '" + op + "'");
      s.messages.push_back(comm::MessageRecord{.id = m.at("id").get<uint64_t>(),
                                               .sends = op == "send",
                                               .peer = m.at("peer").get<int>(),
                                               .tag = m.at("tag").get<uint32_t>(),
                                               .dtype = parse_dtype(m.at("dtype").get<std::string>()),
                                               .count = m.at("count").get<uint64_t>(),
                                               .posted_us = m.at("posted_us").get<int64_t>()});
    }
    return s;
  } catch (const json::exception& e) {
    throw Error(std::string("malformed flight record: ") + e.what());
  }
}

HangDiagnosis diagnose_hang(const std::vector<RankInfo>& ranks) {
  HangDiagnosis d;
  const int n = static_cast<int>(ranks.size());
  std::vector<View> views(ranks.size());
  std::vector<int> silent;
  uint64_t stuck = 0;
  for (int r = 0; r < n; ++r) {
    const RankInfo& info = ranks[static_cast<size_t>(r)];
    if (!info.member) continue;
    if (!info.report) {
      silent.push_back(r);
      continue;
    }
    d.snapshots.push_back(*info.report);
  }
  // d.snapshots no longer grows: the pointers stay valid from here on.
  for (size_t i = 0, k = 0; i < views.size(); ++i) {
    if (!ranks[i].member || !ranks[i].report) continue;
    View& v = views[i];
    v.s = &d.snapshots[k++];
    for (const auto& rec : v.s->records) {
      if (rec.state == CollectiveState::Done) v.done = std::max(v.done, rec.seq);
    }
    for (const auto& rec : v.s->records) {
      if (rec.seq > v.done && entered(rec) && rec.state != CollectiveState::Done &&
          (!v.active || rec.seq < v.active->seq)) {
        v.active = &rec;
      }
    }
    if (v.active && (stuck == 0 || v.active->seq < stuck)) stuck = v.active->seq;
  }
  d.stuck_seq = stuck;

  std::vector<int> waiting, never, past;
  const CollectiveRecord* what = nullptr;
  double waited = -1;
  for (int r = 0; r < n; ++r) {
    const View& v = views[static_cast<size_t>(r)];
    if (!v.s) continue;
    if (stuck == 0) continue;
    const CollectiveRecord* rec = v.find(stuck);
    if (rec && entered(*rec) && rec->state != CollectiveState::Done) {
      waiting.push_back(r);
      if (!what) what = rec;
      const int64_t until =
          rec->state == CollectiveState::Failed ? rec->finished_us : v.s->taken_us;
      const double w = static_cast<double>(until - rec->started_us) / 1e6;
      waited = waited < 0 ? w : std::min(waited, w);
    } else if (v.done >= stuck) {
      past.push_back(r);
    } else {
      never.push_back(r);
    }
  }

  auto note_of = [&](int r) {
    const RankInfo& info = ranks[static_cast<size_t>(r)];
    std::string s = info.note.empty() ? "no answer" : info.note;
    if (info.last_activity) s += "; " + last_known(*info.last_activity);
    return s;
  };

  std::string head;
  if (stuck != 0) {
    const std::string coll = describe_record(*what);
    const std::string wait_text = rank_list(waiting) + (waiting.size() == 1 ? " has" : " have") +
                                  " waited " + fixed(waited) + " s";
    if (!never.empty()) {
      head = rank_list(never) + " never entered " + coll + "; " + wait_text;
      for (int r : never) {
        const View& v = views[static_cast<size_t>(r)];
        head += "; rank " + std::to_string(r) + " last finished #" + std::to_string(v.done) +
                " and is in " + where_in_loop(v.s->activity, v.s->taken_us);
      }
      d.culprits = never;
    } else if (!silent.empty()) {
      head = rank_list(silent) + " did not report (" + note_of(silent.front()) + "); " + wait_text +
             " in " + coll;
      d.culprits = silent;
    } else {
      // A rank past it (a broadcast's root, say) finished its part; the others wait on each other.
      head = (past.empty() ? "every rank entered " + coll + " and none finished it"
                           : rank_list(waiting) + " entered " + coll + " and did not finish it, " +
                                 rank_list(past) + " finished " +
                                 (past.size() == 1 ? "its part" : "their parts")) +
             " (" + wait_text + "): no rank is missing; suspect the connections between them";
    }
    if (!never.empty() && !silent.empty()) {
      head += "; " + rank_list(silent) + " did not report (" + note_of(silent.front()) + ")";
      d.culprits.insert(d.culprits.end(), silent.begin(), silent.end());
    }
  } else {
    head = "no collective is in flight";
    if (!silent.empty()) {
      head += "; " + rank_list(silent) + " did not report (" + note_of(silent.front()) + ")";
      d.culprits = silent;
    }
    const size_t before = head.size();
    explain_messages(views, head, d.culprits);
    const bool messages_explain = head.size() != before;
    for (int r = 0; r < n && !messages_explain; ++r) {
      const View& v = views[static_cast<size_t>(r)];
      if (v.s) {
        head +=
            "; rank " + std::to_string(r) + " is in " + where_in_loop(v.s->activity, v.s->taken_us);
      }
    }
  }
  d.headline = head;

  for (int r = 0; r < n; ++r) {
    const View& v = views[static_cast<size_t>(r)];
    const RankInfo& info = ranks[static_cast<size_t>(r)];
    if (!info.member) continue;
    std::string line = "rank " + std::to_string(r) + ": ";
    if (!v.s) {
      line += "did not report: " + note_of(r);
    } else {
      const CollectiveRecord* rec = stuck ? v.find(stuck) : nullptr;
      if (rec && entered(*rec) && rec->state != CollectiveState::Done) {
        line += std::string(rec->state == CollectiveState::Failed ? "gave up on " : "waiting in ") +
                describe_record(*rec) + " after " +
                fixed(static_cast<double>((rec->state == CollectiveState::Failed ? rec->finished_us
                                                                                 : v.s->taken_us) -
                                          rec->started_us) /
                      1e6) +
                " s; ";
      }
      if (const comm::MessageRecord* m = waiting_message(v)) {
        line += "waiting in " + describe_message(*m) + " for " + fixed(waited_s(v, *m)) + " s";
        if (v.s->messages.size() > 1) {
          line += " (" + std::to_string(v.s->messages.size() - 1) + " more send/recv posted)";
        }
        line += "; ";
      }
      line += "last finished #" + std::to_string(v.done) + "; in " +
              where_in_loop(v.s->activity, v.s->taken_us);
    }
    if (!info.error.empty()) line += "; failed: " + info.error;
    d.details.push_back(line);
  }
  return d;
}

std::string HangDiagnosis::text() const {
  std::string t = "hang report\n\n" + headline + "\n\n";
  for (const auto& l : details) t += l + "\n";
  for (const auto& s : snapshots) {
    t += "\nrank " + std::to_string(s.rank) + " flight recorder (" +
         std::to_string(s.records.size()) + " most recent collectives; times relative to the " +
         "report, in seconds)\n";
    t += "     seq  op              dtype        count  algorithm           state     queued  "
         "started finished  label\n";
    const size_t shown = std::min<size_t>(s.records.size(), 32);
    for (size_t i = s.records.size() - shown; i < s.records.size(); ++i) {
      const auto& r = s.records[i];
      auto rel = [&](int64_t us) {
        return us == 0 ? std::string("-") : fixed(static_cast<double>(us - s.taken_us) / 1e6, 3);
      };
      char line[512];
      std::snprintf(
          line, sizeof(line), "%8lu  %-14s  %-5s  %11lu  %-18s  %-7s  %8s %8s %8s  %s\n",
          static_cast<unsigned long>(r.seq), std::string(comm::op_kind_name(r.kind)).c_str(),
          std::string(dtype_name(r.dtype)).c_str(), static_cast<unsigned long>(r.count),
          std::string(comm::algorithm_name(r.algorithm)).c_str(),
          std::string(comm::collective_state_name(r.state)).c_str(), rel(r.queued_us).c_str(),
          rel(r.started_us).c_str(), rel(r.finished_us).c_str(), r.label.c_str());
      t += line;
    }
    for (const auto& m : s.messages) {
      t += "  in flight: " + describe_message(m) + ", posted " +
           fixed(static_cast<double>(m.posted_us - s.taken_us) / 1e6, 3) + "\n";
    }
  }
  return t;
}

// ---- worker side ----

FlightReporter::FlightReporter(std::unique_ptr<store::Store> connection, const std::string& prefix,
                               comm::FlightRecorder& recorder, int rank,
                               std::chrono::milliseconds publish_every)
    : connection_(std::move(connection)),
      store_(std::make_unique<store::PrefixStore>(prefix, *connection_)),
      recorder_(recorder),
      rank_(rank),
      every_(publish_every) {
  thread_ = std::thread([this] { loop(); });
}

FlightReporter::~FlightReporter() {
  stop_ = true;
  thread_.join();
}

void FlightReporter::loop() {
  try {
    long n = 0;
    while (store_->check({request_key(n)})) ++n;  // requests made before this rank started
    auto next_publish = std::chrono::steady_clock::now();
    while (!stop_) {
      if (std::chrono::steady_clock::now() >= next_publish) {
        const comm::Activity a = recorder_.activity();
        json j{{"rank", rank_},
               {"step", a.step},
               {"phase", comm::phase_name(a.phase)},
               {"phase_since_us", a.since_us},
               {"last_done", recorder_.last_done()},
               {"time_us", comm::now_us()}};
        store_->set(activity_key(rank_), to_bytes(j.dump()));
        next_publish = std::chrono::steady_clock::now() + every_;
      }
      try {
        store_->wait({request_key(n)}, std::chrono::milliseconds(200));
      } catch (const TimeoutError&) {
        continue;
      }
      json j = to_json(recorder_.snapshot());
      j["request"] = n++;
      store_->set(report_key(rank_), to_bytes(j.dump()));
    }
  } catch (const std::exception& e) {
    // The coordinator is gone (the job is ending): nobody is left to report to.
    spdlog::debug("flight reporter of rank {} stopped: {}", rank_, e.what());
  }
}

bool publish_final_report(store::Store& store, const std::string& prefix,
                          const comm::FlightRecorder& recorder, const std::string& error,
                          bool timed_out) {
  try {
    store::PrefixStore s(prefix, store);
    json j = to_json(recorder.snapshot());
    j["final"] = true;
    j["error"] = error;
    j["timed_out"] = timed_out;
    s.set(report_key(recorder.snapshot().rank), to_bytes(j.dump()));
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("could not publish the flight record: {}", e.what());
    return false;
  }
}

// ---- coordinator side ----

HangWatch::HangWatch(store::Store& store, const std::string& prefix, int world_size,
                     double hang_timeout_s)
    : store_(std::make_unique<store::PrefixStore>(prefix, store)),
      world_(world_size),
      timeout_s_(hang_timeout_s),
      last_seen_(static_cast<size_t>(world_size)),
      last_progress_(std::chrono::steady_clock::now()) {
  for (int r = 0; r < world_size; ++r) members_.push_back(r);
}

void HangWatch::set_members(std::vector<int> job_ranks) {
  std::sort(job_ranks.begin(), job_ranks.end());
  if (job_ranks == members_) return;
  members_ = std::move(job_ranks);
  if (!members_.empty()) world_ = std::max(world_, members_.back() + 1);
  last_seen_.resize(static_cast<size_t>(world_));
  // Another world: its ranks publish afresh, and the time without progress starts again.
  last_progress_ = std::chrono::steady_clock::now();
}

bool HangWatch::stalled() {
  auto now = std::chrono::steady_clock::now();
  bool all = true, progress = false, finishing = false;
  for (int r : members_) {
    if (!store_->check({activity_key(r)})) {
      all = false;
      continue;
    }
    json a = json::parse(to_string(store_->get(activity_key(r))), nullptr, false);
    if (a.is_discarded()) continue;
    const std::string phase = a.value("phase", std::string());
    if (phase == "done" || phase == "evaluate") finishing = true;
    const std::string sig = std::to_string(a.value("step", -1L)) + "/" + phase + "/" +
                            std::to_string(a.value("last_done", 0UL));
    if (sig != last_seen_[static_cast<size_t>(r)]) {
      last_seen_[static_cast<size_t>(r)] = sig;
      progress = true;
    }
  }
  if (progress || !all || finishing) {
    last_progress_ = now;
    if (progress) reported_ = false;
    return false;
  }
  if (timeout_s_ <= 0 || reported_) return false;
  if (std::chrono::duration<double>(now - last_progress_).count() < timeout_s_) return false;
  reported_ = true;
  return true;
}

bool HangWatch::timeout_reported() {
  for (int r : members_) {
    if (!store_->check({report_key(r)})) continue;
    json j = json::parse(to_string(store_->get(report_key(r))), nullptr, false);
    if (!j.is_discarded() && j.value("final", false) && j.value("timed_out", false)) return true;
  }
  return false;
}

std::vector<RankInfo> HangWatch::collect(std::chrono::milliseconds wait) {
  while (store_->check({request_key(next_request_)})) ++next_request_;  // someone else's
  const long req = next_request_++;
  store_->set(request_key(req), to_bytes("1"));
  std::vector<RankInfo> out(static_cast<size_t>(world_));
  for (RankInfo& info : out) info.member = false;
  for (int r : members_) out[static_cast<size_t>(r)].member = true;
  std::vector<bool> answered(static_cast<size_t>(world_), false);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    bool all = true;
    for (int r : members_) {
      auto i = static_cast<size_t>(r);
      if (answered[i]) continue;
      if (store_->check({report_key(r)})) {
        json j = json::parse(to_string(store_->get(report_key(r))), nullptr, false);
        if (!j.is_discarded() && (j.value("final", false) || j.value("request", -1L) >= req)) {
          try {
            out[i].report = snapshot_from_json(j);
            out[i].error = j.value("error", std::string());
            answered[i] = true;
            continue;
          } catch (const Error& e) {
            out[i].note = e.what();
          }
        }
      }
      all = false;
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int r : members_) {
    if (!store_->check({activity_key(r)})) continue;
    json a = json::parse(to_string(store_->get(activity_key(r))), nullptr, false);
    if (!a.is_discarded()) out[static_cast<size_t>(r)].last_activity = a;
  }
  return out;
}

}  // namespace cohort::trace
