// A key-value store served over TCP: the rendezvous of a job.
//
// TcpStoreServer runs in one process (kolorun, or rank 0 when there is no
// launcher) on a background thread; TcpStore is the client every rank uses.
// Protocol (store_protocol.h): each connection first proves knowledge of
// the job secret both ways (HMAC-SHA256 over per-connection nonces; the
// secret never crosses the wire), then carries length-prefixed binary
// requests (SET, GET-wait, ADD); GET blocks on the server until the key
// exists, so clients do not poll.
//
// Bounds (protocol::Limits, docs/security.md): a request larger than
// maxFrameBytes, a SET that would take the store over maxStoreBytes, or a
// connection that stalls idleMillis with a partial request (or without its
// proof) gets a kBad reply naming the limit, one log line on the server,
// and (except for a full store) is closed. The server's memory stays
// within the limits whatever a client sends, and its descriptors serve the
// ranks first: unproven connections are capped and shed oldest first, and
// a client that cannot be served for want of descriptors is told so
// (tcp_store.cc).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"

namespace kolo::rendezvous {

class TcpStoreServer {
 public:
  // Listens on bindAddress:port (port 0 picks a free one; bindAddress ""
  // means all interfaces). Only clients that prove `secret` are served
  // (an empty secret is a secret too: it authenticates nothing, see
  // docs/security.md). Throws Error(kIo) naming the address on failure.
  static std::unique_ptr<TcpStoreServer> start(const std::string& bindAddress, int port,
                                               const std::string& secret = "",
                                               const protocol::Limits& limits = {});
  virtual ~TcpStoreServer() = default;  // stops the thread, closes clients
  virtual int port() const = 0;

  // The server's own accounting, readable from any thread.
  struct Usage {
    size_t storedBytes = 0;  // keys and values held
    size_t keys = 0;
    size_t refused = 0;  // connections closed for a failed proof or a limit
    // Connections closed unproven to make room (Limits::maxUnauthenticated,
    // or out of descriptors), and ones told "busy" for want of descriptors.
    size_t shed = 0;
  };
  virtual Usage usage() const = 0;
};

class TcpStore : public Store {
 public:
  // Connects, retrying until connectTimeout (the server may start later),
  // and authenticates with `secret` (both ways). Throws Error(kTimeout)
  // naming host:port when it never answers, Error(kInvalidArgument) when
  // the server refuses this secret or cannot prove its own.
  static std::unique_ptr<TcpStore> connect(const std::string& host, int port,
                                           std::chrono::milliseconds connectTimeout,
                                           const std::string& secret = "");
};

}  // namespace kolo::rendezvous
