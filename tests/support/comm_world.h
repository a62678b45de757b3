// Communicators for n ranks as n threads of the test process: each thread
// builds a full kolo::Communicator (real rendezvous through a TcpStoreServer
// hosted by the test, real shm/tcp transports).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/communicator_impl.h"
#include "common/settings.h"
#include "rendezvous/tcp_store.h"

namespace kolo::test {

// Settings for tests: short timeouts so a broken test fails fast.
inline Settings testSettings(const std::string& transport = "auto") {
  Settings s;
  s.transport = transport;
  s.timeoutSeconds = 20;
  s.connectTimeoutSeconds = 20;
  return s;
}

// Runs fn(comm) on n threads, each with its own communicator built with
// settingsOf(rank); after all threads finished, throws one error listing
// every rank's failure.
// hostOf(rank), when given, names each rank's pretend host (as KOLO_HOST_ID
// does): shared memory inside a host, tcp between hosts.
inline void withCommunicators(int n, const std::function<Settings(int)>& settingsOf,
                              const std::function<void(Communicator&)>& fn,
                              const std::function<std::string(int)>& hostOf = nullptr) {
  static int counter = 0;
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);
  const std::string address = "tcp://127.0.0.1:" + std::to_string(server->port());
  const std::string name = "t" + std::to_string(++counter);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommunicatorConfig config;
        config.rank = r;
        config.size = n;
        config.rendezvous = address;
        config.hostStore = false;
        config.name = name;
        if (hostOf) config.hostId = hostOf(r);
        api::CommunicatorImpl comm(config, settingsOf(r));
        fn(comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Report every rank's failure: the first one is usually the cause.
  std::string all;
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      all += "\n  rank " + std::to_string(r) + ": " + e.what();
    }
  }
  if (!all.empty()) throw std::runtime_error("ranks failed:" + all);
}

// The same with one Settings for every rank.
inline void withCommunicators(int n, const Settings& settings,
                              const std::function<void(Communicator&)>& fn,
                              const std::function<std::string(int)>& hostOf = nullptr) {
  withCommunicators(n, std::function<Settings(int)>([&](int) { return settings; }), fn,
                    hostOf);
}

}  // namespace kolo::test
