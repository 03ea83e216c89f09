// A torch.distributed store (c10d::Store: TCPStore, FileStore, PrefixStore, ...) seen as Cohort's
// rendezvous store, so that a communicator forms through whatever store init_process_group made.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "cohort/store/store.h"

namespace cohort::dist {

// A connection of its own to the same store, for a thread that must not queue behind another's
// blocking wait (a c10d TCPStore client runs one operation at a time): a new TCPStore client under
// the same prefixes when the store is a TCPStore (PrefixStores over one), the store itself
// otherwise.
c10::intrusive_ptr<c10d::Store> second_connection(const c10::intrusive_ptr<c10d::Store>& store);

class C10dStore final : public store::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store);

  void set(const std::string& key, const store::Bytes& value) override;
  // Waits for the key (this store's timeout), then reads it.
  store::Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  store::Bytes compare_set(const std::string& key, const store::Bytes& expected,
                           const store::Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  // TimeoutError naming the keys still missing.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace cohort::dist
