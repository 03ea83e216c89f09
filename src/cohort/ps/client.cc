#include "cohort/ps/client.h"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "cohort/base/bytes.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/net/frame_stream.h"
#include "cohort/net/handshake.h"
#include "cohort/store/connect.h"

namespace cohort::ps {
namespace {

// A primary that does not take a connection this soon is treated as gone (the next view says).
constexpr Millis kConnectTimeout{1000};
// How long a request for a shard nobody has initialised yet waits before it is sent again.
constexpr Millis kNotReadyRetry{20};
// The largest shard state a snapshot accepts (a server accepts no larger message by default).
constexpr size_t kMaxStateBytes = size_t{1} << 30;

}  // namespace

struct Client::Conn {
  int server = -1;
  uint64_t incarnation = 0;
  net::Socket sock;
  net::FrameReader reader;
  net::FrameWriter writer;
};

Client::Client(const ClientOptions& options, Layout layout)
    : options_(options),
      layout_(std::move(layout)),
      store_(store::connect(options.store, {.token = options.token, .timeout = options.timeout})) {
  const Deadline deadline = Deadline::after(options_.timeout);
  auto v = latest_view(*store_);
  if (!v) v = wait_for_view(*store_, 0, options_.timeout);
  if (!v) {
    throw TimeoutError(options_.name + ": no parameter-server view within " +
                       std::to_string(options_.timeout.count()) +
                       " ms (are the job's parameter servers up?)");
  }
  view_ = *v;
  if (static_cast<int>(view_.shards.size()) != layout_.servers()) {
    throw ConfigError(options_.name + ": the job has " + std::to_string(view_.shards.size()) +
                      " parameter servers, the layout " + std::to_string(layout_.servers()));
  }
  (void)deadline;
  thread_ = std::thread([this] { run_loop(); });
}

Client::~Client() {
  closing_ = true;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<uint64_t> Client::all_keys() const {
  std::vector<uint64_t> k(layout_.keys());
  for (size_t i = 0; i < k.size(); ++i) k[i] = i;
  return k;
}

std::shared_ptr<comm::Work> Client::submit(const char* what, std::function<void()> run) {
  std::shared_ptr<comm::Work> work;
  {
    std::lock_guard lk(mu_);
    if (stop_) throw Error(options_.name + ": parameter-server client is closed");
    work = std::make_shared<comm::Work>(std::string("parameter-server ") + what, ++seq_);
    queue_.emplace_back(work, std::move(run));
  }
  cv_.notify_all();
  return work;
}

void Client::run_loop() {
  for (;;) {
    std::pair<std::shared_ptr<comm::Work>, std::function<void()>> item;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      item.second();
      item.first->finish();
    } catch (...) {
      item.first->fail(std::current_exception());
    }
  }
}

std::string Client::describe(uint32_t shard) const {
  std::string s = "shard " + std::to_string(shard);
  if (shard < view_.shards.size() && view_.shards[shard].primary >= 0) {
    const int p = view_.shards[shard].primary;
    s += " at parameter server " + std::to_string(p) + " (" + view_.servers[p].address + ")";
  }
  return s;
}

void Client::next_view(int64_t at_least, Deadline deadline) {
  if (auto v = latest_view(*store_); v && v->number >= at_least && v->number > view_.number) {
    view_ = *v;
    return;
  }
  auto v = wait_for_view(*store_, view_.number, std::max(deadline.remaining(), Millis(1)));
  if (v) view_ = *v;
}

Client::Conn& Client::connection(uint32_t shard, Deadline deadline) {
  const int server = view_.primary_of(shard);
  const ServerEntry& e = view_.servers[server];
  auto& slot = conns_[shard];
  if (slot && slot->server == server && slot->incarnation == e.incarnation) return *slot;
  auto c = std::make_unique<Conn>();
  c->server = server;
  c->incarnation = e.incarnation;
  const Deadline d = deadline.earlier(Deadline::after(kConnectTimeout));
  c->sock = net::Socket::connect(net::Endpoint::parse(e.address), d);
  c->sock.set_nodelay(true);
  net::handshake_as_client(c->sock, options_.token, options_.name, d);
  c->sock.set_nonblocking(true);
  slot = std::move(c);
  return *slot;
}

// One request per shard in flight; answers come in any order. A shard whose primary is gone or
// refuses it is sent again once a newer view names another; one that is not initialised yet, a
// little later. A shard whose server says it holds the answer while another worker evaluates
// (kHeld) has its deadline start again: a pause is bounded by the evaluating worker's life, not
// by this call's timeout.
std::vector<Response> Client::exchange(std::vector<std::optional<Request>> requests,
                                       const char* what, Deadline deadline, size_t max_answer) {
  const size_t n = requests.size();
  if (max_answer == 0) max_answer = layout_.total() * sizeof(float) + (1u << 20);
  std::vector<std::vector<uint8_t>> payloads(n);
  std::vector<std::optional<Response>> answers(n);
  std::vector<bool> in_flight(n, false);
  std::vector<Deadline> retry_at(n, Deadline(Clock::time_point::min()));
  std::vector<std::string> last_error(n);
  std::vector<Deadline> due(n, deadline);  // each shard's, moved on by kHeld
  auto lost = [&](uint32_t s, const std::string& why) {
    last_error[s] = why;
    conns_.erase(s);
    in_flight[s] = false;
    next_view(view_.number + 1, deadline.earlier(Deadline::after(Millis(200))));
  };
  for (;;) {
    bool all = true;
    for (size_t s = 0; s < n; ++s) all &= !requests[s] || answers[s].has_value();
    if (all) break;
    if (closing_.load()) {
      throw Error(options_.name + ": parameter-server " + what +
                  " given up: the client was closed while it waited");
    }
    for (uint32_t s = 0; s < n; ++s) {
      if (!requests[s] || answers[s] || !due[s].expired()) continue;
      throw TimeoutError(options_.name + ": parameter-server " + what + " of " + describe(s) +
                         " (slot " + std::to_string(requests[s]->slot) + ", clock " +
                         std::to_string(requests[s]->clock) + ") not answered in time" +
                         (last_error[s].empty() ? "" : ": " + last_error[s]));
    }
    // Send what is due.
    for (uint32_t s = 0; s < n; ++s) {
      if (!requests[s] || answers[s] || in_flight[s] || !retry_at[s].expired()) continue;
      requests[s]->view = view_.number;
      requests[s]->id = next_id_++;
      payloads[s] = encode_request(*requests[s]);
      try {
        Conn& c = connection(s, due[s]);
        c.writer.push(net::MsgType::kPsRequest, payloads[s]);
        c.writer.flush(c.sock);
        in_flight[s] = true;
      } catch (const Error& e) {
        lost(s, e.what());
      }
    }
    std::vector<pollfd> fds;
    std::vector<uint32_t> which;
    for (uint32_t s = 0; s < n; ++s) {
      if (!in_flight[s]) continue;
      Conn& c = *conns_.at(s);
      fds.push_back(
          {c.sock.fd(), static_cast<short>(POLLIN | (c.writer.empty() ? 0 : POLLOUT)), 0});
      which.push_back(s);
    }
    Deadline wake = Deadline::never();
    for (uint32_t s = 0; s < n; ++s) {
      if (!requests[s] || answers[s]) continue;
      wake = wake.earlier(due[s]);
      if (!in_flight[s] && !retry_at[s].expired()) wake = wake.earlier(retry_at[s]);
    }
    if (::poll(fds.data(), fds.size(), wake.poll_timeout_ms()) < 0 && errno != EINTR) {
      throw SystemError("poll", errno);
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      const uint32_t s = which[i];
      if (!fds[i].revents) continue;
      Conn& c = *conns_.at(s);
      try {
        if (!c.writer.empty()) c.writer.flush(c.sock);
        if (!c.reader.read(c.sock, max_answer)) continue;
        Response r = decode_response(c.reader.take().payload);
        // The answer to a request given up on earlier (its exchange timed out), still on this
        // connection: not this request's.
        if (r.id != requests[s]->id) continue;
        in_flight[s] = r.status == Status::kHeld;
        switch (r.status) {
          case Status::kHeld:  // still in flight: the time it is held does not count
            // The next notice is due kHeldNotice from now; the timeout counts from then.
            due[s] = due[s].later(Deadline::after(options_.timeout + kHeldNotice));
            deadline = deadline.later(due[s]);
            last_error[s] = r.message;
            break;
          case Status::kOk:
            answers[s] = std::move(r);
            break;
          case Status::kError:
            throw Error(options_.name + ": parameter-server " + what + " of " + describe(s) +
                        " refused: " + r.message);
          case Status::kNotReady:
            last_error[s] = r.message;
            retry_at[s] = Deadline::after(kNotReadyRetry);
            break;
          case Status::kNotPrimary:
            last_error[s] = r.message;
            next_view(std::max(r.view, view_.number + 1),
                      deadline.earlier(Deadline::after(Millis(200))));
            break;
        }
      } catch (const PeerLostError& e) {
        lost(s, std::string("connection lost: ") + e.what());
      } catch (const ProtocolError& e) {
        lost(s, e.what());
      }
    }
  }
  std::vector<Response> out(n);
  for (size_t s = 0; s < n; ++s) {
    if (answers[s]) out[s] = std::move(*answers[s]);
  }
  return out;
}

std::shared_ptr<comm::Work> Client::transfer(const char* what, std::span<const uint64_t> keys,
                                             std::span<const float> values, std::span<float> out,
                                             bool push, bool pull, const PushPullOptions& o,
                                             PullInfo* info) {
  const uint64_t count = layout_.count(keys);
  if (push && values.size() != count) {
    throw Error(options_.name + ": push of " + std::to_string(values.size()) + " values for keys " +
                "holding " + std::to_string(count));
  }
  if (pull && out.size() != count) {
    throw Error(options_.name + ": pull into " + std::to_string(out.size()) + " values for keys " +
                "holding " + std::to_string(count));
  }
  std::vector<uint64_t> key_list(keys.begin(), keys.end());
  return submit(what, [=, this] {
    const int servers = layout_.servers();
    std::vector<std::optional<Request>> requests(servers);
    std::vector<std::vector<Layout::Piece>> pieces(servers);
    std::vector<std::vector<float>> gathered(servers);
    for (int s = 0; s < servers; ++s) {
      pieces[s] = layout_.pieces(key_list, s);
      // Every shard hears of a push (an ssp clock needs each slot's push, even an empty one); a
      // pull goes where the keys are.
      const bool to_pull = pull && !pieces[s].empty();
      if (!push && !to_pull) continue;
      Request q{.op = Op::kPushPull, .shard = static_cast<uint32_t>(s)};
      q.slot = options_.slot;
      q.clock = o.clock;
      q.lr = o.lr;
      q.push = push;
      q.pull = to_pull;
      q.min_version = o.min_version;
      q.min_clock = o.min_clock;
      q.wait_ms = static_cast<uint32_t>(o.wait.count());
      q.fresh_ms = push && to_pull ? static_cast<uint32_t>(o.fresh.count()) : 0;
      if (s == 0) q.counts = o.counts;  // counted once, on shard 0
      q.counts.epoch = o.counts.epoch;
      for (const auto& p : pieces[s]) q.ranges.push_back(p.range);
      if (push && pieces[s].size() == 1) {
        q.values = values.data() + pieces[s][0].at;
      } else if (push) {
        for (const auto& p : pieces[s]) {
          gathered[s].insert(gathered[s].end(), values.begin() + static_cast<long>(p.at),
                             values.begin() + static_cast<long>(p.at + p.range.count));
        }
        q.values = gathered[s].data();
      }
      requests[s] = std::move(q);
    }
    std::vector<Response> answers =
        exchange(std::move(requests), what, Deadline::after(options_.timeout));
    PullInfo seen{.version = INT64_MAX, .min_clock = INT64_MAX};
    seen.versions.assign(static_cast<size_t>(servers), -1);
    for (int s = 0; s < servers; ++s) {
      if (answers[s].id == 0) continue;
      const Response& r = answers[s];
      seen.version = std::min(seen.version, r.version);
      seen.min_clock = std::min(seen.min_clock, r.min_clock);
      seen.stopped |= r.stopped;
      seen.duplicates += r.duplicate ? 1 : 0;
      seen.held = std::max(seen.held, std::chrono::microseconds(r.held_us));
      seen.reached &= r.reached;
      if (!pull || pieces[s].empty()) continue;
      seen.versions[static_cast<size_t>(s)] = r.version;
      uint64_t want = 0;
      for (const auto& p : pieces[s]) want += p.range.count;
      if (r.body.size() != want * sizeof(float)) {
        throw ProtocolError(options_.name + ": " + describe(static_cast<uint32_t>(s)) +
                            " answered a pull of " + std::to_string(want) + " values with " +
                            std::to_string(r.body.size()) + " bytes");
      }
      const uint8_t* src = r.body.data();
      for (const auto& p : pieces[s]) {
        copy_bytes(out.data() + p.at, src, p.range.count * sizeof(float));
        src += p.range.count * sizeof(float);
      }
    }
    if (info) *info = seen;
  });
}

std::shared_ptr<comm::Work> Client::push(std::span<const uint64_t> keys,
                                         std::span<const float> values,
                                         const PushPullOptions& options, PullInfo* info) {
  return transfer("push", keys, values, {}, true, false, options, info);
}

std::shared_ptr<comm::Work> Client::pull(std::span<const uint64_t> keys, std::span<float> out,
                                         const PushPullOptions& options, PullInfo* info) {
  return transfer("pull", keys, {}, out, false, true, options, info);
}

std::shared_ptr<comm::Work> Client::push_pull(std::span<const uint64_t> keys,
                                              std::span<const float> values, std::span<float> out,
                                              const PushPullOptions& options, PullInfo* info) {
  return transfer("push_pull", keys, values, out, true, true, options, info);
}

std::shared_ptr<comm::Work> Client::init(std::span<const float> params) {
  if (params.size() != layout_.total()) {
    throw Error(options_.name + ": init with " + std::to_string(params.size()) +
                " values for a table of " + std::to_string(layout_.total()));
  }
  std::vector<float> copy(params.begin(), params.end());
  return submit("init", [this, copy = std::move(copy)] {
    std::vector<std::optional<Request>> requests(layout_.servers());
    for (int s = 0; s < layout_.servers(); ++s) {
      const Range& r = layout_.shard(s);
      Request q{.op = Op::kInit, .shard = static_cast<uint32_t>(s), .range = r};
      q.blob.resize(r.count * sizeof(float));
      copy_bytes(q.blob.data(), copy.data() + r.offset, q.blob.size());
      requests[s] = std::move(q);
    }
    exchange(std::move(requests), "init", Deadline::after(options_.timeout));
  });
}

std::shared_ptr<comm::Work> Client::restore(std::vector<std::vector<uint8_t>> states) {
  if (static_cast<int>(states.size()) != layout_.servers()) {
    throw Error(options_.name + ": restore of " + std::to_string(states.size()) +
                " shards, the job has " + std::to_string(layout_.servers()));
  }
  return submit("restore", [this, states = std::move(states)] {
    std::vector<std::optional<Request>> requests(layout_.servers());
    for (int s = 0; s < layout_.servers(); ++s) {
      Request q{.op = Op::kInit, .shard = static_cast<uint32_t>(s), .range = layout_.shard(s)};
      q.saved_state = true;
      q.blob = states[s];
      requests[s] = std::move(q);
    }
    exchange(std::move(requests), "restore", Deadline::after(options_.timeout));
  });
}

std::shared_ptr<comm::Work> Client::control(Control action, uint32_t slot) {
  return submit("control", [this, action, slot] {
    std::vector<std::optional<Request>> requests(layout_.servers());
    for (int s = 0; s < layout_.servers(); ++s) {
      requests[s] = Request{
          .op = Op::kControl, .shard = static_cast<uint32_t>(s), .slot = slot, .action = action};
    }
    exchange(std::move(requests), "control", Deadline::after(options_.timeout));
  });
}

std::shared_ptr<comm::Work> Client::pause(uint32_t slot, std::chrono::milliseconds max_wait) {
  return submit("pause", [this, slot, max_wait] {
    const Deadline until = Deadline::after(max_wait);
    std::vector<uint32_t> known(layout_.servers(), 0);
    for (;;) {
      std::vector<std::optional<Request>> requests(layout_.servers());
      for (int s = 0; s < layout_.servers(); ++s) {
        requests[s] = Request{.op = Op::kControl,
                              .shard = static_cast<uint32_t>(s),
                              .slot = slot,
                              .action = Control::kPause,
                              .known = known[s]};
      }
      std::set<uint32_t> held, active;
      const auto answers =
          exchange(std::move(requests), "pause", Deadline::after(options_.timeout));
      for (size_t s = 0; s < answers.size(); ++s) {
        const PauseState p = decode_pause(answers[s].body);
        held.insert(p.held.begin(), p.held.end());
        active.insert(p.active.begin(), p.active.end());
        known[s] = static_cast<uint32_t>(p.held.size());
      }
      if (std::includes(held.begin(), held.end(), active.begin(), active.end())) return;
      if (until.expired()) {
        const auto missing = std::count_if(active.begin(), active.end(),
                                           [&](uint32_t a) { return held.count(a) == 0; });
        spdlog::warn(
            "{}: evaluating while {} of {} other workers still train (they did not wait "
            "within {} ms)",
            options_.name, missing, active.size(), max_wait.count());
        return;
      }
    }
  });
}

std::shared_ptr<comm::Work> Client::resume(uint32_t slot) {
  return control(Control::kResume, slot);
}

std::vector<ShardStatus> Client::status() {
  std::vector<ShardStatus> out;
  submit("status", [this, &out] {
    std::vector<std::optional<Request>> requests(layout_.servers());
    for (int s = 0; s < layout_.servers(); ++s) {
      requests[s] = Request{.op = Op::kStatus, .shard = static_cast<uint32_t>(s)};
    }
    for (const Response& r :
         exchange(std::move(requests), "status", Deadline::after(options_.timeout))) {
      out.push_back(decode_status(r.body));
    }
  })->wait();
  return out;
}

std::vector<std::vector<uint8_t>> Client::snapshot() {
  std::vector<std::vector<uint8_t>> out;
  submit("snapshot", [this, &out] {
    std::vector<std::optional<Request>> requests(layout_.servers());
    for (int s = 0; s < layout_.servers(); ++s) {
      requests[s] = Request{.op = Op::kSnapshot, .shard = static_cast<uint32_t>(s)};
    }
    // A shard's whole state: its parameters, the optimizer's state and the pushes that wait.
    for (Response& r : exchange(std::move(requests), "snapshot", Deadline::after(options_.timeout),
                                kMaxStateBytes)) {
      out.push_back(std::move(r.body));
    }
  })->wait();
  return out;
}

int64_t Client::view_number() {
  int64_t n = 0;
  submit("view", [this, &n] { n = view_.number; })->wait();
  return n;
}

}  // namespace cohort::ps
