#include "collectives/ring_pipeline.h"

#include <algorithm>
#include <memory>

#include "collectives/reduce.h"
#include "collectives/scratch.h"
#include "common/check.h"

namespace kolo::collectives {
namespace {

struct Item {
  int step;
  size_t offset;  // elements into the step's segment
  size_t count;
};

}  // namespace

void runRing(const RingPlan& plan) {
  transport::Transport& t = *plan.transport;
  const size_t es = elementSize(plan.dtype);
  const size_t chunkElems = std::max<size_t>(1, plan.chunkBytes / es);
  const int steps = static_cast<int>(plan.steps.size());
  if (steps == 0) return;

  std::vector<transport::RequestPtr> firstSends;
  for (size_t off = 0; off < plan.firstCount; off += chunkElems) {
    const size_t n = std::min(chunkElems, plan.firstCount - off);
    firstSends.push_back(
        t.isend(plan.next, plan.steps[0].tag, plan.first + off * es, n * es));
  }

  std::vector<Item> items;
  size_t reduceChunk = 0;  // the largest chunk received for reduction
  for (int s = 0; s < steps; ++s) {
    const RingStep& st = plan.steps[s];
    for (size_t off = 0; off < st.count; off += chunkElems) {
      items.push_back({s, off, std::min(chunkElems, st.count - off)});
      if (st.local != nullptr) reduceChunk = std::max(reduceChunk, items.back().count);
    }
  }

  // Receive slots for chunks to reduce: item j uses slot j % window.
  const size_t window = kRingWindow;
  const size_t slotBytes = reduceChunk * es;
  uint8_t* slots =
      slotBytes > 0 ? scratch(ScratchUse::kRingSlots, window * slotBytes) : nullptr;
  // forwards[s]: the sends that read step s's result.
  std::vector<std::vector<transport::RequestPtr>> forwards(steps);
  std::vector<transport::RequestPtr> recvs(items.size());

  auto waitReused = [&](int s) {
    const int r = plan.steps[s].reuses;
    if (r < 0) return;
    for (auto& req : forwards[r]) t.wait(req);
    forwards[r].clear();
  };
  auto post = [&](size_t j) {
    const Item& it = items[j];
    const RingStep& st = plan.steps[it.step];
    uint8_t* into;
    if (st.local != nullptr) {
      into = slots + (j % window) * slotBytes;
    } else {
      waitReused(it.step);
      into = st.dst + it.offset * es;
    }
    recvs[j] = t.irecv(plan.prev, st.tag, into, it.count * es);
  };

  size_t posted = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    // Receives of chunks to reduce are limited by the slots; those that
    // land straight in place are posted as early as possible, so they
    // never arrive before their receive (which would cost the transport a
    // copy through a staging buffer).
    while (posted < items.size() &&
           (posted < j + window || plan.steps[items[posted].step].local == nullptr)) {
      post(posted++);
    }
    t.wait(recvs[j]);
    recvs[j].reset();
    const Item& it = items[j];
    const RingStep& st = plan.steps[it.step];
    uint8_t* out = st.dst + it.offset * es;
    if (st.local != nullptr) {
      // Items j+1 .. j+window-1 are posted: they arrive while we reduce.
      waitReused(it.step);
      reduce2(out, st.local + it.offset * es, slots + (j % window) * slotBytes, it.count,
              plan.dtype, plan.op);
    }
    if (it.step + 1 < steps) {
      forwards[it.step].push_back(
          t.isend(plan.next, plan.steps[it.step + 1].tag, out, it.count * es));
    }
  }

  t.waitAll(firstSends);
  for (auto& f : forwards) t.waitAll(f);
}

}  // namespace kolo::collectives
