// Bucket planning (fusion_planner.h). One open bucket per fusion key (dtype,
// reduction, scale factors, host or device memory) collects allreduces in ready order; an
// operation that would push its key's open bucket past the threshold closes
// it and opens the next. A group is placed whole: into its key's open bucket
// when it fits (or that bucket is empty), else into a new one; a group that
// is not all allreduces of one key gets a bucket of its own (the runtime
// runs its members one after another). An allreduce above `aloneBytes`
// outside a group gets a bucket of its own and leaves the open bucket open.
// Buckets are sorted by their first member.
#include "runtime/fusion_planner.h"

#include <algorithm>
#include <tuple>

namespace kolo::runtime {

namespace {

using FusionKey = std::tuple<DataType, ReduceOp, double, double, bool>;

FusionKey keyOf(const OpSpec& s) {
  return {s.dtype, s.op, s.prescale, s.postscale, s.onDevice};
}

}  // namespace

std::vector<Bucket> planBuckets(const std::vector<ReadyOp>& ready, int64_t thresholdBytes,
                                size_t aloneBytes) {
  const size_t threshold = thresholdBytes > 0 ? static_cast<size_t>(thresholdBytes) : 0;
  std::vector<Bucket> buckets;
  // Each key's open bucket (index into buckets). A cycle has one key or a
  // few, so a linear search beats a map's node walk per operation.
  std::vector<std::pair<FusionKey, size_t>> open;
  auto openOf = [&open](const FusionKey& key) {
    return std::find_if(open.begin(), open.end(),
                        [&key](const auto& o) { return o.first == key; });
  };

  // Places members [first, last) (all allreduces of one key) as a unit.
  auto place = [&](const size_t* first, const size_t* last, size_t bytes) {
    const FusionKey key = keyOf(*ready[*first].spec);
    auto it = openOf(key);
    if (threshold > 0 && it != open.end() &&
        buckets[it->second].bytes + bytes <= threshold) {
      auto& b = buckets[it->second];
      b.members.insert(b.members.end(), first, last);
      b.bytes += bytes;
      return;
    }
    buckets.push_back(Bucket{std::vector<size_t>(first, last), bytes});
    // One at or above the threshold stays alone and leaves the key's open
    // bucket open.
    if (threshold > 0 && bytes < threshold) {
      if (it != open.end()) {
        it->second = buckets.size() - 1;
      } else {
        open.emplace_back(key, buckets.size() - 1);
      }
    }
  };

  for (size_t i = 0; i < ready.size(); ++i) {
    const OpSpec& s = *ready[i].spec;
    if (s.group != 0) {
      if (i > 0 && ready[i - 1].spec->group == s.group) continue;  // placed
      std::vector<size_t> members;
      size_t bytes = 0;
      bool fusable = true;
      for (size_t j = i; j < ready.size() && ready[j].spec->group == s.group; ++j) {
        members.push_back(j);
        bytes += ready[j].spec->bytes();
        fusable = fusable && ready[j].spec->kind == OpKind::kAllreduce &&
                  keyOf(*ready[j].spec) == keyOf(s);
      }
      if (fusable) {
        place(members.data(), members.data() + members.size(), bytes);
      } else {
        buckets.push_back(Bucket{members, bytes});
      }
      continue;
    }
    const size_t bytes = s.bytes();
    if (s.kind != OpKind::kAllreduce || bytes > aloneBytes) {
      buckets.push_back(Bucket{{i}, bytes});
      continue;
    }
    place(&i, &i + 1, bytes);
  }
  std::stable_sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) {
    return a.members.front() < b.members.front();
  });
  return buckets;
}

}  // namespace kolo::runtime
