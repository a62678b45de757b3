// A key-value store served over TCP: the rendezvous of a job.
//
// TcpStoreServer runs in one process (kolorun, or rank 0 when there is no
// launcher) on a background thread; TcpStore is the client every rank uses.
// Protocol: length-prefixed binary requests (SET, GET-wait, ADD) on one
// connection per client; GET blocks on the server until the key exists, so
// clients do not poll.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/store.h"

namespace kolo::rendezvous {

class TcpStoreServer {
 public:
  // Listens on bindAddress:port (port 0 picks a free one; bindAddress ""
  // means all interfaces). Throws Error(kIo) naming the address on failure.
  static std::unique_ptr<TcpStoreServer> start(const std::string& bindAddress,
                                               int port);
  virtual ~TcpStoreServer() = default;  // stops the thread, closes clients
  virtual int port() const = 0;
};

class TcpStore : public Store {
 public:
  // Connects, retrying until connectTimeout (the server may start later).
  // Throws Error(kTimeout) naming host:port when it never answers.
  static std::unique_ptr<TcpStore> connect(const std::string& host, int port,
                                           std::chrono::milliseconds connectTimeout);
};

}  // namespace kolo::rendezvous
