#include "cohort/ps/server.h"

#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/net/handshake.h"
#include "cohort/ps/server_impl.h"
#include "cohort/store/connect.h"

using nlohmann::json;

namespace cohort::ps {
namespace {

// How soon a link to a backup that could not be made is tried again.
constexpr Millis kLinkRetry{200};
// How soon the store thread writes what the loop thread noted (a shard copied here).
constexpr Millis kNotesEvery{50};

std::string advertised(const ServerOptions& o) {
  if (!o.advertise_host.empty()) return o.advertise_host;
  if (o.bind_host.empty() || o.bind_host == "0.0.0.0" || o.bind_host == "::") {
    return net::local_address_towards(store::store_host(o.store));
  }
  return o.bind_host;
}

std::unique_ptr<store::Store> connect_store(const ServerOptions& o, Millis timeout) {
  return store::connect(o.store,
                        {.token = o.token, .timeout = Millis(30000), .reconnect_timeout = timeout});
}

}  // namespace

std::string ServerSettings::to_json() const {
  return json{{"servers", servers},
              {"slots", shard.slots},
              {"consistency", shard.consistency == Consistency::Async ? "async" : "ssp"},
              {"optimizer",
               {{"name", optimizer_name(shard.optimizer.kind)},
                {"momentum", shard.optimizer.momentum},
                {"nesterov", shard.optimizer.nesterov},
                {"weight_decay", shard.optimizer.weight_decay},
                {"beta1", shard.optimizer.beta1},
                {"beta2", shard.optimizer.beta2},
                {"eps", shard.optimizer.eps}}},
              {"correction", static_cast<int>(shard.correction)},
              {"dc_lambda", shard.dc_lambda},
              {"heartbeat_ms", heartbeat.count()},
              {"failure_timeout_ms", failure_timeout.count()},
              {"max_message_bytes", max_message_bytes}}
      .dump();
}

ServerSettings ServerSettings::parse(const std::string& text) {
  try {
    json j = json::parse(text);
    ServerSettings s;
    s.servers = j.at("servers").get<int>();
    s.shard.slots = j.at("slots").get<int>();
    s.shard.consistency =
        j.at("consistency").get<std::string>() == "async" ? Consistency::Async : Consistency::Ssp;
    const json& o = j.at("optimizer");
    s.shard.optimizer.kind =
        o.at("name").get<std::string>() == "adam" ? OptimizerKind::Adam : OptimizerKind::Sgd;
    s.shard.optimizer.momentum = o.at("momentum").get<double>();
    s.shard.optimizer.nesterov = o.at("nesterov").get<bool>();
    s.shard.optimizer.weight_decay = o.at("weight_decay").get<double>();
    s.shard.optimizer.beta1 = o.at("beta1").get<double>();
    s.shard.optimizer.beta2 = o.at("beta2").get<double>();
    s.shard.optimizer.eps = o.at("eps").get<double>();
    const int c = j.at("correction").get<int>();
    if (c < 0 || c > 2) throw ProtocolError("unknown staleness correction");
    s.shard.correction = static_cast<Correction>(c);
    s.shard.dc_lambda = j.at("dc_lambda").get<double>();
    s.heartbeat = Millis(j.at("heartbeat_ms").get<int64_t>());
    s.failure_timeout = Millis(j.at("failure_timeout_ms").get<int64_t>());
    s.max_message_bytes = j.at("max_message_bytes").get<size_t>();
    if (s.servers < 1 || s.shard.slots < 1 || s.heartbeat.count() <= 0) {
      throw ProtocolError("parameter-server settings out of range");
    }
    return s;
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("malformed parameter-server settings: ") + e.what());
  }
}

std::string server_info(int index, uint64_t incarnation) {
  return "ps-server " + std::to_string(index) + " " + std::to_string(incarnation);
}

std::optional<std::pair<int, uint64_t>> parse_server_info(const std::string& info) {
  int index = -1;
  unsigned long long inc = 0;
  if (std::sscanf(info.c_str(), "ps-server %d %llu", &index, &inc) != 2 || index < 0) {
    return std::nullopt;
  }
  return std::pair<int, uint64_t>{index, inc};
}

Server::Impl::Impl(const ServerOptions& options)
    : options_(options),
      store_(connect_store(options, Millis(1000))),
      settings_(ServerSettings::parse(store::to_string(store_->get(keys::kSettings)))),
      incarnation_(static_cast<uint64_t>(store_->add(keys::kIncarnation, 1))),
      info_(server_info(options.index, incarnation_)),
      server_({.name = "parameter server " + std::to_string(options.index),
               .bind_host = options.bind_host,
               .port = options.port,
               .token = options.token,
               .info = info_,
               .max_frame_bytes = settings_.max_message_bytes},
              *this) {
  if (options.index < 0 || options.index >= settings_.servers) {
    throw ConfigError("parameter server index " + std::to_string(options.index) + ": the job has " +
                      std::to_string(settings_.servers) + " servers");
  }
  server_.start();
  const std::string address = net::Endpoint{advertised(options), server_.endpoint().port}.str();
  // Heartbeat first: the launcher counts from the registration on.
  store_->add(keys::heartbeat(incarnation_), 1);
  store_->set(keys::registration(options.index),
              store::to_bytes(json{{"incarnation", incarnation_}, {"address", address}}.dump()));
  spdlog::info("{}: incarnation {}, registered at {}", name(), incarnation_, address);
  store_thread_ = std::thread([this] { store_loop(); });
}

Server::Impl::~Impl() {
  stop();
  join_connectors(true);
}

void Server::Impl::join_connectors(bool all) {
  std::lock_guard lk(connectors_mu_);
  std::erase_if(connectors_, [all](Connector& c) {
    if (!all && !c.done->load()) return false;
    c.thread.join();
    return true;
  });
}

std::string Server::Impl::name() const {
  return "parameter server " + std::to_string(options_.index) + " (incarnation " +
         std::to_string(incarnation_) + ")";
}

void Server::Impl::stop() {
  stopping_ = true;
  {
    std::lock_guard lk(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (store_thread_.joinable()) store_thread_.join();
  server_.stop();
}

std::string Server::Impl::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  return fenced_;
}

void Server::Impl::fence(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (done_) return;
    fenced_ = why;
    done_ = true;
  }
  fenced_flag_ = true;  // from now on every request is refused
  spdlog::error("{}: stopping: {}", name(), why);
  cv_.notify_all();
}

// Heartbeats, new views and synced notes, on a connection of its own. Cut off from the store for
// the failure timeout, the server fences itself: the launcher has declared it lost by then.
void Server::Impl::store_loop() {
  int64_t seen = 0;
  auto last_ok = Clock::now();
  auto next_beat = Clock::now();
  while (!stopping_) {
    try {
      const auto now = Clock::now();
      if (now >= next_beat) {
        store_->add(keys::heartbeat(incarnation_), 1);
        next_beat = now + settings_.heartbeat;
      }
      std::vector<std::string> notes;
      {
        std::lock_guard lk(mu_);
        notes.swap(synced_notes_);
      }
      for (const auto& key : notes) store_->set(key, store::to_bytes("1"));
      if (store_->check({keys::kStop})) {
        spdlog::info("{}: the job is over", name());
        std::lock_guard lk(mu_);
        done_ = true;
        cv_.notify_all();
        return;
      }
      // Not longer than kNotesEvery either: a shard copied here counts (for promotion, for a
      // hand-back) only once its note is in the store.
      const auto wait =
          std::min(std::chrono::duration_cast<Millis>(next_beat - Clock::now()), kNotesEvery);
      if (auto v = wait_for_view(*store_, seen, std::max(wait, Millis(1)))) {
        seen = v->number;
        server_.post([this, view = *v] { adopt_view(view); });
      }
      last_ok = Clock::now();
    } catch (const Error& e) {
      if (Clock::now() - last_ok > settings_.failure_timeout) {
        fence("cut off from the job's store for " +
              std::to_string(settings_.failure_timeout.count()) + " ms: " + e.what());
        return;
      }
      std::this_thread::sleep_for(Millis(50));
    }
  }
}

bool Server::Impl::is_primary(uint32_t shard) const {
  return in_view_ && shard < view_.shards.size() && view_.shards[shard].primary == options_.index;
}

void Server::Impl::adopt_view(const View& v) {
  if (v.number <= view_.number) return;
  if (static_cast<size_t>(options_.index) >= v.servers.size()) {
    fence("parameter-server view " + std::to_string(v.number) + " has no server " +
          std::to_string(options_.index));
    return;
  }
  const ServerEntry& me = v.servers[options_.index];
  if (me.incarnation > incarnation_ || (me.incarnation == incarnation_ && !me.up)) {
    // Declared lost (or replaced): whatever this process still holds is no longer the job's.
    fence("left out of parameter-server view " + std::to_string(v.number));
    return;
  }
  const View old = view_;
  const bool was_in = in_view_;
  view_ = v;
  // A replacement reads the views before its own: it has no role until one names it.
  in_view_ = me.incarnation == incarnation_;
  if (!in_view_) return;
  spdlog::info("{}: view {}", name(), v.number);
  for (uint32_t s = 0; s < v.shards.size(); ++s) {
    Held& h = shards_[s];
    const bool was_primary =
        was_in && s < old.shards.size() && old.shards[s].primary == options_.index;
    if (is_primary(s) && !was_primary) {
      // Promoted: the requests that waited here as a backup's copies have no one to answer;
      // their workers send them again.
      h.waiting.clear();
      spdlog::info("{}: now primary of shard {}", name(), s);
    }
    if (was_primary && !is_primary(s)) step_down(s, h);
    if (is_primary(s)) configure_backup(s, h);
  }
  // Replication that came from this view before it did.
  std::deque<std::pair<ConnId, Request>> deferred;
  deferred.swap(deferred_);
  for (auto& [conn, q] : deferred) {
    try {
      handle_replica(conn, q);
    } catch (const std::exception& e) {
      server_.close(conn, e.what(), true);
    }
  }
}

// No longer the shard's primary (it was handed back): the workers whose requests wait here ask
// the new primary, which has every change this server had acknowledged; nothing more goes to
// the old backup.
void Server::Impl::step_down(uint32_t shard, Held& h) {
  const size_t sent_on =
      send_elsewhere(h, name() + " no longer serves shard " + std::to_string(shard) + " in view " +
                            std::to_string(view_.number));
  h.forwards.clear();
  h.backup = -1;
  h.backup_incarnation = 0;
  h.backup_synced = false;
  spdlog::info("{}: now backup of shard {} ({} waiting requests sent on to its new primary)",
               name(), shard, sent_on);
  if (pause_) check_pause();
}

// Answers every worker's request that waits on the shard "not the primary" (its worker asks the
// primary of the newest view) and drops the waiting; returns how many were answered.
size_t Server::Impl::send_elsewhere(Held& h, const std::string& why) {
  size_t n = 0;
  for (Waiting& w : h.waiting) {
    if (w.conn == 0) continue;
    ++n;
    Response r = w.response;
    r.status = Status::kNotPrimary;
    r.view = view_.number;
    r.message = why;
    r.body.clear();
    answer(w.conn, r);
  }
  h.waiting.clear();
  return n;
}

// The backup the shard forwards to, as the view says.
void Server::Impl::configure_backup(uint32_t shard, Held& h) {
  const int b = view_.shards[shard].backup;
  const uint64_t inc = b >= 0 ? view_.servers[b].incarnation : 0;
  if (b == h.backup && inc == h.backup_incarnation) return;
  h.backup = b;
  h.backup_incarnation = inc;
  h.backup_synced = false;
  h.forwards.clear();
  h.acked_upto = next_fwd_ - 1;  // nothing waits for a backup that is gone
  resolve(h);
  if (b < 0) return;
  Link& l = links_[b];
  if (l.incarnation != inc) {
    if (l.conn) server_.close(*l.conn, "", false);
    l = Link{.incarnation = inc};
  }
  if (l.conn) {
    link_up(b, *l.conn);
  } else if (!l.connecting) {
    connect_link(b);
  }
}

void Server::Impl::connect_link(int server) {
  Link& l = links_[server];
  l.connecting = true;
  l.retry_at = Deadline::never();
  const std::string address = view_.servers[server].address;
  const std::string expect = server_info(server, l.incarnation);
  // Short: a stopping server joins its connectors; a link not made is tried again soon.
  const Deadline deadline =
      Deadline::after(std::min<Millis>(settings_.failure_timeout, Millis(2000)));
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard lk(connectors_mu_);
  connectors_.push_back(
      {std::thread([this, address, expect, deadline, server, done] {
         struct Done {
           std::atomic<bool>& d;
           ~Done() { d = true; }
         } mark{*done};
         try {
           net::Socket sock = net::Socket::connect(net::Endpoint::parse(address), deadline);
           sock.set_nodelay(true);
           const std::string peer = net::handshake_as_client(sock, options_.token, info_, deadline);
           if (peer != expect) throw Error(address + " is " + peer + ", not " + expect);
           server_.adopt(std::move(sock), peer);
         } catch (const std::exception& e) {
           const std::string why = e.what();
           server_.post([this, server, why] {
             spdlog::warn("{}: no link to backup server {}: {}", name(), server, why);
             Link& l = links_[server];
             l.connecting = false;
             l.retry_at = Deadline::after(kLinkRetry);
           });
         }
       }),
       done});
}

void Server::Impl::on_ready(ConnId conn, const std::string& peer_info, bool adopted) {
  peers_[conn] = peer_info;
  auto id = parse_server_info(peer_info);
  // A link this server opened to a backup. (A connection a primary opened to this one is served
  // as requests, even when this server is connecting to that primary at the same moment.)
  if (!id || !adopted) return;
  auto it = links_.find(id->first);
  if (it == links_.end() || !it->second.connecting || it->second.incarnation != id->second) return;
  it->second.connecting = false;
  it->second.conn = conn;
  link_conns_[conn] = id->first;
  link_up(id->first, conn);
}

// The link to `server` is up: every shard it backs gets the whole shard first, then the changes.
void Server::Impl::link_up(int server, ConnId conn) {
  (void)conn;
  for (auto& [s, h] : shards_) {
    if (h.backup != server || !is_primary(s)) continue;
    if (!h.backup_synced) {
      // An empty blob: the shard has no state yet (nobody initialised it), nor should the backup.
      Request sync{.op = Op::kSync, .shard = s, .view = view_.number};
      if (h.shard) sync.blob = h.shard->save();
      sync.id = next_fwd_++;
      // The sync stands for every change before it: those not yet sent need not be.
      std::erase_if(h.forwards, [](const Forward& f) { return !f.sent; });
      h.forwards.push_back({sync.id, encode_request(sync), false, true});
      h.backup_synced = true;
    }
    send_forwards(s, h);
  }
}

void Server::Impl::link_down(int server) {
  Link& l = links_[server];
  l.conn.reset();
  l.connecting = false;
  l.retry_at = Deadline::after(kLinkRetry);
  // What the backup got is unknown now: it gets the whole shard again when the link is back.
  for (auto& [s, h] : shards_) {
    if (h.backup != server) continue;
    h.backup_synced = false;
    for (Forward& f : h.forwards) f.sent = false;
  }
}

void Server::Impl::send_forwards(uint32_t shard, Held& h) {
  if (h.backup < 0) return;
  Link& l = links_[h.backup];
  if (!l.conn || !h.backup_synced) return;
  (void)shard;
  for (Forward& f : h.forwards) {
    if (f.sent) continue;
    server_.send(*l.conn, net::MsgType::kPsRequest, f.payload);
    f.sent = true;
  }
}

uint64_t Server::Impl::forward(uint32_t shard, Held& h, const std::vector<uint8_t>& payload) {
  if (h.backup < 0) return 0;
  Request rep{.op = Op::kReplicate, .shard = shard, .view = view_.number};
  rep.from_server = static_cast<uint32_t>(options_.index);
  rep.blob = payload;
  rep.id = next_fwd_++;
  h.forwards.push_back({rep.id, encode_request(rep), false, false});
  send_forwards(shard, h);
  return rep.id;
}

void Server::Impl::on_forward_ack(ConnId conn, const Response& r) {
  const int server = link_conns_.at(conn);
  // The acknowledgement's id is the forward's; its shard is the one whose forwards hold it.
  for (auto& [s, h] : shards_) {
    if (h.backup != server || h.forwards.empty() || h.forwards.front().id > r.id) continue;
    if (r.status != Status::kOk) {
      // The backup follows a newer view in which this server is not the primary: stop
      // answering for the shard until that view arrives here.
      spdlog::warn("{}: backup server {} refused shard {}: {}", name(), server, s, r.message);
      send_elsewhere(h, "the backup follows a newer view");
      return;
    }
    while (!h.forwards.empty() && h.forwards.front().id <= r.id) h.forwards.pop_front();
    h.acked_upto = std::max(h.acked_upto, r.id);
    resolve(h);
    return;
  }
}

void Server::Impl::on_closed(ConnId conn) {
  peers_.erase(conn);
  auto it = link_conns_.find(conn);
  if (it != link_conns_.end()) {
    const int server = it->second;
    link_conns_.erase(it);
    spdlog::warn("{}: link to backup server {} lost", name(), server);
    link_down(server);
    return;
  }
  std::erase_if(deferred_, [conn](const auto& d) { return d.first == conn; });
  // A worker that left: what it waited for is not answered, nor does its pause hold any more.
  if (pause_ && pause_->conns.count(conn)) end_pause();
  for (auto& [s, h] : shards_) {
    for (Waiting& w : h.waiting) {
      if (w.conn == conn) w.conn = 0;
    }
  }
}

Deadline Server::Impl::next_deadline() {
  Deadline d = Deadline::never();
  for (const auto& [s, l] : links_) d = d.earlier(l.retry_at);
  if (pause_) {
    for (const auto& a : pause_->asks) d = d.earlier(a.answer_by);
  }
  for (const auto& [s, h] : shards_) {
    for (const Waiting& w : h.waiting) {
      // A held answer's deadline is its next notice (kHeld). Otherwise only a read still to be
      // made has one: a request that has read and waits for its backup or for a pause to end
      // is answered by those (an expired answer_by of its would make the loop spin, starving
      // the evaluating worker the pause waits for).
      if (pause_ && w.held_since && w.conn != 0) d = d.earlier(w.notice_by);
      if (!w.pull || w.pulled) continue;
      d = d.earlier(w.answer_by);
      if (!w.fresh_by.expired()) d = d.earlier(w.fresh_by);
    }
  }
  return d;
}

void Server::Impl::on_tick() {
  join_connectors(false);
  check_pause();
  for (auto& [s, h] : shards_) {
    for (Waiting& w : h.waiting) {
      if (w.held_since && w.conn != 0 && pause_ && w.notice_by.expired()) notice_held(w);
    }
    const bool due = std::any_of(h.waiting.begin(), h.waiting.end(), [](const Waiting& w) {
      return w.pull && !w.pulled &&
             (w.answer_by.expired() || (w.fresh_version > 0 && w.fresh_by.expired()));
    });
    if (due) resolve(h);
  }
  for (auto& [server, l] : links_) {
    if (l.conn || l.connecting || !l.retry_at.expired()) continue;
    bool needed = false;
    for (auto& [s, h] : shards_) needed |= h.backup == server && is_primary(s);
    if (needed) {
      connect_link(server);
    } else {
      l.retry_at = Deadline::never();
    }
  }
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}
Server::~Server() = default;
std::string Server::wait() {
  return impl_->wait();
}
void Server::stop() {
  impl_->stop();
}
net::Endpoint Server::endpoint() const {
  return impl_->endpoint();
}
uint64_t Server::incarnation() const {
  return impl_->incarnation();
}

}  // namespace cohort::ps
