// How a Context maps onto the scale model's JobShape, and the per-class
// cache of the model's decision. The decision itself (which algorithm is
// cheapest, and which are candidates) is predict::selectAllreduce: the one
// model that kolo-predict reports.
#include "collectives/selection.h"

#include <algorithm>

#include "collectives/context.h"

namespace kolo::collectives {

AllreduceSelector::AllreduceSelector(predict::Constants constants,
                                     predict::JobShape shape)
    : constants_(std::move(constants)), shape_(std::move(shape)) {
  if (shape_.hosts() > 1 && shape_.ranksPerHost > 1) {
    predict::JobShape cross = shape_;
    cross.ranks = shape_.hosts();
    cross.ranksPerHost = 1;
    cross.hostOf.clear();
    cross.shmArena = false;
    cross_ = std::make_unique<AllreduceSelector>(constants_, std::move(cross));
  }
}

std::string_view AllreduceSelector::choose(size_t bytes) const {
  const int cls = predict::sizeClass(bytes);
  uint8_t v = cache_[cls].load(std::memory_order_relaxed);
  if (v == 0) {
    const predict::Algorithm a = predict::selectAllreduce(bytes, shape_, constants_);
    v = static_cast<uint8_t>(static_cast<int>(a) + 1);
    cache_[cls].store(v, std::memory_order_relaxed);
  }
  return predict::toString(static_cast<predict::Algorithm>(v - 1));
}

predict::JobShape shapeOfContext(const Context& ctx, predict::Path intra,
                                 predict::Path inter, std::vector<int> hostOf) {
  predict::JobShape s;
  s.intra = intra;
  s.inter = inter;
  const Layout& l = ctx.layout;
  s.ranks = ctx.world.size();
  if (s.ranks != l.size) {  // a sub-group: hier's ranks of one local index
    s.ranksPerHost = 1;
    return s;
  }
  const int hosts = std::max(1, l.crossSize);
  s.ranksPerHost = (l.size + hosts - 1) / hosts;
  if (static_cast<int>(hostOf.size()) == l.size) {
    std::vector<int> perHost(hosts, 0);
    for (int h : hostOf) {
      if (h >= 0 && h < hosts) s.ranksPerHost = std::max(s.ranksPerHost, ++perHost[h]);
    }
    s.hostOf = std::move(hostOf);
  }
  s.shmArena = ctx.shm != nullptr && hosts == 1 && l.localSize == l.size;
  // hier runs only with the host groups; without them, none of its ranks
  // may choose it (the model then sees one rank per host).
  if (hosts > 1 && (ctx.local == nullptr || ctx.cross == nullptr)) {
    s.ranksPerHost = 1;
    s.hostOf.clear();
    s.ranks = l.size;
  }
  return s;
}

}  // namespace kolo::collectives
