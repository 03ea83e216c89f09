// Subgroups: split() and subgroup() agree on the members with one allgather of this
// communicator, then build the group's communicator through the store like any other.
#include <algorithm>
#include <array>

#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/comm/tcp_communicator.h"

namespace cohort::comm {
namespace {

// What every rank compares to see that all passed the same list (a mismatch is a caller's
// mistake, not an attack: a checksum of the list and its length is enough).
uint64_t digest(const std::vector<int>& ranks) {
  return uint64_t{crc32(ranks.data(), ranks.size() * sizeof(int))} << 32 | ranks.size();
}

}  // namespace

std::unique_ptr<Communicator> TcpCommunicator::split(int color, int key) {
  return form_group("split", color, key, 0);
}

std::unique_ptr<Communicator> TcpCommunicator::subgroup(const std::vector<int>& ranks) {
  std::vector<bool> seen(static_cast<size_t>(size()), false);
  int place = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= size()) {
      throw ConfigError("subgroup: rank " + std::to_string(r) + " is not in a world of " +
                        std::to_string(size()));
    }
    if (seen[static_cast<size_t>(r)]) {
      throw ConfigError("subgroup: rank " + std::to_string(r) + " is listed twice");
    }
    seen[static_cast<size_t>(r)] = true;
    if (r == rank()) place = static_cast<int>(i);
  }
  return form_group("subgroup", place < 0 ? -1 : 0, place, digest(ranks));
}

std::unique_ptr<Communicator> TcpCommunicator::form_group(const char* what, int color, int key,
                                                          uint64_t agreement) {
  constexpr size_t kFields = 3;  // color, key, agreement
  std::array<int64_t, kFields> mine{color, key, static_cast<int64_t>(agreement)};
  std::vector<int64_t> all(kFields * static_cast<size_t>(size()));
  auto work = allgather(Buffer{DType::I64, mine.data(), kFields},
                        Buffer{DType::I64, all.data(), all.size()}, {});
  work->wait();
  auto field = [&](int r, size_t f) { return all[kFields * static_cast<size_t>(r) + f]; };
  for (int r = 0; r < size(); ++r) {
    if (field(r, 2) != mine[2]) {
      throw ConfigError(std::string(what) + " #" + std::to_string(work->sequence()) + ": rank " +
                        std::to_string(r) + " passed a different rank list than rank " +
                        std::to_string(rank()));
    }
  }
  if (color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (field(r, 0) == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return field(a, 1) < field(b, 1); });
  CommConfig c = config_;
  c.rank = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  c.size = static_cast<int>(members.size());
  c.store_prefix = config_.store_prefix + "/group/" + std::to_string(work->sequence()) + "/" +
                   std::to_string(color);
  c.flight_recorder = nullptr;
  return Communicator::create(store_, c);
}

}  // namespace cohort::comm
