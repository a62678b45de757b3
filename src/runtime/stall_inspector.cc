// The stall inspector's bookkeeping: one entry per pending name with the
// time it was first seen; a warning lists the names that have waited a full
// interval and were not listed in the last one.
#include "runtime/stall_inspector.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/rank_text.h"

namespace kolo::runtime {
namespace {

constexpr size_t kMaxListedRanks = 16;

double secondsBetween(StallInspector::Clock::time_point from,
                      StallInspector::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// "1,3", or the first 16 then ",... (40 ranks)".
// Whole seconds from 10 s on, else tenths; rounded down, so "waiting for
// X s or more" is true.
std::string waitedText(double seconds) {
  std::ostringstream os;
  if (seconds >= 10) {
    os << std::floor(seconds);
  } else {
    os << std::floor(seconds * 10) / 10;
  }
  return os.str();
}

// One line per name: "  allreduce 'w' waits on ranks 1,3 (submitted by 0,2)".
std::string nameLine(const PendingName& p) {
  std::vector<int> missing, submitted;
  for (size_t r = 0; r < p.submitted.size(); ++r) {
    (p.submitted[r] ? submitted : missing).push_back(static_cast<int>(r));
  }
  std::ostringstream os;
  os << "  " << p.kind << " '" << p.name << "' waits on "
     << rankList(missing, kMaxListedRanks);
  if (!submitted.empty() && submitted.size() <= missing.size()) {
    os << " (submitted by " << rankNumbers(submitted, kMaxListedRanks) << ")";
  }
  return os.str();
}

}  // namespace

StallInspector::StallInspector(double warningSeconds, double shutdownSeconds)
    : warningSeconds_(warningSeconds), shutdownSeconds_(shutdownSeconds) {}

void StallInspector::observe(Clock::time_point now,
                             const std::vector<PendingName>& pending) {
  std::map<std::string, Entry> next;
  for (const PendingName& p : pending) {
    auto it = entries_.find(p.name);
    if (it != entries_.end()) {
      Entry e = std::move(it->second);
      e.pending = p;  // who has submitted may have changed; the clock stays
      next.emplace(p.name, std::move(e));
    } else {
      Entry e;
      e.pending = p;
      e.firstSeen = now;
      next.emplace(p.name, std::move(e));
    }
  }
  entries_ = std::move(next);
}

std::string StallInspector::warning(Clock::time_point now) {
  if (warningSeconds_ <= 0) return "";
  std::vector<Entry*> due;
  for (auto& [name, e] : entries_) {
    if (secondsBetween(e.firstSeen, now) < warningSeconds_) continue;
    if (e.warned && secondsBetween(e.lastWarned, now) < warningSeconds_) continue;
    due.push_back(&e);
  }
  if (due.empty()) return "";
  // Longest waiting first; names break ties.
  std::stable_sort(due.begin(), due.end(), [](const Entry* a, const Entry* b) {
    return a->firstSeen < b->firstSeen;
  });
  const double shortest = secondsBetween(due.back()->firstSeen, now);
  std::ostringstream os;
  os << "stall: " << due.size() << " operation(s) waiting for " << waitedText(shortest)
     << " s or more (KOLO_STALL_WARNING=" << warningSeconds_ << "):";
  for (Entry* e : due) {
    os << "\n" << nameLine(e->pending);
    e->warned = true;
    e->lastWarned = now;
  }
  return os.str();
}

std::string StallInspector::shutdownReason(Clock::time_point now) const {
  if (shutdownSeconds_ <= 0) return "";
  std::vector<const Entry*> over;
  for (const auto& [name, e] : entries_) {
    if (secondsBetween(e.firstSeen, now) >= shutdownSeconds_) over.push_back(&e);
  }
  if (over.empty()) return "";
  std::stable_sort(over.begin(), over.end(), [](const Entry* a, const Entry* b) {
    return a->firstSeen < b->firstSeen;
  });
  const double shortest = secondsBetween(over.back()->firstSeen, now);
  std::ostringstream os;
  os << "stall: " << over.size() << " operation(s) waiting for " << waitedText(shortest)
     << " s or more exceeded KOLO_STALL_SHUTDOWN=" << shutdownSeconds_ << ":";
  for (const Entry* e : over) os << "\n" << nameLine(e->pending);
  return os.str();
}

}  // namespace kolo::runtime
