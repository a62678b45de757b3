// A job of n ranks as n threads of this process, each rank with its own
// real transport, for tests of the collective algorithms.
//
// Kinds of world:
//   kTcp     one TcpTransport per rank over loopback, rendezvous through a
//            TcpStore served by the test process
//   kShm     one ShmTransport per rank (all ranks on one host), and a
//            ShmGroup (ctx.shm) for the shared-memory allreduce
//   kHosts   ranks assigned to pretend hosts (hostOf): shared memory inside
//            a host and tcp between hosts, combined by a RouterTransport;
//            with ctx.local / ctx.cross GroupTransports as the hierarchical
//            algorithms need them
//   kTcpHosts  pretend hosts as for kHosts, but tcp between all ranks
//
// run(fn) calls fn(rank) on n threads at once and rethrows the first
// exception once all have returned. A failing rank usually makes its peers
// time out (Options timeout), so a broken algorithm fails, never hangs.
#pragma once

#include <kolo/communicator.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/context.h"
#include "rendezvous/tcp_store.h"
#include "support/tcp_ranks.h"
#include "transport/group_transport.h"
#include "transport/router_transport.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace kolo::test {

inline constexpr std::chrono::milliseconds kWorldTimeout{20000};

// Calls fn(rank) for rank 0..n-1 on n threads; rethrows the first failure.
inline void runRanks(int n, const std::function<void(int)>& fn) {
  runOnThreads(n, fn);
}

class ThreadWorld {
 public:
  enum class Kind { kTcp, kShm, kHosts, kTcpHosts };

  static const char* name(Kind k) {
    switch (k) {
      case Kind::kTcp: return "tcp";
      case Kind::kShm: return "shm";
      case Kind::kHosts: return "hosts";
      case Kind::kTcpHosts: return "tcphosts";
    }
    return "?";
  }

  // hostOf[r]: the pretend host of rank r (kHosts only; hosts numbered in
  // order of their first rank).
  ThreadWorld(Kind kind, int n, std::vector<int> hostOf = {})
      : kind_(kind), n_(n), hostOf_(std::move(hostOf)), ranks_(n) {
    if (hostOf_.empty()) hostOf_.assign(n, 0);
    static std::atomic<int> worlds{0};
    const std::string id =
        "w" + std::to_string(getpid()) + "_" + std::to_string(worlds.fetch_add(1));
    auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);

    // Hosts in order of their first rank; local and cross rank orders.
    std::map<int, std::vector<int>> members;
    std::vector<int> hostOrder;
    for (int r = 0; r < n; ++r) {
      if (members[hostOf_[r]].empty()) hostOrder.push_back(hostOf_[r]);
      members[hostOf_[r]].push_back(r);
    }
    runRanks(n, [&](int r) {
      Rank& me = ranks_[r];
      const std::vector<int>& local = members[hostOf_[r]];
      me.layout.rank = r;
      me.layout.size = n;
      me.layout.localRank =
          static_cast<int>(std::find(local.begin(), local.end(), r) - local.begin());
      me.layout.localSize = static_cast<int>(local.size());
      me.layout.crossRank = static_cast<int>(
          std::find(hostOrder.begin(), hostOrder.end(), hostOf_[r]) - hostOrder.begin());
      me.layout.crossSize = static_cast<int>(hostOrder.size());
      me.layout.hostId = "host" + std::to_string(hostOf_[r]);
      me.store = rendezvous::TcpStore::connect("127.0.0.1", server->port(),
                                               std::chrono::milliseconds(20000));
      if (kind_ == Kind::kTcp || kind_ == Kind::kTcpHosts) {
        me.world = makeTcp(r, n, {}, id, *me.store);
      } else if (kind_ == Kind::kShm) {
        std::vector<int> all(n);
        for (int i = 0; i < n; ++i) all[i] = i;
        me.world = makeShm(r, n, all, id, *me.store);
        shm::ShmGroup::Options g;
        g.localRank = r;
        g.localSize = n;
        g.globalRanks = all;
        g.slotBytes = 256 * 1024;
        g.timeout = kWorldTimeout;
        g.spin = std::chrono::microseconds(5);
        g.name = id + "_group";
        me.shmGroup = shm::ShmGroup::create(g, *me.store);
      } else {
        std::vector<std::unique_ptr<transport::Transport>> parts;
        std::vector<int> routes(n);
        std::vector<bool> remote(n, false);
        bool anyRemote = false;
        for (int q = 0; q < n; ++q) {
          remote[q] = hostOf_[q] != hostOf_[r];
          anyRemote = anyRemote || remote[q];
          routes[q] = remote[q] ? 1 : 0;
        }
        parts.push_back(
            makeShm(r, n, local, id + "_h" + std::to_string(hostOf_[r]), *me.store));
        if (anyRemote) {
          remote[r] = true;  // a link set must name us
          parts.push_back(makeTcp(r, n, remote, id, *me.store));
        }
        me.world = std::make_unique<transport::RouterTransport>(
            r, n, std::move(parts), routes, std::chrono::microseconds(5), kWorldTimeout);
      }
    });
    if (kind_ == Kind::kHosts || kind_ == Kind::kTcpHosts) {
      for (int r = 0; r < n; ++r) {
        Rank& me = ranks_[r];
        me.local = std::make_unique<transport::GroupTransport>(
            *me.world, members[hostOf_[r]], std::chrono::microseconds(5));
        // The ranks with my local rank, one per host that has one.
        std::vector<int> cross;
        for (int h : hostOrder) {
          const auto& m = members[h];
          if (me.layout.localRank < static_cast<int>(m.size())) {
            cross.push_back(m[me.layout.localRank]);
          }
        }
        me.cross = std::make_unique<transport::GroupTransport>(
            *me.world, cross, std::chrono::microseconds(5));
      }
    }
    server_ = std::move(server);
  }

  ~ThreadWorld() {
    // Transports say goodbye to each other on destruction: do it in
    // parallel so no rank waits for one that is not closing yet.
    runRanks(n_, [&](int r) {
      ranks_[r].shmGroup.reset();
      ranks_[r].cross.reset();
      ranks_[r].local.reset();
      ranks_[r].world.reset();
      ranks_[r].store.reset();
    });
  }

  Kind kind() const { return kind_; }
  int size() const { return n_; }

  // A context for rank r with a fresh tag block (callers on all ranks must
  // make the same sequence of calls).
  collectives::Context context(int r) {
    Rank& me = ranks_[r];
    collectives::Context ctx{*me.world, me.layout};
    ctx.local = me.local.get();
    ctx.cross = me.cross.get();
    ctx.shm = me.shmGroup.get();
    ctx.tag = me.nextTag;
    me.nextTag += collectives::kTagsPerOp;
    return ctx;
  }

  transport::Transport& transport(int r) { return *ranks_[r].world; }
  const Layout& layout(int r) const { return ranks_[r].layout; }

  void run(const std::function<void(int)>& fn) { runRanks(n_, fn); }

 private:
  struct Rank {
    Layout layout;
    std::unique_ptr<rendezvous::Store> store;
    std::unique_ptr<transport::Transport> world;
    std::unique_ptr<transport::GroupTransport> local;
    std::unique_ptr<transport::GroupTransport> cross;
    std::unique_ptr<shm::ShmGroup> shmGroup;
    transport::Tag nextTag = 0;
  };

  static std::unique_ptr<transport::Transport> makeTcp(int r, int n,
                                                       std::vector<bool> connect,
                                                       const std::string& id,
                                                       rendezvous::Store& store) {
    transport::TcpTransport::Options o;
    o.rank = r;
    o.size = n;
    o.connect = std::move(connect);
    o.timeout = kWorldTimeout;
    o.connectTimeout = std::chrono::milliseconds(20000);
    o.spin = std::chrono::microseconds(5);
    o.socketBufferBytes = 1 << 20;
    o.keyPrefix = id + "/tcp";
    return transport::TcpTransport::create(o, store);
  }

  static std::unique_ptr<transport::Transport> makeShm(int r, int n,
                                                       std::vector<int> localRanks,
                                                       const std::string& id,
                                                       rendezvous::Store& store) {
    transport::ShmTransport::Options o;
    o.rank = r;
    o.size = n;
    o.localRanks = std::move(localRanks);
    o.timeout = kWorldTimeout;
    o.connectTimeout = std::chrono::milliseconds(20000);
    o.spin = std::chrono::microseconds(5);
    o.ringBytes = 256 * 1024;
    o.keyPrefix = id + "/shm";
    o.jobName = id;
    return transport::ShmTransport::create(o, store);
  }

  Kind kind_;
  int n_;
  std::vector<int> hostOf_;
  std::vector<Rank> ranks_;
  std::unique_ptr<rendezvous::TcpStoreServer> server_;
};

}  // namespace kolo::test
