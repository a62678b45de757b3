// Input patterns and result checks of kolo-bench.
//
// Every rank fills its inputs with small integers that depend on the rank and
// on the element's global index (a multiplicative hash, so a block landing at
// the wrong offset is caught), chosen so that every correct result is exact in
// the dtype: sums stay within the dtype's exact integers (256 for bfloat16 and
// uint8, 2048 for float16), products are small powers of two. Only the
// average of a floating type is compared with a tolerance (one division).
//
// Not thread-safe per object; plain values, no I/O.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <optional>
#include <string>

#include "bench_options.h"

namespace kolo::bench {

// Reads / writes element i of a buffer of dtype as a double.
double loadElement(DataType dtype, const void* buf, size_t i);
void storeElement(DataType dtype, void* buf, size_t i, double v);

// float <-> IEEE binary16 / bfloat16, round to nearest even (our own, so the
// check does not trust the library's conversions).
float halfBitsToFloat(uint16_t h);
uint16_t floatToHalfBits(float f);
float bfloat16BitsToFloat(uint16_t b);
uint16_t floatToBfloat16Bits(float f);

// The values each rank contributes and the reduced result per index.
class Pattern {
 public:
  Pattern(DataType dtype, ReduceOp op, int worldSize);

  // What rank contributes at global element index.
  double input(int rank, size_t index) const;
  // The exact result of reducing input(r, index) over all ranks with op, in
  // the dtype's arithmetic (integer average truncates).
  double reduced(size_t index) const;
  // True when got is an acceptable result for expected (exact, except a
  // floating average which may be off by a rounding).
  bool matches(double expected, double got) const;

 private:
  DataType dtype_;
  ReduceOp op_;
  int worldSize_;
  unsigned modulus_;  // inputs lie in [0, modulus_)
};

struct Mismatch {
  size_t index;  // in the output buffer
  double expected;
  double got;
};

// One measured case: a collective of `count` elements (the size column) on
// `worldSize` ranks, seen from `rank`. Knows its buffer sizes, fills its
// inputs and checks its output.
class Case {
 public:
  Case(const Options& options, int rank, int worldSize, size_t bytes);

  size_t count() const { return count_; }  // elements in the size column
  size_t bytes() const { return count_ * elementSize(dtype_); }
  size_t sendCount() const { return sendCount_; }
  size_t recvCount() const { return recvCount_; }
  size_t blockCount() const { return block_; }  // per-rank block (gather/scatter ops)
  double busFactor() const;

  // Writes this rank's inputs into send (and recv for broadcast / in place)
  // and a sentinel into the rest of recv.
  void fill(void* send, void* recv) const;
  // First wrong output element, if any.
  std::optional<Mismatch> verify(const void* recv) const;

 private:
  double expected(size_t recvIndex) const;

  Collective collective_;
  DataType dtype_;
  int rank_;
  int worldSize_;
  int root_;
  bool inPlace_;
  Pattern pattern_;
  size_t count_ = 0, sendCount_ = 0, recvCount_ = 0, block_ = 0;
};

}  // namespace kolo::bench
