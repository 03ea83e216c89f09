// A real etcd cluster for tests: Debian's etcd-server, its members started by the test on free
// loopback ports with their data in a temporary directory, killed and removed when the object goes.
#pragma once

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/elastic/process.h"
#include "cohort/net/socket.h"
#include "cohort/store/etcd_store.h"

namespace cohort::store::testing {

class EtcdCluster {
 public:
  // Starts `members` etcd processes as one cluster and waits (up to 30 s) until it answers.
  explicit EtcdCluster(int members = 1) {
    const std::string etcd = "/usr/bin/etcd";
    if (!std::filesystem::exists(etcd))
      throw Error("EtcdCluster: " + etcd + " is missing (Debian's etcd-server; make deps)");
    // Its data in memory (tmpfs): etcd syncs every write to disk, which a test need not wait for.
    char tmpl[] = "/dev/shm/etcd-test-XXXXXX";
    if (!mkdtemp(tmpl)) throw Error("EtcdCluster: mkdtemp failed");
    dir_ = tmpl;
    std::string initial;
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(free_port());
      peer_ports_.push_back(free_port());
      if (i) initial += ',';
      initial += name(i) + "=" + url_of(peer_ports_[i]);
    }
    for (int i = 0; i < members; ++i) {
      elastic::SpawnOptions o;
      o.executable = etcd;
      o.args = {"--name", name(i), "--data-dir", (dir_ / name(i)).string(), "--listen-client-urls",
                url_of(client_ports_[i]), "--advertise-client-urls", url_of(client_ports_[i]),
                "--listen-peer-urls", url_of(peer_ports_[i]), "--initial-advertise-peer-urls",
                url_of(peer_ports_[i]), "--initial-cluster", initial, "--initial-cluster-state",
                "new", "--initial-cluster-token", dir_.filename().string(),
                // Elections within a second, as on a LAN.
                "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap",
                "--log-level", "error"};
      o.stdout_path = (dir_ / (name(i) + ".log")).string();
      o.stderr_path = o.stdout_path;
      procs_.push_back(elastic::ChildProcess::spawn(o));
    }
    EtcdStore ready(EtcdAddress::parse(url("ready")), std::chrono::seconds(30));
  }

  ~EtcdCluster() {
    for (auto& p : procs_) {
      if (p.running()) p.terminate(std::chrono::seconds(2));
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // etcd://127.0.0.1:P1,127.0.0.1:P2,.../prefix
  std::string url(const std::string& prefix) const {
    std::string s = "etcd://";
    for (size_t i = 0; i < client_ports_.size(); ++i) {
      if (i) s += ',';
      s += "127.0.0.1:";
      s += std::to_string(client_ports_[i]);
    }
    return s + "/" + prefix;
  }

  // SIGKILLs one member.
  void kill(int member) {
    procs_.at(member).signal(SIGKILL);
    procs_.at(member).wait_for(std::chrono::seconds(10));
  }

  int members() const { return int(procs_.size()); }

 private:
  // Built by appending: GCC 12 warns falsely (-Wrestrict) on "literal" + std::to_string(...).
  static std::string name(int i) {
    std::string s = "m";
    s += std::to_string(i);
    return s;
  }
  static std::string url_of(uint16_t port) {
    std::string s = "http://127.0.0.1:";
    s += std::to_string(port);
    return s;
  }
  static uint16_t free_port() { return net::Listener::bind("127.0.0.1", 0).port(); }

  std::filesystem::path dir_;
  std::vector<uint16_t> client_ports_, peer_ports_;
  std::vector<elastic::ChildProcess> procs_;
};

}  // namespace cohort::store::testing
