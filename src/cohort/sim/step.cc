#include "cohort/sim/step.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/sim/closed_form.h"
#include "cohort/sim/flows.h"
#include "cohort/sim/program.h"

namespace cohort::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A place in a stream of runs.
struct Cursor {
  size_t run = 0;
  uint64_t in_run = 0;
  void advance(const std::vector<Run>& runs) {
    if (++in_run == runs[run].count) {
      ++run;
      in_run = 0;
    }
  }
};

uint64_t items(const std::vector<Run>& runs) {
  uint64_t n = 0;
  for (const Run& r : runs) n += r.count;
  return n;
}

// The links and cores of the modelled cluster, as FlowNet resources.
struct Fabric {
  bool on_device = false;
  std::vector<uint32_t> cpu;      // per host (one shared pool on one machine)
  std::vector<uint32_t> nic_out;  // per host
  std::vector<uint32_t> nic_in;
  LinkCost local;                 // between ranks of one host
  LinkCost network;               // between hosts (the link's capacity: network.bytes_per_s)
  int threads = 1;
  double slowdown = 1;            // of compute, for the cores the host's workers keep busy
};

}  // namespace

bool shared_memory_within_host(const Profile& p, const Choice& c) {
  return c.transport != comm::Transport::Tcp && p.shm.has_value();
}

const LinkCost& within_host_link(const Profile& p, const Choice& c) {
  return shared_memory_within_host(p, c) ? *p.shm : p.tcp;
}

double threads_per_core(const Profile& p, const Layout& l) {
  const int ranks = l.one_machine ? l.workers : std::min(l.ranks_per_host, l.workers);
  return static_cast<double>(ranks) * (p.compute.on_device ? 1 : p.compute.threads) / p.cores;
}

double receiver_wait_s(const LinkCost& link, double load) {
  if (!(link.oversubscribed_latency_s > link.latency_s) || load <= 1) return 0;
  return (link.oversubscribed_latency_s - link.latency_s) * std::pow(load - 1, link.oversubscribed_exponent);
}

double compute_slowdown(const Profile& p, const Layout& l) {
  if (p.compute.on_device || p.cores < 2) return 1;
  const double threads = threads_per_core(p, l) * p.cores;
  const double busy = std::min<double>(p.cores, threads);
  double f = 1 + (p.compute.shared_slowdown - 1) * std::max(0.0, busy - 1) / (p.cores - 1);
  // Beyond one thread per core, the measured cost of switching, up to twice as many threads.
  if (threads > p.cores) {
    f *= 1 + (p.compute.oversubscribed_slowdown - 1) * std::min(1.0, threads / p.cores - 1);
  }
  return f;
}

namespace {

class Engine {
 public:
  Engine(const Profile& p, const Layout& l, const Choice& c, const StepProgram& prog)
      : prog_(prog), host_of_(hosts_of(l)), ranks_(host_of_.size()) {
    fab_.on_device = p.compute.on_device;
    fab_.threads = p.compute.threads;
    fab_.slowdown = compute_slowdown(p, l);
    if (c.transport == comm::Transport::Shm && !p.shm) {
      throw Error("profile " + p.name + " has no shared-memory transport (transports.shm)");
    }
    fab_.local = within_host_link(p, c);
    fab_.network = p.network;
    if (l.link_bytes_per_s) fab_.network.bytes_per_s = *l.link_bytes_per_s;
    if (l.link_latency_s) fab_.network.latency_s = *l.link_latency_s;
    // A receiver on a host with more threads than cores is not always running.
    const double load = threads_per_core(p, l);
    fab_.local.latency_s += receiver_wait_s(fab_.local, load);
    fab_.network.latency_s += receiver_wait_s(p.network, load);
    const int hosts = host_of_.back() + 1;
    const uint32_t pool = l.one_machine ? net_.add_resource(p.cores) : 0;
    for (int h = 0; h < hosts; ++h) {
      fab_.cpu.push_back(l.one_machine ? pool : net_.add_resource(p.cores));
      fab_.nic_out.push_back(net_.add_resource(fab_.network.bytes_per_s));
      fab_.nic_in.push_back(net_.add_resource(fab_.network.bytes_per_s));
    }
    link_out_.assign(static_cast<size_t>(hosts), 0);
    for (size_t r = 0; r < ranks_.size(); ++r) {
      ranks_[r].host = host_of_[r];
      ranks_[r].done.assign(prog_.ops.size(), false);
    }
  }

  Prediction run() {
    for (size_t r = 0; r < ranks_.size(); ++r) train(static_cast<int>(r));
    while (finished_ < ranks_.size()) {
      const double t_timer = timers_.empty() ? kInf : timers_.top().at;
      const double t_flow = net_.next_finish();
      if (t_timer == kInf && t_flow == kInf) stalled();
      if (t_timer <= t_flow) {
        const Timer t = timers_.top();
        timers_.pop();
        now_ = t.at;
        on_timer(t);
      } else {
        now_ = t_flow;
        const uint64_t tag = net_.finish_next();
        on_done(static_cast<Tag>(tag >> 32), static_cast<int>(tag & 0xffffffffu));
      }
    }
    Prediction out;
    out.workers = static_cast<int>(ranks_.size());
    out.hosts = host_of_.back() + 1;
    for (const RankState& r : ranks_) {
      out.step_s = std::max(out.step_s, r.end);
      out.compute_s += r.compute / static_cast<double>(ranks_.size());
      out.exposed_comm_s += r.exposed / static_cast<double>(ranks_.size());
      out.rank_bytes = std::max(out.rank_bytes, r.bytes_sent);
    }
    for (double b : link_out_) out.link_bytes = std::max(out.link_bytes, b);
    return out;
  }

 private:
  enum class Tag : uint32_t { Train, CommWork, Apply, Send, Arrive };
  struct Timer {
    double at;
    uint64_t seq;
    Tag tag;
    int rank;
    int from;
    bool operator>(const Timer& o) const { return at > o.at || (at == o.at && seq > o.seq); }
  };
  struct RankState {
    int host = 0;
    // Training thread.
    size_t pc = 0;
    double task_start = 0;
    int waiting = -1;
    double wait_start = 0;
    double compute = 0, exposed = 0, end = 0;
    std::vector<bool> done;  // per collective of the step
    // Communication thread.
    std::deque<int> queue;
    int op = -1;
    size_t ex = 0;
    // -1: the codec's work before the collective (Collective::before_s), 0: before the exchange's
    // streams, 1: streams, 2: the plan's last work, 3: the codec's work after the collective.
    int stage = 0;
    bool busy = false;  // running local work
    bool in_progress = false, again = false;
    uint64_t send_total = 0, recv_total = 0, sent = 0, arrived = 0, applied = 0;
    Cursor send_at, arrive_at, apply_at;
    bool sending = false;
    int send_peer = -1;
    double bytes_sent = 0;
  };
  struct PairState {
    uint64_t arrived = 0, consumed = 0;
  };

  static uint64_t tag_of(Tag t, int rank) {
    return (static_cast<uint64_t>(t) << 32) | static_cast<uint32_t>(rank);
  }
  static uint64_t pair_key(int from, int to) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(from)) << 32) | static_cast<uint32_t>(to);
  }
  const RankPlan& plan(const RankState& s, int r) const {
    return (*prog_.ops[static_cast<size_t>(s.op)].plans)[static_cast<size_t>(r)];
  }

  void after(double seconds, Tag t, int rank, int from = -1) {
    timers_.push(Timer{.at = now_ + std::max(0.0, seconds), .seq = seq_++, .tag = t, .rank = rank, .from = from});
  }

  // Work of `seconds` on `cores` of the rank's host (or its device), then `t`.
  void work(int r, double seconds, double cores, Tag t) {
    if (seconds <= 0 || fab_.on_device) {
      after(seconds, t, r);
      return;
    }
    const uint32_t cpu = fab_.cpu[static_cast<size_t>(ranks_[static_cast<size_t>(r)].host)];
    net_.start(now_, seconds * cores, cores, {{cpu, 1.0}}, tag_of(t, r));
  }

  // The training thread runs its actions until one blocks.
  void train(int r) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    while (s.pc < prog_.actions.size()) {
      const Action& a = prog_.actions[s.pc];
      switch (a.kind) {
        case Action::Kind::Compute:
          s.task_start = now_;
          work(r, a.seconds * fab_.slowdown, fab_.threads, Tag::Train);
          return;
        case Action::Kind::Codec:
          s.task_start = now_;
          work(r, a.seconds, 1, Tag::Train);
          return;
        case Action::Kind::Launch:
          s.queue.push_back(a.op);
          ++s.pc;
          progress(r);
          break;
        case Action::Kind::Wait:
          if (!s.done[static_cast<size_t>(a.op)]) {
            s.waiting = a.op;
            s.wait_start = now_;
            return;
          }
          ++s.pc;
          break;
      }
    }
    s.end = now_;
    ++finished_;
  }

  void on_timer(const Timer& t) {
    if (t.tag == Tag::Arrive) {
      ++pairs_[pair_key(t.from, t.rank)].arrived;
      progress(t.rank);
      return;
    }
    on_done(t.tag, t.rank);
  }

  void on_done(Tag t, int r) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    switch (t) {
      case Tag::Train:
        s.compute += now_ - s.task_start;
        ++s.pc;
        train(r);
        return;
      case Tag::CommWork:
        s.busy = false;
        if (s.stage == -1) {
          s.stage = 0;
        } else if (s.stage == 0) {
          open_streams(r);
        }  // after the last work, step_comm ends the collective
        progress(r);
        return;
      case Tag::Apply:
        s.busy = false;
        ++s.applied;
        s.apply_at.advance(plan(s, r).exchanges[s.ex].recv);
        progress(r);
        return;
      case Tag::Send: {
        s.sending = false;
        ++s.sent;
        s.send_at.advance(plan(s, r).exchanges[s.ex].send);
        const bool same = host_of_[static_cast<size_t>(s.send_peer)] == s.host;
        after(same ? fab_.local.latency_s : fab_.network.latency_s, Tag::Arrive, s.send_peer, r);
        progress(r);
        return;
      }
      case Tag::Arrive:
        return;
    }
  }

  void open_streams(int r) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    const Exchange& x = plan(s, r).exchanges[s.ex];
    s.stage = 1;
    s.send_total = items(x.send);
    s.recv_total = items(x.recv);
    s.sent = s.arrived = s.applied = 0;
    s.send_at = s.arrive_at = s.apply_at = Cursor{};
  }

  void finish_op(int r) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    const int op = s.op;
    s.op = -1;
    s.done[static_cast<size_t>(op)] = true;
    if (s.waiting == op) {
      s.exposed += now_ - s.wait_start;
      s.waiting = -1;
      ++s.pc;
      train(r);
    }
  }

  // The communication thread goes as far as it can.
  void progress(int r) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    if (s.in_progress) {
      s.again = true;
      return;
    }
    s.in_progress = true;
    do {
      s.again = false;
      step_comm(r);
    } while (s.again);
    s.in_progress = false;
  }

  void step_comm(int r) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    while (!s.busy) {
      if (s.op < 0) {
        if (s.queue.empty()) return;
        s.op = s.queue.front();
        s.queue.pop_front();
        s.ex = 0;
        s.stage = 0;
        const double before = prog_.ops[static_cast<size_t>(s.op)].before_s;
        if (before > 0) {
          s.stage = -1;
          s.busy = true;
          work(r, before, 1, Tag::CommWork);
          return;
        }
      }
      const RankPlan& p = plan(s, r);
      if (s.ex == p.exchanges.size()) {
        if (s.stage < 2 && p.work_after_s > 0) {
          s.stage = 2;
          s.busy = true;
          work(r, p.work_after_s, 1, Tag::CommWork);
          return;
        }
        const double after = prog_.ops[static_cast<size_t>(s.op)].after_s;
        if (s.stage < 3 && after > 0) {
          s.stage = 3;
          s.busy = true;
          work(r, after, 1, Tag::CommWork);
          return;
        }
        finish_op(r);
        continue;
      }
      const Exchange& x = p.exchanges[s.ex];
      if (s.stage == 0) {
        if (x.work_before_s > 0) {
          s.busy = true;
          work(r, x.work_before_s, 1, Tag::CommWork);
          return;
        }
        open_streams(r);
      }
      if (!pump(r, x)) return;
      ++s.ex;
      s.stage = 0;
    }
  }

  // Moves the current exchange's streams on; true once it is complete.
  bool pump(int r, const Exchange& x) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    for (bool moved = true; moved;) {
      moved = false;
      while (s.arrived < s.recv_total) {
        const Run& run = x.recv[s.arrive_at.run];
        if (run.bytes > 0) {
          PairState& ps = pairs_[pair_key(x.recv_from, r)];
          if (ps.arrived == ps.consumed) break;
          ++ps.consumed;
        }
        ++s.arrived;
        s.arrive_at.advance(x.recv);
        moved = true;
      }
      if (!s.busy && s.applied < s.arrived) {
        const Run& run = x.recv[s.apply_at.run];
        if (s.sent >= run.gate.at(s.applied)) {
          if (run.work_s > 0) {
            s.busy = true;
            work(r, run.work_s, 1, Tag::Apply);
            return false;
          }
          ++s.applied;
          s.apply_at.advance(x.recv);
          moved = true;
        }
      }
      if (!s.sending && s.sent < s.send_total) {
        const Run& run = x.send[s.send_at.run];
        if (s.applied >= run.gate.at(s.sent)) {
          if (run.bytes == 0) {
            ++s.sent;
            s.send_at.advance(x.send);
            moved = true;
          } else {
            transfer(r, x.send_to, static_cast<double>(run.bytes));
          }
        }
      }
    }
    return !s.busy && !s.sending && s.sent == s.send_total && s.applied == s.recv_total;
  }

  void transfer(int from, int to, double bytes) {
    RankState& s = ranks_[static_cast<size_t>(from)];
    s.sending = true;
    s.send_peer = to;
    s.bytes_sent += bytes;
    const int a = s.host, b = host_of_[static_cast<size_t>(to)];
    std::vector<FlowNet::Use> uses;
    double cap;
    if (a == b) {
      cap = fab_.local.bytes_per_s;
      if (!fab_.on_device) uses.push_back({fab_.cpu[static_cast<size_t>(a)], 1.0 / cap});
    } else {
      cap = fab_.network.bytes_per_s;
      link_out_[static_cast<size_t>(a)] += bytes;
      uses.push_back({fab_.nic_out[static_cast<size_t>(a)], 1.0});
      uses.push_back({fab_.nic_in[static_cast<size_t>(b)], 1.0});
    }
    net_.start(now_, bytes, cap, uses, tag_of(Tag::Send, from));
  }

  [[noreturn]] void stalled() const {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const RankState& s = ranks_[r];
      if (s.pc >= prog_.actions.size()) continue;
      std::string what = "simulation stalled: rank " + std::to_string(r);
      if (s.op >= 0) {
        const Exchange& x = plan(s, static_cast<int>(r)).exchanges[s.ex];
        what += " is in exchange " + std::to_string(s.ex) + " of collective " + std::to_string(s.op) +
                " (sending to " + std::to_string(x.send_to) + ": " + std::to_string(s.sent) + " of " +
                std::to_string(s.send_total) + "; receiving from " + std::to_string(x.recv_from) + ": " +
                std::to_string(s.arrived) + " of " + std::to_string(s.recv_total) + ")";
      } else {
        what += " waits for collective " + std::to_string(s.waiting);
      }
      throw Error(what + ": the ranks' plans do not match");
    }
    throw Error("simulation stalled");
  }

  const StepProgram& prog_;
  std::vector<int> host_of_;
  std::vector<RankState> ranks_;
  Fabric fab_;
  FlowNet net_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::unordered_map<uint64_t, PairState> pairs_;
  std::vector<double> link_out_;
  double now_ = 0;
  uint64_t seq_ = 0;
  size_t finished_ = 0;
};

Prediction run_step(const Profile& p, const Layout& l, const Choice& c, StepKind kind) {
  const StepProgram prog = make_program(p, c, hosts_of(l), kind);
  Prediction out = Engine(p, l, c, prog).run();
  out.buckets = prog.buckets;
  for (const Collective& op : prog.ops) {
    out.algorithms.emplace_back(op.spec.kind == CollectiveSpec::Kind::Allreduce
                                    ? comm::algorithm_name(op.algorithm)
                                : op.spec.kind == CollectiveSpec::Kind::Allgatherv ? "allgatherv"
                                                                                   : "encoded");
  }
  return out;
}

}  // namespace

Prediction simulate(const Profile& profile, const Layout& layout, const Choice& choice) {
  const compress::Method m = choice.compression.method;
  if ((m == compress::Method::Fp16 || m == compress::Method::Bf16 || m == compress::Method::Int8) &&
      layout.workers > kMaxEncodedWorkers) {
    throw ConfigError("the simulator plans " + std::string(compress::method_name(m)) +
                      "'s allreduce exchange by exchange (n^2 of them): at most " +
                      std::to_string(kMaxEncodedWorkers) + " workers, not " +
                      std::to_string(layout.workers));
  }
  Prediction out;
  if (choice.sync == SyncMode::LocalSgd && layout.workers > 1) {
    if (choice.period < 1) throw Error("local_sgd: the period must be at least 1");
    const Prediction local = run_step(profile, layout, choice, StepKind::Local);
    const Prediction avg = run_step(profile, layout, choice, StepKind::Averaging);
    const double h = choice.period;
    out = avg;
    auto mean = [h](double a, double b) { return ((h - 1) * a + b) / h; };
    out.step_s = mean(local.step_s, avg.step_s);
    out.compute_s = mean(local.compute_s, avg.compute_s);
    out.exposed_comm_s = avg.exposed_comm_s / h;
    out.link_bytes = avg.link_bytes / h;
    out.rank_bytes = avg.rank_bytes / h;
  } else {
    out = run_step(profile, layout, choice, StepKind::Allreduce);
  }
  // One worker alone, on a host (or machine) of its own.
  Layout alone = layout;
  alone.workers = 1;
  const Prediction one = run_step(profile, alone, choice, StepKind::Allreduce);
  const double batch = static_cast<double>(profile.compute.batch_per_worker);
  out.samples_per_s = out.step_s > 0 ? layout.workers * batch / out.step_s : 0;
  const double single = one.step_s > 0 ? batch / one.step_s : 0;
  out.efficiency = single > 0 ? out.samples_per_s / (layout.workers * single) : 0;
  out.closed_form_step_s = closed_form_step_s(profile, layout, choice);
  return out;
}

}  // namespace cohort::sim
