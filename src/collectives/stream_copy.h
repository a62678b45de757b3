// Copies whose destination is written with non-temporal stores.
//
// Contract
// - copyStreaming(dst, src, bytes) copies like memcpy (no overlap), but its
//   stores are weakly ordered: call fenceStreaming() once after the last
//   such copy and before publishing the data (e.g. a flag another process
//   reads), so the bytes are visible before the flag is.
// - Use: filling shared staging memory whose lines other ranks' caches hold
//   from an earlier step, in many pieces (a fused bucket's tensors). Plain
//   stores must first take each line back from the peer's cache; the
//   non-temporal stores write whole lines without asking. The copied bytes
//   are then not in this core's cache.
// - Thread-safety: none needed (writes dst only). Blocking: none.
#pragma once

#include <cstddef>

namespace kolo::collectives {

void copyStreaming(void* dst, const void* src, size_t bytes);
void fenceStreaming();

}  // namespace kolo::collectives
