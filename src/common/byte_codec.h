// The byte codec of every kolo wire and file format: fixed-size integers
// and floating-point values to and from bytes, in a byte order the format
// names explicitly.
//
// Two orders are in use, and each format keeps its own:
// - ByteOrder::kLittle: formats that may cross machines or outlive the
//   process (parameter-server messages, checkpoint files);
// - kHostOrder: formats whose two ends are one build of kolo on machines
//   of one kind (the rendezvous store's frames, tcp frames and handshake,
//   the runtime's negotiation messages).
// Floating-point values travel as their IEEE-754 bit pattern.
//
// ByteWriter appends to a std::string or std::vector<uint8_t>. ByteReader
// reads a buffer that another process may have written, so every read is
// bounds-checked: a read past the end returns zero, consumes nothing and
// fails the reader; ok() says whether every read so far was whole. Decoders
// of hostile input read fields, then check ok() (and their own limits)
// before trusting any of them.
//
// storeBytes/loadBytes encode one value at a position the caller has
// already checked (a fixed-size header).
//
// Header only; no state beyond the objects themselves; not thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kolo {

enum class ByteOrder : uint8_t { kLittle, kBig };

inline constexpr ByteOrder kHostOrder =
    std::endian::native == std::endian::little ? ByteOrder::kLittle : ByteOrder::kBig;

namespace detail {

template <typename T>
inline constexpr bool kCodable = std::is_integral_v<T> || std::is_floating_point_v<T>;

// The unsigned integer of T's size.
template <typename T>
using CodeUnit = std::conditional_t<
    sizeof(T) == 1, uint8_t,
    std::conditional_t<sizeof(T) == 2, uint16_t,
                       std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

}  // namespace detail

// Writes v's sizeof(T) bytes at p in `order`.
template <typename T>
void storeBytes(uint8_t* p, T v, ByteOrder order) {
  static_assert(detail::kCodable<T>, "the codec encodes integers and floating point");
  using U = detail::CodeUnit<T>;
  static_assert(sizeof(U) == sizeof(T));
  const U u = std::bit_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) {
    const size_t shift = 8 * (order == ByteOrder::kLittle ? i : sizeof(T) - 1 - i);
    p[i] = static_cast<uint8_t>(u >> shift);
  }
}

// Reads a T from the sizeof(T) bytes at p in `order`.
template <typename T>
T loadBytes(const uint8_t* p, ByteOrder order) {
  static_assert(detail::kCodable<T>, "the codec decodes integers and floating point");
  using U = detail::CodeUnit<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    const size_t shift = 8 * (order == ByteOrder::kLittle ? i : sizeof(T) - 1 - i);
    u = static_cast<U>(u | static_cast<U>(U{p[i]} << shift));
  }
  return std::bit_cast<T>(u);
}

// Appends encoded values to `out` (a std::string or std::vector<uint8_t>),
// which must outlive the writer.
template <typename Buffer>
class ByteWriter {
 public:
  ByteWriter(Buffer& out, ByteOrder order) : out_(out), order_(order) {}

  template <typename T>
  ByteWriter& put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    storeBytes<T>(reinterpret_cast<uint8_t*>(out_.data()) + at, v, order_);
    return *this;
  }

  // Raw bytes, as they are.
  ByteWriter& bytes(const void* p, size_t n) {
    const auto* b = static_cast<const typename Buffer::value_type*>(p);
    out_.insert(out_.end(), b, b + n);
    return *this;
  }
  ByteWriter& bytes(std::string_view s) { return bytes(s.data(), s.size()); }

 private:
  Buffer& out_;
  ByteOrder order_;
};

// Reads values from a buffer it does not own, front to back.
class ByteReader {
 public:
  ByteReader(const void* data, size_t size, ByteOrder order)
      : at_(static_cast<const uint8_t*>(data)),
        end_(static_cast<const uint8_t*>(data) + size),
        order_(order) {}
  ByteReader(std::string_view bytes, ByteOrder order)
      : ByteReader(bytes.data(), bytes.size(), order) {}

  // The next T; 0 (and the reader failed) when fewer than sizeof(T) bytes
  // remain.
  template <typename T>
  T get() {
    if (!take(sizeof(T))) return T{};
    return loadBytes<T>(at_ - sizeof(T), order_);
  }

  // The next n bytes, a view into the buffer; empty (and the reader failed)
  // when fewer remain.
  std::string_view bytes(size_t n) {
    if (!take(n)) return {};
    return {reinterpret_cast<const char*>(at_ - n), n};
  }
  // Everything left.
  std::string_view rest() { return bytes(remaining()); }

  bool ok() const { return ok_; }
  // Bytes not read yet; 0 once the reader failed.
  size_t remaining() const { return ok_ ? static_cast<size_t>(end_ - at_) : 0; }
  // Where the next read starts.
  const uint8_t* cursor() const { return at_; }

 private:
  bool take(size_t n) {
    if (!ok_ || static_cast<size_t>(end_ - at_) < n) {
      ok_ = false;
      return false;
    }
    at_ += n;
    return true;
  }

  const uint8_t* at_;
  const uint8_t* end_;
  ByteOrder order_;
  bool ok_ = true;
};

}  // namespace kolo
