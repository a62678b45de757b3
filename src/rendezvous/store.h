// A small key-value store through which ranks find each other.
//
// Contract
// - set() publishes bytes under a key (overwrites). get() blocks until the
//   key exists, up to `timeout`, then throws Error(kTimeout) naming the key.
// - add() atomically adds to a 64-bit counter stored under key (created at
//   0) and returns the new value.
// - Thread safety: one Store object may be used by several threads.
// - Implementations: TcpStore (a server hosted by rank 0 or the launcher;
//   tcp_store.h) and FileStore (a directory on a shared file system;
//   file_store.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kolo::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  virtual std::vector<uint8_t> get(const std::string& key,
                                   std::chrono::milliseconds timeout) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // A store whose server this process hosts (openStore with hostServer)
  // stops serving: the server closes its port and connections now, even
  // while other holders of this object keep it (teams split from the
  // hosting communicator); the store is not used afterwards. Other stores:
  // nothing. Called once, by the hosting communicator's closing step.
  virtual void stopServing() {}

  // Convenience for strings.
  void setString(const std::string& key, const std::string& value) {
    set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string getString(const std::string& key, std::chrono::milliseconds timeout) {
    auto v = get(key, timeout);
    return std::string(v.begin(), v.end());
  }
};

// Opens the store named by a rendezvous address:
//   "tcp://HOST:PORT"   connect to a TcpStore server there; when
//                       `hostServer` is true this process starts the server
//                       on PORT first (rank 0 without a launcher), listening
//                       on `listenAddress`, or when that is empty on the
//                       address HOST names (127.0.0.1 stays on loopback; a
//                       name of this machine that resolves to 127.0.1.1
//                       listens on every interface, see docs/security.md).
//   "file:///DIR"       a FileStore in DIR (created if missing).
// The tcp store authenticates with `secret` (tcp_store.h); a file store
// signs its entries with it and refuses a directory that is not private to
// this user (file_store.h).
// Throws Error(kInvalidArgument) for a malformed address.
std::unique_ptr<Store> openStore(const std::string& address, bool hostServer,
                                 std::chrono::milliseconds connectTimeout,
                                 const std::string& secret = "",
                                 const std::string& listenAddress = "");

class TcpStoreServer;

// Says once per process, at warning level, that a store listening on
// `listenAddress` (the address TcpStoreServer::start was given; "" is
// every interface) serves anyone when `secret` is empty, with the line
// that sets one; says nothing for a loopback address or a secret
// (docs/security.md). openStore calls it for the store it hosts.
void warnWhenUnauthenticated(const std::string& listenAddress, int port,
                             const std::string& secret);

// A client of a server this process hosts, as one Store: the server lives
// as long as the client (and outlives it).
std::unique_ptr<Store> withHostedServer(std::unique_ptr<TcpStoreServer> server,
                                        std::unique_ptr<Store> client);

// Adds `prefix/` before every key, so several communicators share a store.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store& base)
      : prefix_(std::move(prefix) + "/"), base_(base) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    base_.set(prefix_ + key, value);
  }
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override {
    return base_.get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_.add(prefix_ + key, delta);
  }

 private:
  std::string prefix_;
  Store& base_;
};

}  // namespace kolo::rendezvous
