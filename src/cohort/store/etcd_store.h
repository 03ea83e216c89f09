// EtcdStore: the Store kept in an etcd cluster (etcd 3.4's v3 API through its JSON gateway over
// HTTP: Debian has no C++ etcd client), for jobs whose rendezvous and membership must outlive any
// one of their processes. Addressed as
//
//   etcd://HOST:PORT[,HOST:PORT...]/PREFIX
//
// Every key of the job lives under "/cohort/PREFIX/", so one etcd serves many jobs. A call goes to
// one member; when that member cannot be reached or has no leader, the call moves to the next
// member and is tried again until the store's timeout, so a cluster of three that loses one member
// serves on. What etcd guarantees (linearizable reads and writes, compare-and-swap transactions)
// is what the Store interface asks for:
//   set          put
//   get / wait   range; while absent, a watch from the revision after that range until the put
//   add,         read, then a transaction that writes only if the key's mod_revision is unchanged
//   compare_set  (or, for an absent key, its create_revision still 0); read again if it changed
//
// etcd refuses a request over its --max-request-bytes (1.5 MiB by default): a value sent in one
// is at most about 1.1 MiB after base64. Cohort's own values are far smaller.
//
// Access to etcd is etcd's own to guard: Cohort speaks plain HTTP to it and passes no etcd
// credentials, so etcd must listen on a network only the job's hosts reach; the job's token does
// not apply to it.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/net/socket.h"
#include "cohort/store/store.h"

namespace cohort::store {

// A fenced write found the fence's key held by another lease (store/etcd_store.h: fence()).
class FencedError : public Error {
 public:
  using Error::Error;
};

struct EtcdAddress {
  std::vector<net::Endpoint> members;
  std::string prefix;
  // Throws ConfigError naming what is wrong with `url`.
  static EtcdAddress parse(const std::string& url);
  static bool is_etcd_url(const std::string& s) { return s.rfind("etcd://", 0) == 0; }
  std::string str() const;
};

// Thread-safe, one request at a time (like TcpStore): a get() that waits holds the client.
class EtcdStore : public Store {
 public:
  // Checks that a member answers (trying each until timeout).
  explicit EtcdStore(EtcdAddress address, Millis timeout = std::chrono::seconds(30));
  ~EtcdStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::wait;

  // etcd's leases: a key put under a lease is deleted when the lease expires, `ttl` after its
  // last keep-alive (etcd rounds a short TTL up to its own minimum).
  int64_t grant_lease(Millis ttl);
  // Renews the lease; false once it has expired (its keys are gone).
  bool keep_alive(int64_t lease);
  void revoke_lease(int64_t lease);
  // Puts key = value under the lease if the key is absent; whether it did.
  bool create_with_lease(const std::string& key, const Bytes& value, int64_t lease);

  // From now on every write (set, add, compare_set, delete_key, delete_all) also requires `key` to
  // be held by `lease`, in the same transaction; one that finds it otherwise throws FencedError
  // and changes nothing. A coordinator fences its writes with its lead: one that lost the lead
  // cannot write over its successor's.
  void fence(const std::string& key, int64_t lease);

  // Deletes every key under this store's prefix (a finished job's); returns how many.
  int64_t delete_all();

  const EtcdAddress& address() const { return address_; }

  class Gateway;

 private:
  std::string full_key(const std::string& key) const;
  // The key's value, waiting for it until the deadline; TimeoutError names `key` and `what`.
  Bytes wait_for(const std::string& key, Deadline deadline);
  // A transaction: puts `value` at the full key `full` if its mod_revision is still
  // `mod_revision` (0: if it is still absent), and `mark` at adds_key_ with it. Whether it did.
  bool put_if_unchanged(const std::string& full, int64_t mod_revision, const Bytes& value,
                        Deadline deadline, const std::string& mark = "");

  struct Fence {
    std::string key;  // full key
    int64_t lease = 0;
  };
  // One transaction: `operation` (a request_put or request_delete_range) if the fence holds;
  // its response. Throws FencedError otherwise.
  nlohmann::json fenced_txn(const nlohmann::json& operation, Deadline deadline);
  nlohmann::json fence_compare() const;
  [[noreturn]] void throw_fenced() const;

  EtcdAddress address_;
  // This store's own key, written with every add's transaction (the add's number): an add whose
  // answer was lost after etcd applied it, sent again, fails its compare, and the mark tells that
  // it was applied once already, so that it is not applied again.
  std::string adds_key_;
  uint64_t adds_ = 0;
  std::optional<Fence> fence_;
  std::unique_ptr<Gateway> gateway_;
  std::mutex mu_;
};

}  // namespace cohort::store
