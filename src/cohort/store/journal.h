// StoreJournal: the embedded store's keys kept in a file as they change, so that a coordinator
// started again over the same run directory (`cohort run --resume`) serves what its predecessor
// held, and re-adopts the workers that are still training.
//
// The file is a header line, then one record per change: u32 length, u32 CRC-32 of the body, the
// body (u8 kind: 1 put, 2 erase; u32 key length; key; value). The server appends a record before
// it answers the request that made the change, with one write() each: a coordinator killed at any
// point leaves every change it acknowledged in the file (the kernel's page cache outlives the
// process; the file is not fsynced, so a lost machine is covered by the checkpoints, not by this).
// A record torn by a process killed inside its write() is the last one, and is dropped with a
// warning. The file is rewritten as its live keys alone whenever it has doubled since it last was
// (and is over a mebibyte): heartbeats and progress records, overwritten or erased as they come,
// cost the file a bounded multiple of the live keys.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "cohort/store/store.h"

namespace cohort::store {

class StoreJournal {
 public:
  // The keys and values the journal at `path` leaves, in key order; empty when there is no file.
  // A file that is not a journal, or a record that fails its check before the last one, is an
  // Error naming the file and the record's offset.
  static std::map<std::string, Bytes> replay(const std::string& path);

  // Starts the journal at `path` afresh with `contents` (a temporary file renamed over it).
  // Throws SystemError naming the file.
  StoreJournal(std::string path, const std::map<std::string, Bytes>& contents);
  ~StoreJournal();
  StoreJournal(const StoreJournal&) = delete;
  StoreJournal& operator=(const StoreJournal&) = delete;

  void put(const std::string& key, const Bytes& value);
  void erase(const std::string& key);
  // Whether the file has doubled since it was last written whole.
  bool wants_compaction() const;
  // Rewrites the file as `contents` alone.
  void compact(const std::map<std::string, Bytes>& contents);

  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void append(uint8_t kind, const std::string& key, const Bytes* value);

  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint64_t compacted_bytes_ = 0;  // the size of the file when it was last written whole
};

}  // namespace cohort::store
