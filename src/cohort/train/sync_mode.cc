#include "cohort/train/sync_mode.h"

namespace cohort::train {

std::unique_ptr<SyncMode> make_sync_mode(const ModeParts& parts) {
  switch (parts.config.sync.mode) {
    case SyncKind::AllReduce:
      return make_allreduce_mode(parts);
    case SyncKind::LocalSgd:
      return make_local_sgd_mode(parts);
  }
  throw Error("unknown sync.mode");
}

}  // namespace cohort::train
