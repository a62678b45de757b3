// n ranks as n threads of this process, each with its own TcpTransport over
// loopback, meeting through a real TcpStoreServer on 127.0.0.1.
//
//   auto ts = kolo::test::makeTcpTransports(4);          // connected mesh
//   kolo::test::runOnThreads(4, [&](int r) { use(*ts[r]); });
//   kolo::test::destroyInParallel(ts);
//
// or in one go: runTcpRanks(4, [](int r, TcpTransport& t) { ... });
//
// A tweak function may change each rank's Options (timeouts, connect set,
// buffer sizes) before the transport is created. Transports are created on
// n threads at once (create() is collective) and should be destroyed in
// parallel too (each flushes a goodbye to its peers, bounded in time).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/tcp_store.h"
#include "transport/tcp/tcp_transport.h"

namespace kolo::test {

using TcpOptionsTweak = std::function<void(transport::TcpTransport::Options&)>;

// A loopback port free right now, for a store server started only after a
// fork (forking while a server thread runs is unsafe: the child can inherit
// a lock that thread held).
inline int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Calls fn(rank) for rank 0..n-1 on n threads; rethrows the first failure
// (lowest rank) once all have returned.
inline void runOnThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

inline std::vector<std::unique_ptr<transport::TcpTransport>> makeTcpTransports(
    int n, const TcpOptionsTweak& tweak = {}) {
  static std::atomic<int> meshes{0};
  const std::string prefix = "mesh" + std::to_string(meshes.fetch_add(1));
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);
  std::vector<std::unique_ptr<transport::TcpTransport>> out(n);
  runOnThreads(n, [&](int r) {
    auto store = rendezvous::TcpStore::connect("127.0.0.1", server->port(),
                                               std::chrono::milliseconds(20000));
    transport::TcpTransport::Options o;
    o.rank = r;
    o.size = n;
    o.timeout = std::chrono::milliseconds(20000);
    o.connectTimeout = std::chrono::milliseconds(20000);
    o.keyPrefix = prefix;
    if (tweak) tweak(o);
    out[r] = transport::TcpTransport::create(o, *store);
  });
  return out;
}

template <typename T>
void destroyInParallel(std::vector<std::unique_ptr<T>>& items) {
  runOnThreads(static_cast<int>(items.size()), [&](int r) { items[r].reset(); });
}

inline void runTcpRanks(int n,
                        const std::function<void(int, transport::TcpTransport&)>& fn,
                        const TcpOptionsTweak& tweak = {}) {
  auto ts = makeTcpTransports(n, tweak);
  std::exception_ptr failure;
  try {
    runOnThreads(n, [&](int r) { fn(r, *ts[r]); });
  } catch (...) {
    failure = std::current_exception();
  }
  destroyInParallel(ts);
  if (failure) std::rethrow_exception(failure);
}

}  // namespace kolo::test
