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
// Who may use it (docs/security.md): the directory is created with mode
// 0700 and its files 0600; a directory that already exists must belong to
// this user and be writable by nobody else, or the constructor refuses it
// by name (a stranger may have created a predictable /tmp/kolo-JOB first).
// Every entry is signed with the job secret: a file holds
// HMAC-SHA256(secret, "kolo file store" u32-key-length key value) and then
// the value, and get()/add() refuse an entry whose signature does not
// check out, naming the key (ranks with different secrets, or a file that
// kolo did not write). An empty secret signs too, and so authenticates
// nothing beyond the directory's permissions.
//
// Contract
// - Thread safety: any number of threads and processes may use the same
//   directory at once.
// - Blocking: get() up to its timeout, then Error(kTimeout) naming the key
//   and the directory. add() blocks on the lock.
// - Failure: file system errors are Error(kIo) naming the path; a
//   directory of another user or writable by others, and an entry with a
//   bad signature, are Error(kInvalidArgument) naming it.
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
  // cannot, Error(kInvalidArgument) when it is not private to this user.
  explicit FileStore(std::string directory, std::string secret = "");

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

  const std::string& directory() const { return directory_; }

 private:
  // The file of `key`: kind 'k' holds the value, 'l' is add()'s lock.
  std::string pathOf(const std::string& key, char kind = 'k') const;
  // The signed file content of key=value, and its inverse (throws naming
  // the key when the signature does not check out).
  std::vector<uint8_t> seal(const std::string& key,
                            const std::vector<uint8_t>& value) const;
  std::vector<uint8_t> unseal(const std::string& key, std::vector<uint8_t> sealed) const;

  std::string directory_;
  std::string secret_;
};

}  // namespace kolo::rendezvous
