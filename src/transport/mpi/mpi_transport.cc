#include "transport/mpi/mpi_transport.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/byte_codec.h"
#include "common/check.h"
#include "common/heartbeat_schedule.h"
#include "common/logging.h"
#include "transport/mpi/mpi_runtime.h"

namespace kolo::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Tags of kolo's collectives need 16 bits for the step; 8 more bits keep
// 256 operations apart, far more than ever travel at once.
constexpr int kMinTagBits = 24;

// Abort notices: AbortNotice then the error message, on the control
// communicator with tag 0.
constexpr int kAbortTag = 0;
// Heartbeats: empty messages on the control communicator with tag 1.
constexpr int kHeartbeatTag = 1;
// Point-to-point messages of the public API (kUserMessageBit) buffered by
// one progress() call at most: the rest wait in MPI for the next call.
constexpr int kMaxBufferedPerProgress = 64;
constexpr size_t kMaxAbortBytes = 4096;
struct AbortNotice {
  int32_t code;
  int32_t blamed;  // the rank the error names, -1 for none
};

// idle() sleeps at most this long: MPI moves data only inside MPI calls,
// so long sleeps would stall a large transfer.
constexpr std::chrono::microseconds kMaxIdle{50};

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(len));
}

int errorClass(int code) {
  int cls = code;
  MPI_Error_class(code, &cls);
  return cls;
}

}  // namespace

class MpiTransport::Impl {
 public:
  Impl(const Options& o, MpiRuntime& rt) : options_(o), rt_(rt) {}
  ~Impl();

  void setUp();
  RequestPtr post(Request::Kind kind, int peer, Tag tag, void* data, size_t bytes);
  bool progress();
  void idle(std::chrono::microseconds max);
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const;
  void abort(const Error& cause);
  int mpiTag(Tag tag) const { return static_cast<int>(tag & tagMask_); }

  const Options options_;
  int tagBits_ = 0;

 private:
  // One posted isend/irecv: its pieces are MPI requests in requests_.
  struct Pending {
    RequestPtr request;
    void* data;
    int piecesLeft;
    bool finished = false;  // done or failed; pieces still active are cancelled
  };
  struct Piece {
    std::shared_ptr<Pending> owner;
    int index;  // piece number within the message
  };

  size_t pieceBytes(size_t total, int index) const {
    const size_t full = total / options_.maxPieceBytes;
    return static_cast<size_t>(index) < full ? options_.maxPieceBytes
                                             : total % options_.maxPieceBytes;
  }
  void checkPeer(int peer, const char* what) const;
  void checkUsableLocked();
  [[noreturn]] void breakWith(std::exception_ptr e);
  bool pollControlLocked();
  void sendHeartbeatsLocked();
  bool linked(int peer) const {
    return peer != options_.rank && (options_.connect.empty() || options_.connect[peer]);
  }
  void finishPiece(const Piece& piece, const MPI_Status& status, int error);
  void failRequest(Pending& p, std::exception_ptr e);
  // The error of a receive whose piece `index` came with `count` bytes
  // (truncated: MPI cut it there) from `source`.
  std::exception_ptr sizeMismatch(const Request& r, int source, int index, size_t count,
                                  bool truncated) const;
  // Public API messages (see the header): bufferUserLocked() takes those
  // that no posted receive matched; takeBufferedLocked() serves piece
  // `index` of receive `p` (MPI tag `tag`) from the buffer, true when the
  // buffer held it.
  bool bufferUserLocked();
  bool takeBufferedLocked(Pending& p, int index, int tag, char* at);

  MpiRuntime& rt_;
  MPI_Comm data_ = MPI_COMM_NULL;     // messages
  MPI_Comm control_ = MPI_COMM_NULL;  // abort notices, heartbeats
  MPI_Comm user_ = MPI_COMM_NULL;     // the public API's messages
  uint64_t tagMask_ = 0;

  // Active MPI requests and, at the same index, the piece each carries.
  std::vector<MPI_Request> requests_;
  std::vector<Piece> pieces_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;

  MPI_Request controlRequest_ = MPI_REQUEST_NULL;
  MPI_Request heartbeatRequest_ = MPI_REQUEST_NULL;
  char heartbeatBuffer_ = 0;
  std::vector<MPI_Request> heartbeatSends_;
  // When heartbeats go out, when each rank was last heard from (data or
  // heartbeat).
  HeartbeatSchedule heartbeat_{options_.timeout, options_.size};
  std::vector<char> controlBuffer_ = std::vector<char>(kMaxAbortBytes);
  // Abort notices sent; a buffer whose send never completed is leaked on
  // purpose (MPI may still read it).
  std::vector<char>* abortFrame_ = nullptr;
  std::vector<MPI_Request> abortRequests_;

  // Public API messages that arrived before their receive, in arrival
  // order (each one MPI message: a whole message or one of its pieces).
  struct Buffered {
    int source;
    int tag;
    std::vector<char> bytes;
  };
  std::deque<Buffered> buffered_;

  std::exception_ptr error_;
};

MpiTransport::Impl::~Impl() {
  std::lock_guard<std::mutex> lock(rt_.mutex());
  if (rt_.finalizedLocked()) return;  // MPI freed everything
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    if (pieces_[i].owner->request->kind == Request::Kind::kRecv) {
      MPI_Cancel(&requests_[i]);
      MPI_Wait(&requests_[i], MPI_STATUS_IGNORE);
    } else {
      MPI_Request_free(&requests_[i]);
    }
  }
  for (MPI_Request* r : {&controlRequest_, &heartbeatRequest_}) {
    if (*r != MPI_REQUEST_NULL) {
      MPI_Cancel(r);
      MPI_Wait(r, MPI_STATUS_IGNORE);
    }
  }
  for (auto& r : heartbeatSends_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  bool abortPending = false;
  for (auto& r : abortRequests_) {
    int done = 0;
    if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (r != MPI_REQUEST_NULL) {
      MPI_Request_free(&r);
      abortPending = true;
    }
  }
  if (!abortPending) delete abortFrame_;
  if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  if (user_ != MPI_COMM_NULL) MPI_Comm_free(&user_);
}

void MpiTransport::Impl::setUp() {
  std::lock_guard<std::mutex> lock(rt_.mutex());
  if (rt_.finalizedLocked()) KOLO_THROW(ErrorCode::kIo, "MPI was already finalized");
  // Collective first, checks after: a rank that fails a check must not
  // leave the others blocked in MPI_Comm_dup.
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &data_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &control_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &user_);
  if (rc != MPI_SUCCESS) {
    KOLO_THROW(ErrorCode::kIo, "MPI_Comm_dup failed: " << mpiErrorText(rc));
  }
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(user_, MPI_ERRORS_RETURN);

  int worldRank = -1;
  int worldSize = 0;
  MPI_Comm_rank(data_, &worldRank);
  MPI_Comm_size(data_, &worldSize);
  if (worldRank != options_.rank || worldSize != options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "mpi transport: kolo rank " << options_.rank << " of " << options_.size
                                           << " is MPI_COMM_WORLD rank " << worldRank
                                           << " of " << worldSize
                                           << " (they must be the same)");
  }
  if (options_.maxPieceBytes < 1 ||
      options_.maxPieceBytes > static_cast<size_t>(INT_MAX)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "mpi transport: piece size "
                                                << options_.maxPieceBytes
                                                << " is not in 1.." << INT_MAX);
  }
  if (!options_.connect.empty() &&
      static_cast<int>(options_.connect.size()) != options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "mpi transport: " << options_.connect.size() << " peer flags for "
                                 << options_.size << " ranks");
  }

  void* attr = nullptr;
  int found = 0;
  MPI_Comm_get_attr(data_, MPI_TAG_UB, &attr, &found);
  const long tagUb =
      found ? *static_cast<int*>(attr) : 32767;  // 32767: the minimum MPI allows
  while (tagBits_ < 62 &&
         static_cast<long>((uint64_t{1} << (tagBits_ + 1)) - 1) <= tagUb) {
    ++tagBits_;
  }
  if (tagBits_ < kMinTagBits) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "mpi transport: this MPI's MPI_TAG_UB is "
                   << tagUb << " (" << tagBits_
                   << " bits) but kolo needs tags of at least " << kMinTagBits
                   << " bits (MPI_TAG_UB >= " << ((1L << kMinTagBits) - 1) << ")");
  }
  tagMask_ = (uint64_t{1} << tagBits_) - 1;

  heartbeat_.restart(Clock::now());
  rc = MPI_Irecv(controlBuffer_.data(), static_cast<int>(controlBuffer_.size()), MPI_BYTE,
                 MPI_ANY_SOURCE, kAbortTag, control_, &controlRequest_);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Irecv(&heartbeatBuffer_, 1, MPI_BYTE, MPI_ANY_SOURCE, kHeartbeatTag,
                   control_, &heartbeatRequest_);
  }
  if (rc != MPI_SUCCESS) KOLO_THROW(ErrorCode::kIo, "MPI_Irecv: " << mpiErrorText(rc));
}

void MpiTransport::Impl::checkPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "mpi transport: cannot "
                                                << what << " rank " << peer
                                                << ", out of range for " << options_.size
                                                << " ranks");
  }
  if (!options_.connect.empty() && !options_.connect[peer] && peer != options_.rank) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "mpi transport: rank " << options_.rank << " cannot " << what << " rank "
                                      << peer << ", which it is not linked with");
  }
}

void MpiTransport::Impl::checkUsableLocked() {
  if (error_) std::rethrow_exception(error_);
  if (rt_.finalizedLocked()) {
    breakWith(std::make_exception_ptr(
        Error(ErrorCode::kIo, "mpi transport: rank " + std::to_string(options_.rank) +
                                  " cannot use MPI after MPI_Finalize")));
  }
}

RequestPtr MpiTransport::Impl::post(Request::Kind kind, int peer, Tag tag, void* data,
                                    size_t bytes) {
  const bool send = kind == Request::Kind::kSend;
  if (!(kind == Request::Kind::kRecv && peer == kAnySource)) {
    checkPeer(peer, send ? "send to" : "receive from");
  }
  const int pieces = static_cast<int>(bytes / options_.maxPieceBytes) + 1;
  if (peer == kAnySource && pieces > 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "mpi transport: a receive from any rank is limited to "
                   << options_.maxPieceBytes - 1 << " bytes (" << bytes << " posted, tag "
                   << tag << ")");
  }
  std::lock_guard<std::mutex> lock(rt_.mutex());
  checkUsableLocked();
  auto request = std::make_shared<Request>(kind, peer, tag, bytes);
  auto pending = std::make_shared<Pending>(Pending{request, data, pieces});
  static char empty = 0;
  char* base = data != nullptr ? static_cast<char*>(data) : &empty;
  const int mpiPeer = peer == kAnySource ? MPI_ANY_SOURCE : peer;
  // The public API's messages travel on a communicator of their own: every
  // tag of the data communicator may be a collective's (their low bits
  // wrap).
  const bool user = (tag & kUserMessageBit) != 0;
  MPI_Comm comm = user ? user_ : data_;
  const int t = mpiTag(tag);
  // Pieces the buffer holds come first: it holds the oldest messages of
  // each (source, tag), MPI the ones after them.
  bool buffered = user && !send;
  for (int i = 0; i < pieces; ++i) {
    char* at = base + static_cast<size_t>(i) * options_.maxPieceBytes;
    if (buffered && takeBufferedLocked(*pending, i, t, at)) {
      if (pending->finished) return request;
      continue;
    }
    buffered = false;
    const int count = static_cast<int>(pieceBytes(bytes, i));
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = send ? MPI_Isend(at, count, MPI_BYTE, mpiPeer, t, comm, &r)
                  : MPI_Irecv(at, count, MPI_BYTE, mpiPeer, t, comm, &r);
    if (rc != MPI_SUCCESS) {
      breakWith(std::make_exception_ptr(Error(
          ErrorCode::kPeerLost,
          std::string("mpi transport: rank ") + std::to_string(options_.rank) +
              (send ? " could not send to rank " : " could not receive from rank ") +
              std::to_string(peer) + ": " + mpiErrorText(rc),
          peer)));
    }
    requests_.push_back(r);
    pieces_.push_back(Piece{pending, i});
  }
  return request;
}

void MpiTransport::Impl::failRequest(Pending& p, std::exception_ptr e) {
  p.finished = true;
  p.request->fail(std::move(e));
  // Its other pieces: receives are cancelled (they complete as cancelled
  // and are ignored); sends stay until MPI completes them.
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (pieces_[i].owner.get() == &p && requests_[i] != MPI_REQUEST_NULL &&
        p.request->kind == Request::Kind::kRecv) {
      MPI_Cancel(&requests_[i]);
    }
  }
}

void MpiTransport::Impl::breakWith(std::exception_ptr e) {
  if (!error_) {
    error_ = e;
    rt_.noteBroken();
    for (auto& piece : pieces_) {
      if (!piece.owner->finished) {
        piece.owner->finished = true;
        piece.owner->request->fail(error_);
      }
    }
  }
  std::rethrow_exception(error_);
}

// A piece finished (error: its MPI_ERROR, MPI_SUCCESS when none).
void MpiTransport::Impl::finishPiece(const Piece& piece, const MPI_Status& status,
                                     int error) {
  Pending& p = *piece.owner;
  if (p.finished) return;  // a cancelled piece of a failed receive
  Request& r = *p.request;
  const bool recv = r.kind == Request::Kind::kRecv;
  const int source = recv && r.peer == kAnySource ? status.MPI_SOURCE : r.peer;
  if (error != MPI_SUCCESS && errorClass(error) == MPI_ERR_TRUNCATE) {
    r.peer = source;
    failRequest(p, sizeMismatch(r, source, piece.index, pieceBytes(r.bytes, piece.index),
                                /*truncated=*/true));
    return;
  }
  if (error != MPI_SUCCESS) {
    breakWith(std::make_exception_ptr(
        Error(ErrorCode::kPeerLost,
              "mpi transport: rank " + std::to_string(options_.rank) + " lost rank " +
                  std::to_string(source) + " (MPI: " + mpiErrorText(error) + ")",
              source)));
  }
  if (recv) {
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    const size_t expected = pieceBytes(r.bytes, piece.index);
    if (static_cast<size_t>(count) != expected) {
      r.peer = source;
      failRequest(p, sizeMismatch(r, source, piece.index, static_cast<size_t>(count),
                                  /*truncated=*/false));
      return;
    }
    r.peer = source;
  }
  if (source >= 0 && source < options_.size) heartbeat_.heard(source, Clock::now());
  if (--p.piecesLeft == 0) {
    p.finished = true;
    r.complete();
  }
}

std::exception_ptr MpiTransport::Impl::sizeMismatch(const Request& r, int source,
                                                    int index, size_t count,
                                                    bool truncated) const {
  // Bytes before the piece, plus the piece: a short piece is the sender's
  // last one, so its size is exact; a truncated one says only "more than".
  const size_t sent = static_cast<size_t>(index) * options_.maxPieceBytes + count;
  std::ostringstream os;
  os << "size mismatch: rank " << source << " sent " << (truncated ? "more than " : "")
     << sent << " bytes with tag " << r.tag << " but rank " << options_.rank
     << " posted a receive of " << r.bytes << " bytes";
  return std::make_exception_ptr(Error(ErrorCode::kMismatch, os.str(), source));
}

// Every public API message that no posted receive matched is taken into
// buffered_ (MPI_Improbe finds it, MPI_Mrecv takes it: the sender's
// transfer runs now, so its send completes). A probe sees only messages no
// posted receive matched, and a later receive takes the buffer's messages
// before posting its own, so the order per (source, tag) is the sender's.
bool MpiTransport::Impl::bufferUserLocked() {
  bool moved = false;
  for (int k = 0; k < kMaxBufferedPerProgress; ++k) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, user_, &found, &message, &status);
    if (rc != MPI_SUCCESS) {
      breakWith(std::make_exception_ptr(Error(
          ErrorCode::kIo, "mpi transport: MPI_Improbe failed: " + mpiErrorText(rc))));
    }
    if (!found) break;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    Buffered b{status.MPI_SOURCE, status.MPI_TAG,
               std::vector<char>(static_cast<size_t>(std::max(count, 0)))};
    static char empty = 0;
    rc = MPI_Mrecv(b.bytes.empty() ? &empty : b.bytes.data(), count, MPI_BYTE, &message,
                   &status);
    if (rc != MPI_SUCCESS) {
      breakWith(std::make_exception_ptr(
          Error(ErrorCode::kPeerLost,
                "mpi transport: rank " + std::to_string(options_.rank) + " lost rank " +
                    std::to_string(b.source) + " (MPI: " + mpiErrorText(rc) + ")",
                b.source)));
    }
    if (b.source >= 0 && b.source < options_.size)
      heartbeat_.heard(b.source, Clock::now());
    buffered_.push_back(std::move(b));
    moved = true;
  }
  return moved;
}

bool MpiTransport::Impl::takeBufferedLocked(Pending& p, int index, int tag, char* at) {
  Request& r = *p.request;
  auto it = std::find_if(buffered_.begin(), buffered_.end(), [&](const Buffered& b) {
    return b.tag == tag && (r.peer == kAnySource || b.source == r.peer);
  });
  if (it == buffered_.end()) return false;
  const Buffered b = std::move(*it);
  buffered_.erase(it);
  r.peer = b.source;
  const size_t expected = pieceBytes(r.bytes, index);
  if (b.bytes.size() != expected) {
    const bool longer = b.bytes.size() > expected;
    failRequest(p, sizeMismatch(r, b.source, index, longer ? expected : b.bytes.size(),
                                /*truncated=*/longer));
    return true;
  }
  if (expected > 0) std::memcpy(at, b.bytes.data(), expected);
  if (--p.piecesLeft == 0) {
    p.finished = true;
    r.complete();
  }
  return true;
}

bool MpiTransport::Impl::pollControlLocked() {
  // Heartbeats: note who is alive, re-post (a bounded number per call).
  for (int k = 0; k < 64 && heartbeatRequest_ != MPI_REQUEST_NULL; ++k) {
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&heartbeatRequest_, &done, &status) != MPI_SUCCESS || !done) break;
    if (status.MPI_SOURCE >= 0 && status.MPI_SOURCE < options_.size) {
      heartbeat_.heard(status.MPI_SOURCE, Clock::now());
    }
    MPI_Irecv(&heartbeatBuffer_, 1, MPI_BYTE, MPI_ANY_SOURCE, kHeartbeatTag, control_,
              &heartbeatRequest_);
  }
  if (controlRequest_ == MPI_REQUEST_NULL) return false;
  int done = 0;
  MPI_Status status;
  if (MPI_Test(&controlRequest_, &done, &status) != MPI_SUCCESS || !done) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  AbortNotice notice{static_cast<int32_t>(ErrorCode::kPeerLost), -1};
  std::string message = "rank " + std::to_string(status.MPI_SOURCE) + " failed";
  if (count >= static_cast<int>(sizeof(notice))) {
    ByteReader in(controlBuffer_.data(), static_cast<size_t>(count), kHostOrder);
    notice.code = in.get<int32_t>();
    notice.blamed = in.get<int32_t>();
    message.assign(in.rest());
  }
  auto code = static_cast<ErrorCode>(notice.code);
  if (code != ErrorCode::kTimeout && code != ErrorCode::kPeerLost)
    code = ErrorCode::kPeerLost;
  breakWith(std::make_exception_ptr(Error(
      code, message + " (reported by rank " + std::to_string(status.MPI_SOURCE) + ")",
      notice.blamed >= 0 ? notice.blamed : status.MPI_SOURCE)));
}

// Completes what MPI finished: one MPI_Testsome over every active piece,
// then the finished entries are dropped from the arrays.
bool MpiTransport::Impl::progress() {
  std::lock_guard<std::mutex> lock(rt_.mutex());
  checkUsableLocked();
  pollControlLocked();
  const bool buffered = bufferUserLocked();
  if (requests_.empty()) return buffered;
  const int n = static_cast<int>(requests_.size());
  indices_.resize(n);
  statuses_.resize(n);
  int outcount = 0;
  const int rc =
      MPI_Testsome(n, requests_.data(), &outcount, indices_.data(), statuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    breakWith(std::make_exception_ptr(Error(
        ErrorCode::kIo, "mpi transport: MPI_Testsome failed: " + mpiErrorText(rc))));
  }
  if (outcount == MPI_UNDEFINED || outcount == 0) {
    // Nothing finished; drop entries MPI already released (none active).
    if (outcount == MPI_UNDEFINED) {
      requests_.clear();
      pieces_.clear();
    }
    return buffered;
  }
  for (int k = 0; k < outcount; ++k) {
    const int i = indices_[k];
    const int error = rc == MPI_ERR_IN_STATUS ? statuses_[k].MPI_ERROR : MPI_SUCCESS;
    finishPiece(pieces_[i], statuses_[k], error);
  }
  // Compact: keep the entries still active, in posting order.
  size_t w = 0;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    if (w != i) {
      requests_[w] = requests_[i];
      pieces_[w] = std::move(pieces_[i]);
    }
    ++w;
  }
  requests_.resize(w);
  pieces_.resize(w);
  return true;
}

// Heartbeats go out only while this rank waits (idle), which is exactly
// when a peer may be blocked on it: every timeout/4 (50 ms..1 s), an empty
// message to every linked peer. A peer is silent when neither data nor a
// heartbeat came from it for the timeout; only then does a wait on it time
// out, so the ranks next to a stopped one name it, and the others hear
// why through the abort notice.
void MpiTransport::Impl::sendHeartbeatsLocked() {
  if (!heartbeat_.takeRound(Clock::now())) return;
  // Finished sends are dropped (empty messages go out at once).
  if (!heartbeatSends_.empty()) {
    int all = 0;
    MPI_Testall(static_cast<int>(heartbeatSends_.size()), heartbeatSends_.data(), &all,
                MPI_STATUSES_IGNORE);
    std::erase(heartbeatSends_, MPI_REQUEST_NULL);
  }
  for (int peer = 0; peer < options_.size; ++peer) {
    if (!linked(peer)) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(&heartbeatBuffer_, 0, MPI_BYTE, peer, kHeartbeatTag, control_, &r) ==
        MPI_SUCCESS) {
      heartbeatSends_.push_back(r);
    }
  }
}

void MpiTransport::Impl::idle(std::chrono::microseconds max) {
  {
    std::lock_guard<std::mutex> lock(rt_.mutex());
    if (!error_ && !rt_.finalizedLocked()) sendHeartbeatsLocked();
  }
  std::this_thread::sleep_for(std::min(max, kMaxIdle));
}

std::optional<bool> MpiTransport::Impl::silentFor(int peer,
                                                  std::chrono::milliseconds d) const {
  if (peer < 0 || peer >= options_.size || !linked(peer)) return std::nullopt;
  return heartbeat_.silentFor(peer, d, Clock::now());
}

void MpiTransport::Impl::abort(const Error& cause) {
  std::lock_guard<std::mutex> lock(rt_.mutex());
  if (rt_.finalizedLocked() || abortFrame_ != nullptr) return;
  if (!error_) {
    try {
      breakWith(std::make_exception_ptr(cause));
    } catch (...) {
    }
  }
  std::string message = cause.what();
  message.resize(std::min(message.size(), kMaxAbortBytes - sizeof(AbortNotice)));
  abortFrame_ = new std::vector<char>();
  ByteWriter(*abortFrame_, kHostOrder)
      .put<int32_t>(static_cast<int32_t>(cause.code()))
      .put<int32_t>(cause.peer())
      .bytes(message);
  for (int peer = 0; peer < options_.size; ++peer) {
    if (peer == options_.rank || (!options_.connect.empty() && !options_.connect[peer])) {
      continue;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(abortFrame_->data(), static_cast<int>(abortFrame_->size()), MPI_BYTE,
                  peer, kAbortTag, control_, &r) == MPI_SUCCESS) {
      abortRequests_.push_back(r);
    }
  }
  // Bounded: a peer that does not take the notice is not waited for.
  const auto deadline = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < deadline) {
    int all = 0;
    if (MPI_Testall(static_cast<int>(abortRequests_.size()), abortRequests_.data(), &all,
                    MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        all) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// ---------------------------------------------------------------- facade

std::unique_ptr<MpiTransport> MpiTransport::create(const Options& options) {
  auto impl = std::make_unique<Impl>(options, MpiRuntime::acquire());
  impl->setUp();
  auto t = std::unique_ptr<MpiTransport>(new MpiTransport(std::move(impl)));
  t->spin_ = options.spin;
  return t;
}

MpiTransport::MpiTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiTransport::~MpiTransport() = default;

int MpiTransport::rank() const {
  return impl_->options_.rank;
}
int MpiTransport::size() const {
  return impl_->options_.size;
}
RequestPtr MpiTransport::isend(int dst, Tag tag, const void* data, size_t bytes) {
  // MPI reads a send buffer only; the cast serves the shared bookkeeping.
  return impl_->post(Request::Kind::kSend, dst, tag, const_cast<void*>(data), bytes);
}
RequestPtr MpiTransport::irecv(int src, Tag tag, void* data, size_t bytes) {
  return impl_->post(Request::Kind::kRecv, src, tag, data, bytes);
}
bool MpiTransport::progress() {
  return impl_->progress();
}
void MpiTransport::idle(std::chrono::microseconds max) {
  impl_->idle(max);
}
std::optional<bool> MpiTransport::silentFor(int peer, std::chrono::milliseconds d) const {
  return impl_->silentFor(peer, d);
}
std::chrono::milliseconds MpiTransport::timeout() const {
  return impl_->options_.timeout;
}
void MpiTransport::abort(const Error& cause) {
  impl_->abort(cause);
}
int MpiTransport::mpiTag(Tag tag) const {
  return impl_->mpiTag(tag);
}
int MpiTransport::tagBits() const {
  return impl_->tagBits_;
}

}  // namespace kolo::transport
