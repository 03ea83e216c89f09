#include "cohort/cli/join_flags.h"

#include <cstdlib>

#include "cohort/base/error.h"
#include "cohort/base/secret.h"
#include "cohort/net/socket.h"
#include "cohort/store/connect.h"

namespace cohort::cli {

JoinFlags read_join_flags(const Args& args, const std::string& who) {
  JoinFlags f;
  f.join = args.get_or("join", "");
  if (!store::is_etcd(f.join)) net::Endpoint::parse(f.join);  // refused now, not later
  if (auto file = args.get("token-file")) {
    f.token = read_secret_file(*file, "--token-file");
  } else if (const char* t = std::getenv("COHORT_TOKEN")) {
    f.token = t;
  } else {
    throw ConfigError("no job token: set COHORT_TOKEN or pass --token-file");
  }
  // By default the address of the interface that leads to the store (loopback for a store on
  // this machine's loopback).
  if (auto bind = args.get("bind")) {
    f.bind = *bind;
  } else {
    try {
      f.bind = net::local_address_towards(store::store_host(f.join));
    } catch (const Error& e) {
      throw ConfigError("cannot tell which address " + who + " at (" + std::string(e.what()) +
                        "); pass --bind");
    }
  }
  return f;
}

}  // namespace cohort::cli
