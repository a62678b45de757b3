#include "support/ipc_host_device.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/cuda/element_ops.h"
#include "common/check.h"

namespace kolo::test {
namespace {

struct SharedEvent {
  std::atomic<uint64_t> recorded;
  std::atomic<uint64_t> completed;
};

HostStream* asStream(void* stream) {
  KOLO_CHECK(stream != nullptr);
  return static_cast<HostStream*>(stream);
}

SharedEvent* asEvent(void* event) {
  return static_cast<SharedEvent*>(event);
}

std::string segmentName(const char* kind, uint64_t n) {
  return "/kolo-ipcdbl-" + std::to_string(getpid()) + "-" + kind + std::to_string(n);
}

cuda_ipc::Handle nameHandle(const std::string& name) {
  cuda_ipc::Handle h{};
  KOLO_CHECK_LT(name.size(), cuda_ipc::Handle::kBytes);
  std::memcpy(h.bytes, name.data(), name.size());
  return h;
}

std::string handleName(const cuda_ipc::Handle& h) {
  return std::string(reinterpret_cast<const char*>(h.bytes),
                     strnlen(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes));
}

namespace ops = collectives::cuda::ops;

template <class L, ops::OpKind K>
void fanIn(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
           double divisor) {
  using S = typename L::Storage;
  for (size_t i = 0; i < count; ++i) {
    const S v = ops::fanInElement<L, K>(srcs, n, i, divisor);
    for (int j = 0; j < m; ++j) static_cast<S*>(dsts[j])[i] = v;
  }
}

template <class L>
void fanInFor(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
              ReduceOp op) {
  const double divisor = op == ReduceOp::kAverage ? n : 0.0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return fanIn<L, ops::OpKind::kSum>(dsts, m, srcs, n, count, divisor);
    case ReduceOp::kMin:
      return fanIn<L, ops::OpKind::kMin>(dsts, m, srcs, n, count, divisor);
    case ReduceOp::kMax:
      return fanIn<L, ops::OpKind::kMax>(dsts, m, srcs, n, count, divisor);
    case ReduceOp::kProduct:
      return fanIn<L, ops::OpKind::kProduct>(dsts, m, srcs, n, count, divisor);
  }
}

void fanInAny(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
              DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return fanInFor<ops::PlainLanes<float>>(dsts, m, srcs, n, count, op);
    case DataType::kFloat64:
      return fanInFor<ops::PlainLanes<double>>(dsts, m, srcs, n, count, op);
    case DataType::kFloat16: return fanInFor<ops::HalfLanes>(dsts, m, srcs, n, count, op);
    case DataType::kBFloat16:
      return fanInFor<ops::BFloat16Lanes>(dsts, m, srcs, n, count, op);
    case DataType::kInt32:
      return fanInFor<ops::PlainLanes<int32_t>>(dsts, m, srcs, n, count, op);
    case DataType::kInt64:
      return fanInFor<ops::PlainLanes<int64_t>>(dsts, m, srcs, n, count, op);
    case DataType::kUInt8:
      return fanInFor<ops::PlainLanes<uint8_t>>(dsts, m, srcs, n, count, op);
  }
}

}  // namespace

HostStream::HostStream(int jitterMicros) : jitter_(jitterMicros) {
  worker_ = std::thread([this] { run(); });
}

HostStream::~HostStream() {
  cancelled_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HostStream::enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  cv_.notify_all();
}

void HostStream::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = enqueued_;
  cv_.wait(lock, [&] { return finished_ >= target || stopping_; });
}

bool HostStream::drainFor(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = enqueued_;
  return cv_.wait_for(lock, limit, [&] { return finished_ >= target || stopping_; });
}

void HostStream::run() {
  std::minstd_rand random(static_cast<unsigned>(getpid()));
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    if (jitter_ > 0 && !cancelled_.load())
      std::this_thread::sleep_for(std::chrono::microseconds(random() % jitter_));
    work();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++finished_;
    }
    cv_.notify_all();
  }
}

IpcHostDevice::~IpcHostDevice() {
  for (auto& [p, bytes] : deferred_) munmap(p, bytes);
  for (auto& [base, bytes] : opened_) munmap(base, bytes);
  for (auto& [event, name] : events_) {
    munmap(event, sizeof(SharedEvent));
    shm_unlink(name.c_str());
  }
  for (auto& [event, unused] : openedEvents_) munmap(event, sizeof(SharedEvent));
  for (auto& [base, block] : blocks_) {
    if (block.name.empty()) {
      std::free(const_cast<uint8_t*>(base));
    } else {
      munmap(const_cast<uint8_t*>(base), block.bytes);
      shm_unlink(block.name.c_str());
    }
  }
}

void* IpcHostDevice::mapSegment(const std::string& name, bool create, size_t bytes) {
  const int fd =
      shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  KOLO_SYSCHECK(fd, "host double: shm_open(" << name << ")");
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    KOLO_SYSCHECK(-1, "host double: ftruncate(" << name << ")");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) KOLO_SYSCHECK(-1, "host double: mmap(" << name << ")");
  return p;
}

void* IpcHostDevice::allocate(size_t bytes) {
  Block b;
  b.id = ++nextId_;
  b.name = segmentName("m", b.id);
  b.bytes = bytes < 1 ? 1 : bytes;
  void* p = mapSegment(b.name, true, b.bytes);
  blocks_[static_cast<const uint8_t*>(p)] = b;
  return p;
}

void* IpcHostDevice::allocateUnexportable(size_t bytes) {
  Block b;
  b.id = ++nextId_;
  b.bytes = bytes < 1 ? 1 : bytes;
  void* p = std::malloc(b.bytes);
  KOLO_CHECK(p != nullptr);
  blocks_[static_cast<const uint8_t*>(p)] = b;
  return p;
}

bool IpcHostDevice::settle() {
  bool all = true;
  for (HostStream* s : streams_) all = s->drainFor(std::chrono::milliseconds(200)) && all;
  return all;
}

HostStream* IpcHostDevice::seen(void* stream) {
  HostStream* s = asStream(stream);
  streams_.insert(s);
  return s;
}

void IpcHostDevice::release(void* p) noexcept {
  auto it = blocks_.find(static_cast<const uint8_t*>(p));
  if (it == blocks_.end()) return;
  const bool idle = settle();
  if (it->second.name.empty()) {
    if (idle) std::free(p);  // else leaked: a stuck stream may still write it
  } else {
    shm_unlink(it->second.name.c_str());
    if (idle) {
      munmap(p, it->second.bytes);
    } else {
      deferred_.emplace_back(p, it->second.bytes);
    }
  }
  blocks_.erase(it);
}

bool IpcHostDevice::locate(const void* p, cuda_ipc::Allocation* out, std::string* why) {
  const auto* q = static_cast<const uint8_t*>(p);
  auto it = blocks_.upper_bound(q);
  if (it != blocks_.begin()) {
    --it;
    if (q < it->first + it->second.bytes) {
      out->base = it->first;
      out->bytes = it->second.bytes;
      out->id = it->second.id;
      return true;
    }
  }
  *why = "not memory of the host double's device";
  return false;
}

bool IpcHostDevice::exportMemory(const void* base, cuda_ipc::Handle* out,
                                 std::string* why) {
  auto it = blocks_.find(static_cast<const uint8_t*>(base));
  if (it == blocks_.end() || it->second.name.empty()) {
    *why = "host double: memory that cannot be exported (as a VMM allocation)";
    return false;
  }
  *out = nameHandle(it->second.name);
  return true;
}

void* IpcHostDevice::openMemory(const cuda_ipc::Handle& handle) {
  const std::string name = handleName(handle);
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  KOLO_SYSCHECK(fd, "host double: shm_open(" << name << ") of a peer's buffer");
  struct stat st {};
  fstat(fd, &st);
  close(fd);
  void* p = mapSegment(name, false, static_cast<size_t>(st.st_size));
  opened_[p] = static_cast<size_t>(st.st_size);
  return p;
}

void IpcHostDevice::closeMemory(void* base) noexcept {
  auto it = opened_.find(base);
  if (it == opened_.end()) return;
  if (settle()) {
    munmap(base, it->second);
  } else {
    deferred_.emplace_back(base, it->second);
  }
  opened_.erase(it);
}

cuda_ipc::IpcDevice::Event IpcHostDevice::createEvent() {
  const std::string name = segmentName("e", ++nextId_);
  void* p = mapSegment(name, true, sizeof(SharedEvent));
  new (p) SharedEvent{{0}, {0}};
  events_[p] = name;
  return p;
}

cuda_ipc::Handle IpcHostDevice::exportEvent(Event event) {
  return nameHandle(events_.at(event));
}

cuda_ipc::IpcDevice::Event IpcHostDevice::openEvent(const cuda_ipc::Handle& handle) {
  void* p = mapSegment(handleName(handle), false, sizeof(SharedEvent));
  openedEvents_[p] = true;
  return p;
}

void IpcHostDevice::destroyEvent(Event event) noexcept {
  const bool idle = settle();
  if (auto it = events_.find(event); it != events_.end()) {
    shm_unlink(it->second.c_str());
    events_.erase(it);
  } else if (openedEvents_.erase(event) == 0) {
    return;
  }
  if (idle) {
    munmap(event, sizeof(SharedEvent));
  } else {
    deferred_.emplace_back(event, sizeof(SharedEvent));
  }
}

void IpcHostDevice::record(Event event, void* stream) {
  SharedEvent* e = asEvent(event);
  const uint64_t v = e->recorded.fetch_add(1) + 1;
  seen(stream)->enqueue([e, v] { e->completed.store(v); });
}

void IpcHostDevice::streamWait(void* stream, Event event) {
  SharedEvent* e = asEvent(event);
  const uint64_t target = e->recorded.load();
  HostStream* s = seen(stream);
  s->enqueue([e, target, s] {
    while (e->completed.load() < target && !s->cancelled())
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  });
}

bool IpcHostDevice::query(Event event) {
  SharedEvent* e = asEvent(event);
  return e->completed.load() >= e->recorded.load();
}

void IpcHostDevice::copy(void* dst, const void* src, size_t bytes, void* stream) {
  seen(stream)->enqueue([=] { std::memmove(dst, src, bytes); });
}

void IpcHostDevice::reduce(void* const* dsts, int m, const void* const* srcs, int n,
                           size_t count, DataType dtype, ReduceOp op, void* stream) {
  std::vector<void*> d(dsts, dsts + m);
  std::vector<const void*> s(srcs, srcs + n);
  seen(stream)->enqueue([d, s, count, dtype, op] {
    fanInAny(d.data(), static_cast<int>(d.size()), s.data(), static_cast<int>(s.size()),
             count, dtype, op);
  });
}

void removeHostDeviceSegments(int pid) {
  const std::string prefix = "kolo-ipcdbl-" + std::to_string(pid) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
      names.push_back(e->d_name);
  }
  closedir(dir);
  for (const auto& n : names) shm_unlink(("/" + n).c_str());
}

}  // namespace kolo::test
