// The tcp transport's frames after the handshake, as pure decode functions
// that the transport and a fuzz target share.
//
// A frame is a 16-byte Header (tag, byte count; host byte order: both ends
// are one build of kolo) followed by the payload. A count with kControlBit
// set is a control frame:
//   kGoodbye    no payload; the sender closes its side in order
//   kHeartbeat  no payload; the sender is alive (sent while it waits)
//   kAbort      payload of `tag` bytes in [sizeof(AbortNotice),
//               kMaxAbortBytes]: an AbortNotice then the error message of
//               the sender, which failed
// Any other control count, or an abort of another size, is malformed (the
// stream is corrupt: the link fails). A data frame's count is its payload
// size, matched against the receive that its tag selects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <kolo/error.h>

#include "common/byte_codec.h"

namespace kolo::transport::tcp {

// In memory as on the wire: two host-order u64 and no padding, so the send
// path queues a Header as its 16 bytes; readHeader and appendHeader are the
// byte codec's view of the same layout.
struct Header {
  uint64_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) == 16 && offsetof(Header, bytes) == 8);

inline constexpr uint64_t kControlBit = uint64_t{1} << 63;
inline constexpr uint64_t kGoodbye = kControlBit | 1;
// A rank that fails tells its peers why (payload: AbortNotice + message,
// its length in the header's tag), so they name the rank really lost.
inline constexpr uint64_t kAbort = kControlBit | 2;
// Sent while a rank waits, so peers blocked on it know it is alive.
inline constexpr uint64_t kHeartbeat = kControlBit | 3;
inline constexpr size_t kMaxAbortBytes = 16 << 10;

struct AbortNotice {
  int32_t code;
  int32_t blamed;  // the rank the failure names, -1 for none
};

enum class FrameKind : uint8_t { kData, kGoodbye, kHeartbeat, kAbort, kMalformed };

struct FrameInfo {
  FrameKind kind;
  uint64_t payloadBytes;  // what follows the header
};

// Headers and abort notices are in host byte order (both ends are one
// build of kolo).
inline constexpr ByteOrder kOrder = kHostOrder;

// Appends h's 16 bytes.
void appendHeader(std::vector<uint8_t>& out, const Header& h);
// Reads a header from 16 bytes (any alignment).
Header readHeader(const uint8_t* bytes);
// Appends the notice's sizeof(AbortNotice) bytes.
void appendAbortNotice(std::vector<uint8_t>& out, const AbortNotice& notice);

// What a received header announces; never throws.
FrameInfo classifyHeader(const Header& h);

// An abort notice's contents, trusted no further than checked: the code is
// kTimeout or kPeerLost (anything else becomes kPeerLost), the blamed rank
// is in [0, worldSize) (anything else becomes `sender`), the message is
// the rest of the payload.
struct AbortInfo {
  ErrorCode code;
  int blamed;
  std::string message;
};
// `payload`: the whole payload of a frame classifyHeader called kAbort
// (n bytes); a shorter one yields kPeerLost blaming `sender`.
AbortInfo decodeAbortNotice(const uint8_t* payload, size_t n, int sender, int worldSize);

}  // namespace kolo::transport::tcp
