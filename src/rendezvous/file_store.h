// A Store kept in a directory: for jobs whose ranks share a file system
// (one host, or a cluster file system) and have no TCP store.
//
// Layout: one file per key, "k" followed by the key with every byte
// outside [A-Za-z0-9._-] written as %XX. set() writes a temporary file
// (".t..." beside it) and renames it over the key's file, so a reader sees
// the old value or the new one, never half of it. get() polls for the file
// with growing sleeps (1 ms up to 50 ms). add() holds an exclusive flock()
// on the key's lock file ("l" + encoded key) while it reads, adds and
// rewrites the decimal counter.
//
// Contract
// - Thread safety: any number of threads and processes may use the same
//   directory at once.
// - Blocking: get() up to its timeout, then Error(kTimeout) naming the key
//   and the directory. add() blocks on the lock.
// - Failure: file system errors are Error(kIo) naming the path.
// - Nothing is removed: a directory reused by a later job must be emptied
//   by whoever reuses it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::rendezvous {

class FileStore : public Store {
 public:
  // Creates `directory` (and missing parents). Throws Error(kIo) when it
  // cannot.
  explicit FileStore(std::string directory);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

  const std::string& directory() const { return directory_; }

 private:
  // The file of `key`: kind 'k' holds the value, 'l' is add()'s lock.
  std::string pathOf(const std::string& key, char kind = 'k') const;

  std::string directory_;
};

}  // namespace kolo::rendezvous
