// An in-process Transport for tests: ranks are threads of one process and
// messages are copied through a shared mailbox (MemHub). Sends are eager:
// the data is copied into the receiver's mailbox at once and the send is
// done. Used where a test wants many worlds cheaply or no sockets; the
// collective grid also runs over the real tcp and shm transports.
//
// Thread safety: each MemTransport is used by one thread at a time; the hub
// is shared and locked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "common/check.h"
#include "transport/transport.h"

namespace kolo::test {

class MemHub {
 public:
  explicit MemHub(int size) : inboxes_(size) {}

  struct Message {
    int src;
    transport::Tag tag;
    std::vector<uint8_t> data;
  };

  void post(int dst, Message m) {
    std::lock_guard<std::mutex> lock(mu_);
    inboxes_[dst].push_back(std::move(m));
    cv_.notify_all();
  }

  // Takes the first message for dst from src (or any) with tag, if any.
  bool take(int dst, int src, transport::Tag tag, Message* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& box = inboxes_[dst];
    for (auto it = box.begin(); it != box.end(); ++it) {
      if (it->tag == tag && (src == transport::kAnySource || it->src == src)) {
        *out = std::move(*it);
        box.erase(it);
        return true;
      }
    }
    return false;
  }

  void waitForMail(int dst, std::chrono::microseconds max) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, max, [&] { return !inboxes_[dst].empty(); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Message>> inboxes_;
};

class MemTransport : public transport::Transport {
 public:
  MemTransport(std::shared_ptr<MemHub> hub, int rank, int size,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(20000))
      : hub_(std::move(hub)), rank_(rank), size_(size), timeout_(timeout) {
    spin_ = std::chrono::microseconds(5);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  transport::RequestPtr isend(int dst, transport::Tag tag, const void* data,
                              size_t bytes) override {
    checkPeer(dst);
    auto req = std::make_shared<transport::Request>(transport::Request::Kind::kSend, dst,
                                                    tag, bytes);
    const auto* p = static_cast<const uint8_t*>(data);
    hub_->post(dst, {rank_, tag, std::vector<uint8_t>(p, p + bytes)});
    req->complete();
    return req;
  }

  transport::RequestPtr irecv(int src, transport::Tag tag, void* data,
                              size_t bytes) override {
    if (src != transport::kAnySource) checkPeer(src);
    auto req = std::make_shared<transport::Request>(transport::Request::Kind::kRecv, src,
                                                    tag, bytes);
    posted_.push_back({req, static_cast<uint8_t*>(data)});
    return req;
  }

  bool progress() override {
    bool moved = false;
    for (auto it = posted_.begin(); it != posted_.end();) {
      MemHub::Message m;
      auto& req = *it->request;
      if (!hub_->take(rank_, req.peer, req.tag, &m)) {
        ++it;
        continue;
      }
      req.peer = m.src;
      if (m.data.size() != req.bytes) {
        req.fail(std::make_exception_ptr(Error(
            ErrorCode::kMismatch,
            "rank " + std::to_string(rank_) + " expected " + std::to_string(req.bytes) +
                " bytes from rank " + std::to_string(m.src) + " (tag " +
                std::to_string(req.tag) + ") but got " + std::to_string(m.data.size()),
            m.src)));
      } else {
        if (!m.data.empty()) std::memcpy(it->data, m.data.data(), m.data.size());
        req.complete();
      }
      it = posted_.erase(it);
      moved = true;
    }
    return moved;
  }

  void idle(std::chrono::microseconds max) override { hub_->waitForMail(rank_, max); }

 private:
  struct Posted {
    transport::RequestPtr request;
    uint8_t* data;
  };

  void checkPeer(int peer) const {
    if (peer < 0 || peer >= size_) {
      KOLO_THROW(ErrorCode::kInvalidArgument, "rank " << rank_ << ": peer " << peer
                                                      << " out of range [0, " << size_
                                                      << ")");
    }
  }

  std::shared_ptr<MemHub> hub_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::list<Posted> posted_;
};

}  // namespace kolo::test
