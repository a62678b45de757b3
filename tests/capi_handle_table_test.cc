// The C API's handle table (src/capi/handle_table.h): values unique and
// never reused, stale, double-released, invented and closed-table values
// refused with an error naming the handle, released pending entries kept
// until their operation ends, and the table used from several threads at
// once (each thread's own handles, and handles made on one thread and
// taken on another).
#include "capi/handle_table.h"

#include <gtest/gtest.h>
#include <kolo/kolo.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kolo::capi {
namespace {

using runtime::Handle;
using runtime::HandlePtr;
using runtime::OpKind;

std::string lastError() {
  return kolo_last_error();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

HandleEntry entryOf(HandlePtr h, OpKind kind = OpKind::kAllreduce) {
  return HandleEntry{std::move(h), kind, nullptr};
}

HandlePtr done(const std::string& name) {
  auto h = std::make_shared<Handle>(name);
  h->complete();
  return h;
}

TEST(CApiHandleTable, FindTakeAndTheErrorsOfUnknownValues) {
  HandleTable table;
  kolo_handle a = 0, b = 0;
  EXPECT_EQ(table.add("t", entryOf(done("a")), &a), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_TRUE(contains(lastError(), "t called before kolo_init")) << lastError();
  table.open();
  ASSERT_EQ(table.add("t", entryOf(done("a")), &a), KOLO_OK);
  ASSERT_EQ(table.add("t", entryOf(done("b"), OpKind::kAllgather), &b), KOLO_OK);
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(table.size(), 2u);

  HandlePtr h;
  OpKind kind = OpKind::kAllreduce;
  ASSERT_EQ(table.find("t", b, &h, &kind), KOLO_OK);
  EXPECT_EQ(h->name(), "b");
  EXPECT_EQ(kind, OpKind::kAllgather);

  HandleEntry e;
  ASSERT_EQ(table.take("kolo_wait_release", a, &e), KOLO_OK);
  EXPECT_EQ(e.handle->name(), "a");
  // A second use of a released value names it and says why.
  EXPECT_EQ(table.take("kolo_wait_release", a, &e), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "kolo_wait_release: unknown handle " +
                                        std::to_string(a) + " (already released)"))
      << lastError();
  EXPECT_EQ(table.release("kolo_release", a), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(table.find("kolo_poll", 0, &h), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "kolo_poll: unknown handle 0 (handles are > 0)"))
      << lastError();
  EXPECT_EQ(table.find("kolo_wait", -5, &h), KOLO_ERR_INVALID_ARGUMENT);
  // A value no call returned yet (a later serial number).
  const kolo_handle future = b + (kolo_handle{1000} << HandleTable::kIndexBits);
  EXPECT_EQ(table.find("kolo_wait", future, &h), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(),
                       "unknown handle " + std::to_string(future) + " (never returned)"))
      << lastError();
  // b's slot index with another serial number: never b's entry.
  const kolo_handle forged = b ^ (kolo_handle{1} << HandleTable::kIndexBits);
  EXPECT_EQ(table.find("kolo_wait", forged, &h), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(table.size(), 1u);
}

TEST(CApiHandleTable, ValuesAreNeverReusedAndStaleOnesNeverReachANewEntry) {
  HandleTable table;
  table.open();
  std::set<kolo_handle> seen;
  kolo_handle previous = 0;
  // One handle at a time: the same slot every time, a new value each time.
  for (int i = 0; i < 5000; ++i) {
    kolo_handle h = 0;
    ASSERT_EQ(table.add("t", entryOf(done("x" + std::to_string(i))), &h), KOLO_OK);
    EXPECT_TRUE(seen.insert(h).second) << "value " << h << " made twice";
    if (previous != 0) {
      HandlePtr p;
      EXPECT_EQ(table.find("t", previous, &p), KOLO_ERR_INVALID_ARGUMENT)
          << "stale value " << previous << " found";
    }
    HandleEntry e;
    ASSERT_EQ(table.take("t", h, &e), KOLO_OK);
    EXPECT_EQ(e.handle->name(), "x" + std::to_string(i));
    previous = h;
  }
  // Values from before close() are refused after open() again, and new
  // ones differ from them.
  kolo_handle before = 0, after = 0;
  ASSERT_EQ(table.add("t", entryOf(done("before")), &before), KOLO_OK);
  EXPECT_EQ(table.close().size(), 1u);
  HandlePtr p;
  EXPECT_EQ(table.find("kolo_wait", before, &p), KOLO_ERR_NOT_INITIALIZED);
  table.open();
  EXPECT_EQ(table.find("kolo_wait", before, &p), KOLO_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(table.add("t", entryOf(done("after")), &after), KOLO_OK);
  EXPECT_NE(before, after);
  EXPECT_EQ(table.find("kolo_wait", before, &p), KOLO_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(table.find("kolo_wait", after, &p), KOLO_OK);
  EXPECT_EQ(p->name(), "after");
}

TEST(CApiHandleTable, ReleasedPendingEntriesLiveUntilTheirOperationEnds) {
  HandleTable table;
  table.open();
  auto pending = std::make_shared<Handle>("pending");
  std::weak_ptr<Handle> watch = pending;
  kolo_handle h = 0, other = 0;
  ASSERT_EQ(table.add("t", entryOf(pending), &h), KOLO_OK);
  pending.reset();
  ASSERT_EQ(table.release("kolo_release", h), KOLO_OK);
  EXPECT_EQ(table.size(), 0u);
  ASSERT_FALSE(watch.expired()) << "a pending entry was dropped at its release";
  watch.lock()->complete();
  // Finished released entries go at the next release.
  ASSERT_EQ(table.add("t", entryOf(done("other")), &other), KOLO_OK);
  ASSERT_EQ(table.release("kolo_release", other), KOLO_OK);
  EXPECT_TRUE(watch.expired());
  // close() hands back what is still pending.
  auto last = std::make_shared<Handle>("last");
  ASSERT_EQ(table.add("t", entryOf(last), &h), KOLO_OK);
  ASSERT_EQ(table.release("kolo_release", h), KOLO_OK);
  auto rest = table.close();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].handle->name(), "last");
}

TEST(CApiHandleTable, SeveralThreadsAtOnce) {
  HandleTable table;
  table.open();
  constexpr int kThreads = 4, kEach = 2000;
  std::atomic<int> errors{0};
  // Each thread adds, finds and takes its own handles, and also takes the
  // handles that the previous thread handed over.
  std::mutex handoverMu;
  std::vector<std::vector<kolo_handle>> handover(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<kolo_handle> mine;
      for (int i = 0; i < kEach; ++i) {
        const std::string name = std::to_string(t) + "/" + std::to_string(i);
        kolo_handle h = 0;
        if (table.add("t", entryOf(done(name)), &h) != KOLO_OK) ++errors;
        mine.push_back(h);
      }
      for (int i = 0; i < kEach; i += 2) {
        HandleEntry e;
        const std::string name = std::to_string(t) + "/" + std::to_string(i);
        if (table.take("t", mine[i], &e) != KOLO_OK || e.handle->name() != name) ++errors;
      }
      std::lock_guard<std::mutex> lock(handoverMu);
      for (int i = 1; i < kEach; i += 2) handover[(t + 1) % kThreads].push_back(mine[i]);
    });
  }
  for (auto& th : threads) th.join();
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (kolo_handle h : handover[t]) {
        HandlePtr p;
        if (table.find("t", h, &p) != KOLO_OK) ++errors;
        if (table.release("t", h) != KOLO_OK) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace kolo::capi
