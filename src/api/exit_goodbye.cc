#include "api/exit_goodbye.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace kolo::api {
namespace {

struct Entry {
  const void* owner;
  std::function<void()> goodbye;
  pid_t pid;  // the process that enrolled it
};

struct Registry {
  std::mutex mu;  // guards entries and exiting
  std::vector<Entry> entries;
  bool exiting = false;
};

// Never destroyed: the handler may run after other static destructors.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void sayGoodbyeAtExit() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.exiting = true;
  // One thread per communicator: communicators of one process may be ranks
  // of one job (ranks as threads), whose closing steps must meet.
  std::vector<std::thread> threads;
  // A forked child that exits must not speak on its parent's links.
  for (auto& e : r.entries) {
    if (e.pid == getpid()) threads.emplace_back(e.goodbye);
  }
  for (auto& t : threads) t.join();
  r.entries.clear();
}

}  // namespace

void enrolForExitGoodbye(const void* owner, std::function<void()> goodbye) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(sayGoodbyeAtExit); });
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.exiting) r.entries.push_back(Entry{owner, std::move(goodbye), getpid()});
}

void leaveExitGoodbye(const void* owner) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase_if(r.entries, [&](const Entry& e) { return e.owner == owner; });
}

}  // namespace kolo::api
