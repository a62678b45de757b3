#include "api/point_to_point.h"

#include <cstring>
#include <sstream>

#include "common/byte_codec.h"
#include "common/check.h"

namespace kolo::api {
namespace {

using transport::Request;

constexpr uint32_t kMagic = 0x6b703270;  // "kp2p"
constexpr size_t kHeaderBytes = 32;

// Header: magic u32, channel u32, tag i32, dtype u8 (3 bytes padding),
// count u64, 8 bytes reserved; host order (both ends are one build).
void encodeHeader(uint8_t* p, uint32_t channel, int tag, DataType dtype, uint64_t count) {
  std::memset(p, 0, kHeaderBytes);
  storeBytes<uint32_t>(p, kMagic, kHostOrder);
  storeBytes<uint32_t>(p + 4, channel, kHostOrder);
  storeBytes<int32_t>(p + 8, tag, kHostOrder);
  p[12] = static_cast<uint8_t>(dtype);
  storeBytes<uint64_t>(p + 16, count, kHostOrder);
}

std::string describe(DataType dtype, uint64_t count) {
  std::ostringstream os;
  os << count << " " << toString(dtype);
  return os.str();
}

}  // namespace

void PointToPoint::Op::finish(std::exception_ptr error) {
  error_ = std::move(error);
  done_.store(true, std::memory_order_release);
  if (onDone) {
    auto fn = std::move(onDone);
    onDone = nullptr;
    fn(error_);
  }
}

PointToPoint::PointToPoint(transport::Transport& transport)
    : transport_(transport), sources_(transport.size()) {}

PointToPoint::OpPtr PointToPoint::postSend(
    const SendOptions& o, std::function<void(std::exception_ptr)> onDone) {
  auto op = std::make_shared<Op>();
  op->send = true;
  op->channel = o.channel;
  op->peer = o.peer;
  op->tag = o.tag;
  op->dtype = o.dtype;
  op->count = o.count;
  op->data = const_cast<void*>(o.buffer);
  op->onDone = std::move(onDone);
  encodeHeader(op->header, o.channel, o.tag, o.dtype, o.count);
  ++pending_;
  try {
    op->headerRequest =
        transport_.isend(o.peer, kPointToPointTag, op->header, kHeaderBytes);
    const size_t bytes = o.count * elementSize(o.dtype);
    if (bytes > 0) {
      op->payloadRequest = transport_.isend(o.peer, kPointToPointTag, o.buffer, bytes);
    }
  } catch (...) {
    ended(*op, std::current_exception());
    throw;
  }
  sends_.push_back(op);
  finishSend(*op);
  return op;
}

PointToPoint::OpPtr PointToPoint::postRecv(
    const RecvOptions& o, std::function<void(std::exception_ptr)> onDone) {
  auto op = std::make_shared<Op>();
  op->channel = o.channel;
  op->peer = o.peer;
  op->tag = o.tag;
  op->dtype = o.dtype;
  op->count = o.count;
  op->data = o.buffer;
  op->onDone = std::move(onDone);
  ++pending_;
  // No unexpected message matches a posted receive (each is matched on
  // arrival), so the new one may take the first of its tag at once.
  Source& s = sources_[o.peer];
  if (takeUnexpected(s, *op)) return op;
  s.posted.push_back(op);
  try {
    advanceSource(o.peer);
  } catch (...) {
    // The transport broke: this receive fails with it, like every other.
    failAll(std::current_exception());
    throw;
  }
  return op;
}

void PointToPoint::ended(Op& op, std::exception_ptr error) {
  if (op.done()) return;
  --pending_;
  op.finish(std::move(error));
}

void PointToPoint::finishSend(Op& op) {
  if (op.done()) return;
  for (const auto& r : {op.headerRequest, op.payloadRequest}) {
    if (r && r->done() && r->error) return ended(op, r->error);
  }
  const bool headerDone = op.headerRequest->done();
  const bool payloadDone = !op.payloadRequest || op.payloadRequest->done();
  if (headerDone && payloadDone) ended(op, nullptr);
}

std::exception_ptr PointToPoint::mismatch(const Op& op, int rank, DataType dtype,
                                          uint64_t count) const {
  std::ostringstream os;
  os << "point-to-point: rank " << transport_.globalRank(transport_.rank())
     << " posted a receive of " << describe(op.dtype, op.count) << " from rank "
     << transport_.globalRank(rank) << " (tag " << op.tag << "), but rank "
     << transport_.globalRank(rank) << " sent " << describe(dtype, count);
  return std::make_exception_ptr(
      Error(ErrorCode::kMismatch, os.str(), transport_.globalRank(rank)));
}

bool PointToPoint::takeUnexpected(Source& s, Op& op) {
  for (auto it = s.unexpected.begin(); it != s.unexpected.end(); ++it) {
    if (it->channel != op.channel || it->tag != op.tag) continue;
    if (it->dtype != op.dtype || it->count != op.count) {
      ended(op, mismatch(op, op.peer, it->dtype, it->count));
    } else {
      if (!it->payload.empty())
        std::memcpy(op.data, it->payload.data(), it->payload.size());
      ended(op, nullptr);
    }
    s.unexpected.erase(it);
    return true;
  }
  return false;
}

// A header from `rank`: choose where its payload goes (see the header).
void PointToPoint::onHeader(int rank, Source& s) {
  ByteReader r(s.headerBytes, kHeaderBytes, kHostOrder);
  const uint32_t magic = r.get<uint32_t>();
  Unexpected m;
  m.channel = r.get<uint32_t>();
  m.tag = r.get<int32_t>();
  const uint8_t dtype = r.get<uint8_t>();
  r.bytes(3);
  m.count = r.get<uint64_t>();
  if (magic != kMagic || !isValid(static_cast<DataType>(dtype))) {
    KOLO_THROW_PEER(ErrorCode::kInternal, transport_.globalRank(rank),
                    "point-to-point: a malformed message header from rank "
                        << transport_.globalRank(rank));
  }
  m.dtype = static_cast<DataType>(dtype);
  s.header.reset();
  const size_t bytes = m.count * elementSize(m.dtype);
  s.target.reset();
  s.mismatch = nullptr;
  for (auto it = s.posted.begin(); it != s.posted.end(); ++it) {
    Op& op = **it;
    if (op.channel != m.channel || op.tag != m.tag) continue;
    s.target = *it;
    s.posted.erase(it);
    if (op.dtype != m.dtype || op.count != m.count) {
      s.mismatch = mismatch(op, rank, m.dtype, m.count);
    }
    break;
  }
  if (bytes == 0) {
    s.incoming = std::move(m);
    return onPayload(s);
  }
  void* into = nullptr;
  if (s.target && !s.mismatch) {
    into = s.target->data;
  } else {
    m.payload.resize(bytes);  // an unexpected message, or scratch to drain
    into = m.payload.data();
  }
  s.incoming = std::move(m);
  s.payload = transport_.irecv(rank, kPointToPointTag, into, bytes);
}

void PointToPoint::onPayload(Source& s) {
  if (s.payload && s.payload->error) std::rethrow_exception(s.payload->error);
  s.payload.reset();
  if (s.target) {
    auto target = std::move(s.target);
    s.target.reset();
    ended(*target, s.mismatch);
    s.mismatch = nullptr;
    s.incoming = Unexpected();
    return;
  }
  // A receive posted while the payload was on its way may want it.
  s.unexpected.push_back(std::move(s.incoming));
  s.incoming = Unexpected();
  for (auto it = s.posted.begin(); it != s.posted.end(); ++it) {
    if (takeUnexpected(s, **it)) {
      s.posted.erase(it);
      break;
    }
  }
}

// Keeps one header (or payload) receive posted from `rank` while a receive
// from it is unmatched.
void PointToPoint::advanceSource(int rank) {
  Source& s = sources_[rank];
  for (;;) {
    if (s.payload) {
      if (!s.payload->done()) return;
      onPayload(s);
      continue;
    }
    if (s.header) {
      if (!s.header->done()) return;
      if (s.header->error) std::rethrow_exception(s.header->error);
      onHeader(rank, s);
      continue;
    }
    if (s.posted.empty()) return;
    s.header = transport_.irecv(rank, kPointToPointTag, s.headerBytes, kHeaderBytes);
  }
}

void PointToPoint::advance() {
  transport_.progress();
  for (auto& op : sends_) finishSend(*op);
  std::erase_if(sends_, [](const OpPtr& op) { return op->done(); });
  for (int r = 0; r < static_cast<int>(sources_.size()); ++r) advanceSource(r);
}

Request* PointToPoint::blocker(Op& op) {
  if (op.done()) return nullptr;
  if (op.send) {
    if (!op.headerRequest->done()) return op.headerRequest.get();
    return op.payloadRequest.get();
  }
  Source& s = sources_[op.peer];
  if (s.payload) return s.payload.get();
  return s.header.get();
}

void PointToPoint::wait(Op& op) {
  try {
    while (!op.done()) {
      advance();
      Request* r = blocker(op);
      if (r != nullptr) transport_.wait(*r);  // throws a lost or silent peer
    }
  } catch (const Error& e) {
    std::exception_ptr error = std::current_exception();
    if (e.code() == ErrorCode::kTimeout && e.peer() == transport_.globalRank(op.peer)) {
      error = timedOut(op);
    }
    failAll(error);
    std::rethrow_exception(error);
  } catch (...) {
    failAll(std::current_exception());
    throw;
  }
  if (op.error()) std::rethrow_exception(op.error());
}

// The transport's timeout names its own request (a header's 32 bytes, the
// internal tag); this one names the message the caller waits for.
std::exception_ptr PointToPoint::timedOut(const Op& op) const {
  const int peer = transport_.globalRank(op.peer);
  std::ostringstream os;
  os << "point-to-point: rank " << transport_.globalRank(transport_.rank())
     << " timed out after " << transport_.timeout().count() / 1000.0
     << " s waiting for rank " << peer << " to " << (op.send ? "receive " : "send ")
     << describe(op.dtype, op.count) << " (tag " << op.tag
     << "); the peer is alive but not answering (KOLO_TIMEOUT)";
  return std::make_exception_ptr(Error(ErrorCode::kTimeout, os.str(), peer));
}

bool PointToPoint::test(Op& op) {
  if (op.done()) return true;
  try {
    advance();
  } catch (...) {
    failAll(std::current_exception());
  }
  return op.done();
}

void PointToPoint::failAll(std::exception_ptr error) {
  for (auto& op : sends_) ended(*op, error);
  sends_.clear();
  for (Source& s : sources_) {
    for (auto& op : s.posted) ended(*op, error);
    s.posted.clear();
    if (s.target) ended(*s.target, error);
    s.target.reset();
  }
}

}  // namespace kolo::api
