// Tests of the checks on shared-memory segments (support/
// shm_transport_fixture.h runs ranks as threads): a transport's or a
// group's segment that others may write is refused by name, and a group
// with another chunk size is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store.h"
#include "support/shm_transport_fixture.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_transport.h"

namespace kolo::transport::shm_fixture {
namespace {

// A store through which rank 1 publishes its segment only after making it
// writable by everyone, as a segment that a stranger created would be.
class LoosenSegmentStore : public rendezvous::Store {
 public:
  explicit LoosenSegmentStore(rendezvous::Store& base) : base_(base) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    if (key.find("/seg/") != std::string::npos) {
      const std::string entry(value.begin(), value.end());
      const std::string name = entry.substr(entry.find(' ') + 1);
      int fd = shm_open(name.c_str(), O_RDWR, 0);
      if (fd >= 0) {
        if (fchmod(fd, 0666) != 0) ADD_FAILURE() << "fchmod " << name;
        close(fd);
      }
    }
    base_.set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override {
    return base_.get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_.add(key, delta);
  }

 private:
  rendezvous::Store& base_;
};

TEST_F(ShmTransportTest, ASegmentOthersMayWriteIsRefusedByName) {
  server_ = TcpStoreServer::start("127.0.0.1", 0);
  std::exception_ptr errors[2];
  std::thread peer([&] {
    try {
      auto store = TcpStore::connect("127.0.0.1", server_->port(), 10s);
      LoosenSegmentStore loose(*store);
      auto o = optionsFor(1, 2, job_);
      o.connectTimeout = 1s;  // rank 0 refuses our segment and leaves
      ShmTransport::create(o, loose);
    } catch (...) {
      errors[1] = std::current_exception();
    }
  });
  try {
    auto store = TcpStore::connect("127.0.0.1", server_->port(), 10s);
    auto o = optionsFor(0, 2, job_);
    o.connectTimeout = 10s;
    ShmTransport::create(o, *store);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  peer.join();
  ASSERT_TRUE(errors[0]) << "rank 0 mapped a segment that others may write";
  try {
    std::rethrow_exception(errors[0]);
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("segment of rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("mode 0666"), std::string::npos) << what;
    EXPECT_NE(what.find("kolo-" + job_), std::string::npos) << what;
  }
  EXPECT_TRUE(errors[1]);  // rank 1 times out at the set-up barrier
}

// The group segment (collectives' staging) named in the store is mapped
// only when it is this user's and nobody else may write it.
TEST_F(ShmTransportTest, AGroupSegmentOthersMayWriteIsRefusedByName) {
  server_ = TcpStoreServer::start("127.0.0.1", 0);
  auto store = TcpStore::connect("127.0.0.1", server_->port(), 10s);
  const std::string segment = "/kolo-" + job_ + "-stranger";
  int fd = shm_open(segment.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);
  ASSERT_EQ(ftruncate(fd, 16 * kMiB), 0);
  close(fd);
  const std::string name = "group-" + job_;
  store->add("shmgroup/" + name + "/generation/0", 1);  // local rank 0 published:
  store->setString("shmgroup/" + name + "/g1/name", segment);
  shm::ShmGroup::Options o;
  o.localRank = 1;
  o.localSize = 2;
  o.globalRanks = {0, 1};
  o.slotBytes = 4096;
  o.timeout = 2s;
  o.name = name;
  try {
    shm::ShmGroup::create(o, *store);
    ADD_FAILURE() << "local rank 1 mapped a segment that others may write";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find(segment), std::string::npos) << what;
    EXPECT_NE(what.find("mode 0666"), std::string::npos) << what;
  }
  shm_unlink(segment.c_str());
}

// Local ranks whose staging slots differ (KOLO_SHM_CHUNK_BYTES set apart)
// would index each other's areas wrongly: the one that attaches refuses,
// naming both sizes and the setting.
TEST_F(ShmTransportTest, AGroupWithAnotherChunkSizeIsRefused) {
  server_ = TcpStoreServer::start("127.0.0.1", 0);
  auto store0 = TcpStore::connect("127.0.0.1", server_->port(), 10s);
  auto store1 = TcpStore::connect("127.0.0.1", server_->port(), 10s);
  auto options = [&](int localRank, size_t slotBytes) {
    shm::ShmGroup::Options o;
    o.localRank = localRank;
    o.localSize = 2;
    o.globalRanks = {0, 1};
    o.slotBytes = slotBytes;
    o.timeout = 2s;
    o.name = "chunks-" + job_;
    return o;
  };
  // Local rank 0 makes the segment, then waits (in vain) for rank 1.
  std::thread first(
      [&] { EXPECT_THROW(shm::ShmGroup::create(options(0, 4096), *store0), Error); });
  try {
    shm::ShmGroup::create(options(1, 8192), *store1);
    ADD_FAILURE() << "local rank 1 attached with another staging slot size";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kMismatch) << what;
    EXPECT_NE(what.find("4096"), std::string::npos) << what;
    EXPECT_NE(what.find("8192"), std::string::npos) << what;
    EXPECT_NE(what.find("KOLO_SHM_CHUNK_BYTES"), std::string::npos) << what;
  }
  first.join();
}

}  // namespace
}  // namespace kolo::transport::shm_fixture
