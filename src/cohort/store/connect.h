// Where a job's store is, as workers are told with `--join`: "HOST:PORT" (the StoreServer embedded
// in the coordinator, authenticated with the job token) or "etcd://HOST:PORT[,...]/PREFIX" (an
// etcd cluster; etcd_store.h).
#pragma once

#include <memory>
#include <string>

#include "cohort/base/clock.h"
#include "cohort/store/store.h"

namespace cohort::store {

struct ConnectOptions {
  std::string token;  // the job token (the embedded store only)
  Millis timeout{30000};
  // How long a call spends connecting again to an embedded store that went away (TcpStore::
  // set_reconnect_timeout). An etcd cluster is tried member by member until the call's timeout.
  Millis reconnect_timeout = Millis::max();
};

// Connects to the store at `where`; throws ConfigError for an address that is neither form.
std::unique_ptr<Store> connect(const std::string& where, const ConnectOptions& options);

// TcpStore::set_reconnect_timeout for a store connected to the embedded server; nothing for etcd.
void set_reconnect_timeout(Store& store, Millis timeout);

// Whether `where` names an etcd cluster.
bool is_etcd(const std::string& where);

// The host a worker reaches the store at (an etcd cluster's first member): the default of the
// address it tells its peers is the one of the interface towards it.
std::string store_host(const std::string& where);

}  // namespace cohort::store
