// CommunicatorImpl's point-to-point entry points (api/point_to_point.h).
//
// Every use of the engine (posting, waiting, testing) runs under the
// operation queue, like a collective, so the transport stays with one
// thread at a time. Posting never waits for a peer; a wait runs on the
// waiting thread and drives the transport until its operation ends, and
// with it every other pending message. Failures go through guarded(): a
// lost or silent peer breaks the communicator.
#include <limits>

#include "api/communicator_impl.h"
#include "common/check.h"

namespace kolo::api {

class CommunicatorImpl::PointToPointWork : public Work {
 public:
  PointToPointWork(CommunicatorImpl* comm, PointToPoint::OpPtr op)
      : comm_(comm), alive_(comm->alive_), op_(std::move(op)) {}

  void wait() override {
    if (!op_->done()) {
      auto alive = alive_.lock();
      if (alive) {
        CommunicatorImpl* comm = comm_;
        comm->queue_.runBlocking(
            [&] { comm->guarded([&] { comm->pointToPointEngine().wait(*op_); }); });
      }
    }
    if (!op_->done()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "point-to-point: the communicator was destroyed before the message "
                 "completed");
    }
    if (op_->error()) std::rethrow_exception(op_->error());
  }

  bool test() override {
    if (op_->done()) return true;
    if (auto alive = alive_.lock()) {
      CommunicatorImpl* comm = comm_;
      comm->queue_.tryRunBlocking([&] { comm->pointToPointEngine().test(*op_); });
    }
    return op_->done();
  }

 private:
  CommunicatorImpl* comm_;
  std::weak_ptr<const bool> alive_;  // the communicator's alive_: expired once gone
  PointToPoint::OpPtr op_;
};

PointToPoint& CommunicatorImpl::pointToPointEngine() {
  if (!p2p_) p2p_ = std::make_unique<PointToPoint>(*world_);
  return *p2p_;
}

void CommunicatorImpl::checkPeer(int peer, int tag, const void* buffer, size_t count,
                                 DataType dtype, const char* what) const {
  if (!isValid(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown dtype value " << static_cast<int>(dtype));
  }
  if (peer < 0 || peer >= size()) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << " on rank " << rank() << ": peer "
                                                 << peer << " is not a rank of a job of "
                                                 << size());
  }
  if (peer == rank()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << " on rank " << rank() << ": the peer is this rank itself");
  }
  if (tag < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << " on rank " << rank() << ": negative tag " << tag);
  }
  if (count > (size_t{1} << 62) / elementSize(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": count " << count << " overflows the addressable size");
  }
  if (buffer == nullptr && count > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << " on rank " << rank() << ": null buffer but count " << count);
  }
}

std::shared_ptr<Work> CommunicatorImpl::isendNotify(
    const SendOptions& o, std::function<void(std::exception_ptr)> onDone) {
  checkPeer(o.peer, o.tag, o.buffer, o.count, o.dtype, "send");
  PointToPoint::OpPtr op;
  queue_.runBlocking([&] {
    guarded([&] { op = pointToPointEngine().postSend(o, std::move(onDone)); });
  });
  return std::make_shared<PointToPointWork>(this, std::move(op));
}

std::shared_ptr<Work> CommunicatorImpl::irecvNotify(
    const RecvOptions& o, std::function<void(std::exception_ptr)> onDone) {
  checkPeer(o.peer, o.tag, o.buffer, o.count, o.dtype, "recv");
  PointToPoint::OpPtr op;
  queue_.runBlocking([&] {
    guarded([&] { op = pointToPointEngine().postRecv(o, std::move(onDone)); });
  });
  return std::make_shared<PointToPointWork>(this, std::move(op));
}

std::shared_ptr<Work> CommunicatorImpl::isend(const SendOptions& o) {
  return isendNotify(o, nullptr);
}

std::shared_ptr<Work> CommunicatorImpl::irecv(const RecvOptions& o) {
  return irecvNotify(o, nullptr);
}

void CommunicatorImpl::send(const SendOptions& o) {
  isend(o)->wait();
}

void CommunicatorImpl::recv(const RecvOptions& o) {
  irecv(o)->wait();
}

}  // namespace kolo::api
