// The process sets and their handles (process_set_table.h).
#include "runtime/process_set_table.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

namespace kolo::runtime {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size(); ++i) os << (i > 0 ? "-" : "") << ranks[i];
  return os.str();
}

// Drops each reference at once: the last on the calling thread, the others
// on a thread each (their closing steps run concurrently); waits for all.
// Inline when no thread can be started.
void releaseAtOnce(std::vector<std::shared_ptr<Communicator>> comms) {
  std::erase(comms, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i + 1 < comms.size(); ++i) {
    try {
      threads.emplace_back([c = std::move(comms[i])]() mutable { c.reset(); });
    } catch (const std::system_error&) {
      comms[i].reset();
    }
  }
  if (!comms.empty()) comms.back().reset();
  for (auto& t : threads) t.join();
}

}  // namespace

void ProcessSetTable::open(const std::shared_ptr<Communicator>& world,
                           const RuntimeOptions& options) {
  std::lock_guard<std::mutex> life(lifecycleMu_);
  auto state = std::make_unique<State>();
  state->world = world;
  state->options = options;
  state->options.timelinePath.clear();  // KOLO_TIMELINE is set 0's

  auto set = std::make_shared<ProcessSet>();
  set->id = 0;
  for (int r = 0; r < world->size(); ++r) set->ranks.push_back(r);
  set->comm = world->split(set->ranks, "runtime/0");
  set->runtime = std::make_unique<Runtime>(set->comm, options);
  state->global = set.get();
  state->sets.emplace(0, std::move(set));

  std::lock_guard<std::mutex> lock(mu_);
  state_ = std::move(state);
  handles_.open();
}

void ProcessSetTable::close(std::shared_ptr<Communicator> world) {
  std::lock_guard<std::mutex> life(lifecycleMu_);
  std::unique_ptr<State> state;
  std::vector<HandleEntry> handles;  // dropped once no runtime writes to them
  {
    std::lock_guard<std::mutex> lock(mu_);
    state.swap(state_);
    handles = handles_.close();
  }
  if (!state) return;
  // Every runtime first (each stops in its next cycle on all its members,
  // failing what is pending), then the communicators, all at once: each
  // release is a closing step over its members, which may wait for
  // different peers (see the header).
  for (auto& [id, set] : state->sets) {
    try {
      set->runtime->shutdown();
    } catch (...) {
    }
  }
  handles.clear();
  std::vector<std::shared_ptr<Communicator>> comms;
  for (auto& [id, set] : state->sets) {
    set->runtime.reset();
    comms.push_back(std::move(set->comm));
  }
  state->sets.clear();
  state->world.reset();
  comms.push_back(std::move(world));
  releaseAtOnce(std::move(comms));
}

ProcessSetTable::Lookup ProcessSetTable::find(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!state_) return {Status::kClosed, nullptr, -1};
  auto it = state_->sets.find(id);
  if (it == state_->sets.end()) return {Status::kUnknown, nullptr, state_->world->rank()};
  return {Status::kOk, it->second, state_->world->rank()};
}

ProcessSetTable::Status ProcessSetTable::enqueue(int id, const OpRequest& request,
                                                 HandlePtr* out, int* worldRank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!state_) return Status::kClosed;
  ProcessSet* set = state_->global;
  if (id != 0) {
    auto it = state_->sets.find(id);
    if (it == state_->sets.end()) {
      *worldRank = state_->world->rank();
      return Status::kUnknown;
    }
    set = it->second.get();
  }
  *out = set->runtime->enqueue(request);
  return Status::kOk;
}

ProcessSetTable::Status ProcessSetTable::create(const std::vector<int>& ranks, int* id) {
  std::shared_ptr<Communicator> world;
  RuntimeOptions options;
  int generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_) return Status::kClosed;
    world = state_->world;
    options = state_->options;
    generation = state_->generations[ranks];  // counted once the split succeeds
  }
  auto set = std::make_shared<ProcessSet>();
  set->ranks = ranks;
  set->comm =
      world->split(ranks, "set/" + rankList(ranks) + "/" + std::to_string(generation));
  // Agree on the id: the largest of the members' next free ids.
  int64_t mine = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_) return Status::kClosed;
    state_->generations[ranks] = generation + 1;
    mine = state_->nextSetId;
  }
  std::vector<int64_t> all(set->comm->size());
  AllgatherOptions o;
  o.send = &mine;
  o.recv = all.data();
  o.count = 1;
  o.dtype = DataType::kInt64;
  set->comm->allgather(o);
  int64_t agreed = mine;
  for (int64_t v : all) agreed = std::max(agreed, v);
  set->id = static_cast<int>(agreed);
  options.rankNames = {set->id, ranks};  // its errors name global ranks
  set->runtime = std::make_unique<Runtime>(set->comm, options);
  std::lock_guard<std::mutex> lock(mu_);
  if (!state_) return Status::kClosed;
  state_->nextSetId = set->id + 1;
  state_->sets.emplace(set->id, set);
  *id = set->id;
  return Status::kOk;
}

ProcessSetTable::Lookup ProcessSetTable::detach(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!state_) return {Status::kClosed, nullptr, -1};
  auto it = state_->sets.find(id);
  if (id == 0 || it == state_->sets.end()) {
    return {Status::kUnknown, nullptr, state_->world->rank()};
  }
  Lookup found{Status::kOk, std::move(it->second), state_->world->rank()};
  state_->sets.erase(it);
  return found;
}

void ProcessSetTable::retire(SetPtr set) {
  set->runtime->shutdown();  // pending handles of the set fail
  set->runtime.reset();
  set->comm.reset();  // closing barrier over the members
}

ProcessSetTable::Status ProcessSetTable::rankOf(int id, int* rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!state_) return Status::kClosed;
  auto it = state_->sets.find(id);
  // Only members know a set: an unknown id is one this rank is not in.
  *rank = it == state_->sets.end() ? -1 : it->second->comm->rank();
  return Status::kOk;
}

}  // namespace kolo::runtime
