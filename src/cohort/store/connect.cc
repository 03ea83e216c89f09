#include "cohort/store/connect.h"

#include "cohort/store/etcd_store.h"
#include "cohort/store/tcp_store.h"

namespace cohort::store {

void set_reconnect_timeout(Store& store, Millis timeout) {
  if (auto* tcp = dynamic_cast<TcpStore*>(&store)) tcp->set_reconnect_timeout(timeout);
}

bool is_etcd(const std::string& where) {
  return EtcdAddress::is_etcd_url(where);
}

std::string store_host(const std::string& where) {
  return is_etcd(where) ? EtcdAddress::parse(where).members.front().host
                        : net::Endpoint::parse(where).host;
}

std::unique_ptr<Store> connect(const std::string& where, const ConnectOptions& options) {
  if (is_etcd(where))
    return std::make_unique<EtcdStore>(EtcdAddress::parse(where), options.timeout);
  auto tcp =
      std::make_unique<TcpStore>(net::Endpoint::parse(where), options.token, options.timeout);
  tcp->set_reconnect_timeout(options.reconnect_timeout);
  return tcp;
}

}  // namespace cohort::store
