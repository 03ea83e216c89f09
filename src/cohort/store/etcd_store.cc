// EtcdStore: calls on etcd's JSON gateway (/v3/kv/range, put, txn, deleterange, /v3/watch).
// Keys and values travel base64-encoded; 64-bit integers (revisions) as decimal strings.
#include "cohort/store/etcd_store.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>

#include "cohort/base/base64.h"
#include "cohort/base/error.h"
#include "cohort/base/secret.h"
#include "cohort/store/memory_store.h"

namespace cohort::store {
namespace {

using nlohmann::json;

// One call, or one watch, waits on a member no longer than this before trying again (a member
// whose machine died leaves a connection that never answers).
constexpr Millis kCallBound{5000};
// A call whose deadline has (nearly) passed still gets this long: wait(keys, 0) looks once.
constexpr Millis kCallAtLeast{1000};
constexpr Millis kWatchBound{10000};
// etcd's default --max-request-bytes: a larger request is cut off with the connection, which
// would look like a member that does not answer.
constexpr size_t kMaxRequestBytes = 3u << 19;

std::string b64(const std::string& s) {
  return base64_encode(s);
}
std::string b64(const Bytes& b) {
  return base64_encode(std::string(b.begin(), b.end()));
}

Bytes unb64(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) return {};  // proto3's JSON leaves empty values out
  if (!j.is_object() || !j.at(field).is_string())
    throw ProtocolError(std::string("etcd answered a field '") + field + "' that is not text");
  return to_bytes(base64_decode(j.at(field).get<std::string>()));
}

int64_t int_field(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) return 0;
  const json& v = j.at(field);
  try {
    if (v.is_number_integer()) return v.get<int64_t>();
    size_t used = 0;
    const std::string text = v.get<std::string>();
    const int64_t n = std::stoll(text, &used);
    if (used == text.size()) return n;
  } catch (const std::exception&) {
  }
  throw ProtocolError(std::string("etcd answered a field '") + field + "' that is not an integer");
}

// A key as the range of one call returned it.
struct Kv {
  Bytes value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

std::optional<Kv> first_kv(const json& range_response) {
  const json kvs = range_response.value("kvs", json::array());
  if (!kvs.is_array() || kvs.empty()) return std::nullopt;
  const json& kv = kvs[0];
  return Kv{unb64(kv, "value"), int_field(kv, "mod_revision"), int_field(kv, "lease")};
}

std::string remaining_text(Millis t) {
  return std::to_string(t.count()) + " ms";
}

}  // namespace

EtcdAddress EtcdAddress::parse(const std::string& url) {
  if (!is_etcd_url(url))
    throw ConfigError("bad etcd address '" + url +
                      "': expected etcd://HOST:PORT[,HOST:PORT]/PREFIX");
  // Host names, addresses, ports and a key prefix: nothing else belongs in one.
  for (const char c : url) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("._-:/,[]").find(c) == std::string_view::npos) {
      char shown[8];
      std::snprintf(shown, sizeof(shown), "0x%02x", static_cast<unsigned char>(c));
      throw ConfigError("bad etcd address: character " + std::string(shown) +
                        " is not allowed (letters, digits and ._-:/,[] only)");
    }
  }
  const std::string rest = url.substr(7);
  const size_t slash = rest.find('/');
  EtcdAddress a;
  a.prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!a.prefix.empty() && a.prefix.back() == '/') a.prefix.pop_back();
  if (a.prefix.empty())
    throw ConfigError("etcd address '" + url +
                      "' names no prefix: etcd://HOST:PORT/PREFIX keeps "
                      "one job's keys apart from another's");
  std::string hosts = rest.substr(0, slash);
  for (size_t start = 0; start <= hosts.size();) {
    size_t comma = hosts.find(',', start);
    if (comma == std::string::npos) comma = hosts.size();
    const std::string one = hosts.substr(start, comma - start);
    if (one.empty()) throw ConfigError("etcd address '" + url + "' has an empty member");
    a.members.push_back(net::Endpoint::parse(one));
    start = comma + 1;
  }
  return a;
}

std::string EtcdAddress::str() const {
  std::string s = "etcd://";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) s += ',';
    s += members[i].str();
  }
  return s + "/" + prefix;
}

// The HTTP side: one keep-alive connection to the member in use; on a failure, the next member.
class EtcdStore::Gateway {
 public:
  explicit Gateway(std::vector<net::Endpoint> members) : members_(std::move(members)) {}

  // POSTs body to path; returns the response's JSON. Members that cannot be reached, or that
  // answer that they have no leader, are passed over until the deadline.
  json call(const std::string& path, const json& body, Deadline deadline) {
    const std::string text = body.dump();
    if (text.size() > kMaxRequestBytes)
      throw Error("etcd request " + path + " of " + std::to_string(text.size()) +
                  " bytes is over etcd's default limit of 1.5 MiB (--max-request-bytes)");
    std::string last_error = "no member tried";
    for (Millis backoff{5};; backoff = std::min(backoff * 2, Millis(500))) {
      httplib::Client& c = client(std::clamp(deadline.remaining(), kCallAtLeast, kCallBound));
      auto res = c.Post(path.c_str(), text, "application/json");
      // A stream (keep-alive) answers one JSON object per line: the first is the answer.
      if (res && res->status == 200) {
        json answer = json::parse(res->body.substr(0, res->body.find('\n')), nullptr, false);
        if (answer.is_object()) return answer;
        throw ProtocolError("etcd member " + member().str() + " answered " + path +
                            " with something that is not a JSON object");
      }
      if (res) {
        const std::string message = error_message(res->body);
        if (!retryable(res->status, message))
          throw Error("etcd member " + member().str() + " refused " + path + ": " + message);
        last_error = message;
      } else {
        last_error = httplib::to_string(res.error());
      }
      give_up_member(last_error);
      if (deadline.remaining() <= backoff) break;
      std::this_thread::sleep_for(backoff);  // back-off between tries, not synchronisation
    }
    throw TimeoutError("no etcd member of " + members_text() + " answered " + path +
                       " in time; last error: " + last_error);
  }

  // Watches `key` from `revision` until a put of it arrives (its value) or the watch ends without
  // one (nullopt: the caller looks again). Bounded by the deadline and kWatchBound.
  std::optional<Bytes> watch(const std::string& key, int64_t revision, Deadline deadline) {
    const Millis bound = std::min(deadline.remaining(), kWatchBound);
    httplib::Client& c = client(bound);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.set_header("Content-Type", "application/json");
    req.body =
        json{{"create_request", {{"key", b64(key)}, {"start_revision", std::to_string(revision)}}}}
            .dump();
    std::string pending;
    std::optional<Bytes> value;
    std::exception_ptr failed;  // thrown in the receiver: rethrown once httplib is done
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      try {
        pending.append(data, n);
        for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
          const json message = json::parse(pending.substr(0, eol), nullptr, false);
          pending.erase(0, eol + 1);
          if (message.is_discarded() || !message.contains("result")) continue;
          const json& result = message["result"];
          const json events = result.is_object() ? result.value("events", json::array()) : json();
          for (const json& ev : events.is_array() ? events : json::array()) {
            if (ev.is_object() && ev.value("type", "PUT") == "PUT" && ev.contains("kv"))
              value = unb64(ev["kv"], "value");
          }
          if (value) return false;  // ends the stream
        }
        return true;
      } catch (...) {
        failed = std::current_exception();
        return false;
      }
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = c.send(req, res, err);
    if (failed) {
      client_.reset();  // the stream was left half read
      std::rethrow_exception(failed);
    }
    if (!sent && !value && err != httplib::Error::Read) give_up_member(httplib::to_string(err));
    if (sent && res.status != 200 && !value) {
      // A member that refuses watches: another, after a pause rather than at once again.
      give_up_member("watch answered " + std::to_string(res.status));
      std::this_thread::sleep_for(std::min(deadline.remaining(), Millis(100)));
    }
    return value;
  }

  std::string members_text() const {
    std::string s;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (i) s += ',';
      s += members_[i].str();
    }
    return s;
  }

 private:
  const net::Endpoint& member() const { return members_[current_]; }

  httplib::Client& client(Millis bound) {
    if (!client_) {
      client_ = std::make_unique<httplib::Client>(member().host, member().port);
      client_->set_keep_alive(true);
      client_->set_tcp_nodelay(true);  // headers and body go in two writes: no Nagle delay
    }
    const Millis t = std::max(bound, Millis(1));
    client_->set_connection_timeout(std::min(t, Millis(2000)));
    client_->set_read_timeout(t);
    client_->set_write_timeout(t);
    return *client_;
  }

  void give_up_member(const std::string&) {
    client_.reset();
    current_ = (current_ + 1) % members_.size();
  }

  static std::string error_message(const std::string& body) {
    const json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("message") && j["message"].is_string())
      return j["message"].get<std::string>();
    return body.substr(0, 200);
  }

  // etcd's answers while it elects a leader or loses quorum: another member may do better.
  static bool retryable(int status, const std::string& message) {
    return status >= 500 || message.find("leader") != std::string::npos ||
           message.find("timed out") != std::string::npos;
  }

  std::vector<net::Endpoint> members_;
  size_t current_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

EtcdStore::EtcdStore(EtcdAddress address, Millis timeout)
    : address_(std::move(address)),
      adds_key_(full_key(".cohort-adds/" + random_token())),
      gateway_(std::make_unique<Gateway>(address_.members)) {
  timeout_ = timeout;
  std::lock_guard lk(mu_);
  gateway_->call("/v3/kv/range", {{"key", b64(full_key(""))}}, Deadline::after(timeout));
}

EtcdStore::~EtcdStore() = default;

std::string EtcdStore::full_key(const std::string& key) const {
  return "/cohort/" + address_.prefix + "/" + key;
}

void EtcdStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard lk(mu_);
  const json put = {{"key", b64(full_key(key))}, {"value", b64(value)}};
  if (!fence_) {
    gateway_->call("/v3/kv/put", put, Deadline::after(timeout_));
    return;
  }
  fenced_txn({{"request_put", put}}, Deadline::after(timeout_));
}

void EtcdStore::fence(const std::string& key, int64_t lease) {
  std::lock_guard lk(mu_);
  fence_ = Fence{full_key(key), lease};
}

json EtcdStore::fenced_txn(const json& operation, Deadline deadline) {
  const json txn = {{"compare", json::array({fence_compare()})},
                    {"success", json::array({operation})}};
  const json r = gateway_->call("/v3/kv/txn", txn, deadline);
  if (!r.value("succeeded", false)) throw_fenced();
  const json responses = r.value("responses", json::array());
  return responses.is_array() && !responses.empty() ? responses[0] : json::object();
}

json EtcdStore::fence_compare() const {
  return {{"key", b64(fence_->key)},
          {"target", "LEASE"},
          {"result", "EQUAL"},
          {"lease", std::to_string(fence_->lease)}};
}

void EtcdStore::throw_fenced() const {
  throw FencedError("etcd " + gateway_->members_text() + " refused a write: " + fence_->key +
                    " is no longer held by lease " + std::to_string(fence_->lease) +
                    " (another process leads the job now)");
}

Bytes EtcdStore::wait_for(const std::string& key, Deadline deadline) {
  const std::string k = full_key(key);
  while (true) {
    json r;
    try {
      r = gateway_->call("/v3/kv/range", {{"key", b64(k)}}, deadline);
    } catch (const TimeoutError& e) {
      throw TimeoutError("store get of key '" + key + "': " + e.what());
    }
    if (auto kv = first_kv(r)) return kv->value;
    if (deadline.expired()) break;
    const int64_t revision = int_field(r.value("header", json::object()), "revision");
    if (auto v = gateway_->watch(k, revision + 1, deadline)) return *v;
    if (deadline.expired()) break;
  }
  throw TimeoutError("store get of key '" + key + "' timed out after " + remaining_text(timeout_) +
                     " (etcd " + gateway_->members_text() + ")");
}

Bytes EtcdStore::get(const std::string& key) {
  std::lock_guard lk(mu_);
  return wait_for(key, Deadline::after(timeout_));
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  std::lock_guard lk(mu_);
  const std::string k = full_key(key);
  const Deadline deadline = Deadline::after(timeout_);
  while (true) {
    const auto kv = first_kv(gateway_->call("/v3/kv/range", {{"key", b64(k)}}, deadline));
    const int64_t v = (kv ? counter_value(key, kv->value) : 0) + delta;
    // Reading a counter (a coordinator does, for every heartbeat, many times a second) writes
    // nothing: each write is a revision etcd keeps until compaction.
    if (delta == 0 && kv) return v;
    // Written only if nobody wrote the key since it was read; otherwise read again.
    const std::string mark = std::to_string(++adds_);
    if (put_if_unchanged(k, kv ? kv->mod_revision : 0, to_bytes(std::to_string(v)), deadline,
                         mark)) {
      return v;
    }
    // Not applied now, but perhaps by an earlier try of this very transaction whose answer was
    // lost (the gateway sent it again): then the mark is there.
    const auto applied =
        first_kv(gateway_->call("/v3/kv/range", {{"key", b64(adds_key_)}}, deadline));
    if (applied && applied->value == to_bytes(mark)) return v;
  }
}

Bytes EtcdStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard lk(mu_);
  const std::string k = full_key(key);
  const Deadline deadline = Deadline::after(timeout_);
  // Compared here, then written only if nobody wrote the key since it was read (etcd's own value
  // compare would send both values in one request, and cannot compare an absent key's value).
  while (true) {
    const auto kv = first_kv(gateway_->call("/v3/kv/range", {{"key", b64(k)}}, deadline));
    const bool match = expected.empty() ? !kv || kv->value.empty() : kv && kv->value == expected;
    if (!match) return kv ? kv->value : Bytes{};
    if (put_if_unchanged(k, kv ? kv->mod_revision : 0, desired, deadline)) return desired;
  }
}

bool EtcdStore::put_if_unchanged(const std::string& full, int64_t mod_revision, const Bytes& value,
                                 Deadline deadline, const std::string& mark) {
  const json compare = mod_revision ? json{{"key", b64(full)},
                                           {"target", "MOD"},
                                           {"result", "EQUAL"},
                                           {"mod_revision", std::to_string(mod_revision)}}
                                    : json{{"key", b64(full)},
                                           {"target", "CREATE"},
                                           {"result", "EQUAL"},
                                           {"create_revision", "0"}};
  json compares = json::array({compare});
  if (fence_) compares.push_back(fence_compare());
  json puts = json::array({{{"request_put", {{"key", b64(full)}, {"value", b64(value)}}}}});
  if (!mark.empty()) {
    puts.push_back({{"request_put", {{"key", b64(adds_key_)}, {"value", b64(to_bytes(mark))}}}});
  }
  const json txn = {{"compare", compares}, {"success", puts}};
  if (gateway_->call("/v3/kv/txn", txn, deadline).value("succeeded", false)) return true;
  if (fence_) {
    // Which compare failed: the key's (read again) or the fence's (this writer is done).
    const auto holder =
        first_kv(gateway_->call("/v3/kv/range", {{"key", b64(fence_->key)}}, deadline));
    if (!holder || holder->lease != fence_->lease) throw_fenced();
  }
  return false;
}

bool EtcdStore::delete_key(const std::string& key) {
  std::lock_guard lk(mu_);
  const json del = {{"key", b64(full_key(key))}};
  const Deadline deadline = Deadline::after(timeout_);
  if (!fence_) return int_field(gateway_->call("/v3/kv/deleterange", del, deadline), "deleted") > 0;
  return int_field(fenced_txn({{"request_delete_range", del}}, deadline)
                       .value("response_delete_range", json::object()),
                   "deleted") > 0;
}

int64_t EtcdStore::grant_lease(Millis ttl) {
  std::lock_guard lk(mu_);
  const int64_t seconds = std::max<int64_t>(1, (ttl.count() + 999) / 1000);
  const json r = gateway_->call("/v3/lease/grant", {{"TTL", std::to_string(seconds)}},
                                Deadline::after(timeout_));
  return int_field(r, "ID");
}

bool EtcdStore::keep_alive(int64_t lease) {
  std::lock_guard lk(mu_);
  // One request on etcd's keep-alive stream: one answer, whose TTL is 0 once the lease is gone.
  const json r = gateway_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}},
                                Deadline::after(timeout_));
  return int_field(r.value("result", json::object()), "TTL") > 0;
}

void EtcdStore::revoke_lease(int64_t lease) {
  std::lock_guard lk(mu_);
  gateway_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}, Deadline::after(timeout_));
}

bool EtcdStore::create_with_lease(const std::string& key, const Bytes& value, int64_t lease) {
  std::lock_guard lk(mu_);
  const std::string k = full_key(key);
  const json txn = {
      {"compare", json::array({{{"key", b64(k)},
                                {"target", "CREATE"},
                                {"result", "EQUAL"},
                                {"create_revision", "0"}}})},
      {"success",
       json::array(
           {{{"request_put",
              {{"key", b64(k)}, {"value", b64(value)}, {"lease", std::to_string(lease)}}}}})}};
  const Deadline deadline = Deadline::after(timeout_);
  if (gateway_->call("/v3/kv/txn", txn, deadline).value("succeeded", false)) return true;
  // A transaction sent again to another member after the first applied it fails its compare:
  // the key under this lease is a success all the same.
  const auto kv = first_kv(gateway_->call("/v3/kv/range", {{"key", b64(k)}}, deadline));
  return kv && kv->lease == lease;
}

int64_t EtcdStore::delete_all() {
  std::lock_guard lk(mu_);
  std::string end = full_key("");
  end.back() = char(end.back() + 1);  // the prefix ends in '/': every key under it sorts below
  const json del = {{"key", b64(full_key(""))}, {"range_end", b64(end)}};
  const Deadline deadline = Deadline::after(timeout_);
  if (!fence_) return int_field(gateway_->call("/v3/kv/deleterange", del, deadline), "deleted");
  return int_field(fenced_txn({{"request_delete_range", del}}, deadline)
                       .value("response_delete_range", json::object()),
                   "deleted");
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lk(mu_);
  const Deadline deadline = Deadline::after(timeout_);
  for (const auto& key : keys) {
    const json r = gateway_->call("/v3/kv/range",
                                  {{"key", b64(full_key(key))}, {"count_only", true}}, deadline);
    if (int_field(r, "count") == 0) return false;
  }
  return true;
}

void EtcdStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::lock_guard lk(mu_);
  const Deadline deadline =
      Deadline::after(std::clamp(timeout, Millis(0), Millis(std::chrono::hours(24 * 7))));
  for (size_t i = 0; i < keys.size(); ++i) {
    try {
      wait_for(keys[i], deadline);
    } catch (const TimeoutError&) {
      std::vector<std::string> missing(keys.begin() + long(i), keys.end());
      throw TimeoutError("store wait timed out after " + remaining_text(timeout) +
                         "; missing keys: " + describe_missing(missing) + " (etcd " +
                         gateway_->members_text() + ")");
    }
  }
}

}  // namespace cohort::store
