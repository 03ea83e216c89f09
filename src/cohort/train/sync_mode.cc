#include "cohort/train/sync_mode.h"

#include "cohort/base/error.h"

namespace cohort::train {

std::unique_ptr<SyncMode> make_sync_mode(const ModeParts& parts) {
  switch (parts.config.sync.mode) {
    case SyncKind::AllReduce:
      return make_allreduce_mode(parts);
    case SyncKind::LocalSgd:
      return make_local_sgd_mode(parts);
    case SyncKind::Ssp:
    case SyncKind::Async:
      break;
  }
  throw Error("sync.mode " + std::string(sync_kind_name(parts.config.sync.mode)) +
              " is made with its parameter servers (make_server_mode)");
}

}  // namespace cohort::train
