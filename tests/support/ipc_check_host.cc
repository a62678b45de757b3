// hostCheckMemory and the helpers of ipc_check_memory.h (every build).
#include <stdlib.h>

#include <cstring>

#include "collectives/half_bits.h"
#include "support/ipc_check_memory.h"
#include "support/ipc_host_device.h"

namespace kolo::test {
namespace {

class HostCheckMemory final : public CheckMemory {
 public:
  HostCheckMemory() : device_(std::make_shared<IpcHostDevice>()) {}
  ~HostCheckMemory() override { freeAll(); }

  int device() const override { return 0; }
  void* alloc(size_t bytes, bool exportable) override {
    void* p =
        exportable ? device_->allocate(bytes) : device_->allocateUnexportable(bytes);
    live_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    stream_.drain();
    std::memcpy(dst, src, bytes);
  }
  std::vector<uint8_t> download(const void* src, size_t bytes) override {
    stream_.drain();
    const auto* p = static_cast<const uint8_t*>(src);
    return std::vector<uint8_t>(p, p + bytes);
  }
  void* stream() override { return &stream_; }
  void freeAll() override {
    stream_.drain();
    for (void* p : live_) device_->release(p);
    live_.clear();
  }
  std::unique_ptr<collectives::cuda::DeviceCollectives> makeCollectives(
      const collectives::cuda::IpcOptions& options, rendezvous::Store& store) override {
    return collectives::cuda::makeIpcCollectives(options, store, device_);
  }

 private:
  std::shared_ptr<IpcHostDevice> device_;
  HostStream stream_;
  std::vector<void*> live_;
};

}  // namespace

std::unique_ptr<CheckMemory> hostCheckMemory() {
  return std::make_unique<HostCheckMemory>();
}

std::vector<uint8_t> smallValues(DataType dtype, size_t count, int rank, int salt) {
  const size_t es = elementSize(dtype);
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>((i * 7 + rank * 3 + salt) % 9) - 4;
    uint8_t* p = out.data() + i * es;
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (dtype) {
      case DataType::kFloat32: put(v * 0.5f); break;
      case DataType::kFloat64: put(v * 0.25); break;
      case DataType::kFloat16: put(collectives::floatToHalfBits(v * 0.5f)); break;
      case DataType::kBFloat16: put(collectives::floatToBfloat16Bits(v * 0.5f)); break;
      case DataType::kInt32: put(static_cast<int32_t>(v * 1000)); break;
      case DataType::kInt64: put(static_cast<int64_t>(v) * 100000000000ll); break;
      case DataType::kUInt8: put(static_cast<uint8_t>(v + 4)); break;
    }
  }
  return out;
}

std::string privateTempDir() {
  char tmpl[] = "/tmp/kolo-ipc-check-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir == nullptr ? std::string("/tmp") : std::string(dir);
}

}  // namespace kolo::test
