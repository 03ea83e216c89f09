// A real etcd cluster for tests: Debian's etcd-server, its members started by the test on free
// loopback ports with their data in a temporary directory, killed and removed when the object goes.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/elastic/process.h"
#include "cohort/net/socket.h"
#include "cohort/store/etcd_store.h"

namespace cohort::store::testing {

class EtcdCluster {
 public:
  // Starts `members` etcd processes as one cluster and waits (up to 30 s) until it answers. Ports
  // are chosen free and handed to etcd, so another process may bind one first: a start whose
  // members do not all come to listen on their own ports is stopped and tried again on new ones.
  explicit EtcdCluster(int members = 1) {
    if (!std::filesystem::exists(kEtcd))
      throw Error(std::string("EtcdCluster: ") + kEtcd +
                  " is missing (Debian's etcd-server; make deps)");
    // Its data in memory (tmpfs): etcd syncs every write to disk, which a test need not wait for.
    char tmpl[] = "/dev/shm/etcd-test-XXXXXX";
    if (!mkdtemp(tmpl)) throw Error("EtcdCluster: mkdtemp failed");
    dir_ = tmpl;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string why;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      start(members, attempt);
      why = wait_listening(deadline);
      if (why.empty()) {
        const auto left = deadline - std::chrono::steady_clock::now();
        EtcdStore ready(EtcdAddress::parse(url("ready")),
                        std::max(std::chrono::duration_cast<Millis>(left), Millis(1000)));
        return;
      }
      stop();
    }
    throw Error("EtcdCluster: etcd did not start in 3 tries: " + why);
  }

  ~EtcdCluster() {
    stop();
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
  static constexpr const char* kEtcd = "/usr/bin/etcd";

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
  // Members named m0, m1, ... in dir_/<attempt>/; every port chosen while the others are still
  // held, so no two of one cluster are the same.
  void start(int members, int attempt) {
    client_ports_.clear();
    peer_ports_.clear();
    std::vector<net::Listener> held;
    for (int i = 0; i < 2 * members; ++i) held.push_back(net::Listener::bind("127.0.0.1", 0));
    std::string initial;
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(held[2 * i].port());
      peer_ports_.push_back(held[2 * i + 1].port());
      if (i) initial += ',';
      initial += name(i) + "=" + url_of(peer_ports_[i]);
    }
    held.clear();
    run_dir_ = dir_ / std::to_string(attempt);
    std::filesystem::create_directories(run_dir_);
    for (int i = 0; i < members; ++i) {
      elastic::SpawnOptions o;
      o.executable = kEtcd;
      o.args = {"--name", name(i), "--data-dir", (run_dir_ / name(i)).string(),
                "--listen-client-urls", url_of(client_ports_[i]), "--advertise-client-urls",
                url_of(client_ports_[i]), "--listen-peer-urls", url_of(peer_ports_[i]),
                "--initial-advertise-peer-urls", url_of(peer_ports_[i]), "--initial-cluster",
                initial, "--initial-cluster-state", "new", "--initial-cluster-token",
                dir_.filename().string() + "-" + std::to_string(attempt),
                // Elections within a second, as on a LAN.
                "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap",
                "--log-level", "error"};
      o.stdout_path = (run_dir_ / (name(i) + ".log")).string();
      o.stderr_path = o.stdout_path;
      procs_.push_back(elastic::ChildProcess::spawn(o));
    }
  }

  void stop() {
    for (auto& p : procs_) {
      if (p.running()) p.terminate(std::chrono::seconds(2));
    }
    procs_.clear();
  }

  // Empty once every member listens on both its ports; otherwise why not: a member that exited
  // (its log's last line), or the deadline.
  std::string wait_listening(std::chrono::steady_clock::time_point deadline) {
    for (Millis pause{2};; pause = std::min(pause * 2, Millis(50))) {
      bool all = true;
      for (size_t i = 0; i < procs_.size(); ++i) {
        if (procs_[i].poll()) return name(int(i)) + " exited: " + last_log_line(int(i));
        all = all && listens_on(procs_[i].pid(), client_ports_[i]) &&
              listens_on(procs_[i].pid(), peer_ports_[i]);
      }
      if (all) return "";
      if (std::chrono::steady_clock::now() > deadline) return "not listening after 30 s";
      std::this_thread::sleep_for(pause);  // polling /proc: nothing to wait on
    }
  }

  std::string last_log_line(int member) const {
    std::ifstream in(run_dir_ / (name(member) + ".log"));
    std::string line, last = "(no log)";
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    return last;
  }

  // Whether process `pid` holds a socket listening on 127.0.0.1:port (Linux's /proc: the
  // listener's inode among the process's descriptors).
  static bool listens_on(pid_t pid, uint16_t port) {
    std::ifstream tcp("/proc/" + std::to_string(pid) + "/net/tcp");
    char want[16];
    std::snprintf(want, sizeof(want), "0100007F:%04X", port);
    std::string line, inode;
    std::getline(tcp, line);  // the header
    while (std::getline(tcp, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode;
      if (local == want && state == "0A") break;  // 0A: LISTEN
      inode.clear();
    }
    if (inode.empty()) return false;
    const std::string target = "socket:[" + inode + "]";
    std::error_code ec;
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(fd.path(), link_ec).string() == target) return true;
    }
    return false;
  }

  std::filesystem::path dir_, run_dir_;
  std::vector<uint16_t> client_ports_, peer_ports_;
  std::vector<elastic::ChildProcess> procs_;
};

}  // namespace cohort::store::testing
