// Fuzz target: the tcp transport's handshake (tcp_handshake.h), each of its
// three messages decoded from the input as a stranger would send it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "transport/tcp/tcp_handshake.h"

using namespace kolo::transport::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string na(32, 'a'), nc(32, 'c'), secret = "secret";
  std::string nonce, why, gotNc;
  Hello hello{};
  (void)decodeChallenge(in.substr(0, kChallengeBytes), &nonce, &why);
  (void)decodeHello(in.substr(0, kHelloBytes), na, secret, &hello, &gotNc, &why);
  (void)decodeAnswer(in.substr(0, kAnswerBytes), na, nc, secret, &hello, &why);
  // Whole input too (wrong sizes must be refused, not read).
  (void)decodeChallenge(in, &nonce, &why);
  (void)decodeHello(in, na, secret, &hello, &gotNc, &why);
  (void)decodeAnswer(in, na, nc, secret, &hello, &why);
  return 0;
}
