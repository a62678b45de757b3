// kolo's SHA-256 and HMAC-SHA256 against the published test vectors:
// FIPS 180-2 appendix B (SHA-256) and RFC 4231 section 4 (HMAC-SHA256).
#include "common/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace kolo {
namespace {

std::string hex(const Digest& d) {
  return toHex(d.data(), d.size());
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(Sha256, Fips180_2Vectors) {
  EXPECT_EQ(hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(hex(sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, IncrementalEqualsOneShotAtEveryBoundary) {
  std::string msg;
  for (int i = 0; i < 200; ++i) msg.push_back(static_cast<char>(i * 7));
  for (size_t cut = 0; cut <= msg.size(); cut += 13) {
    Sha256 s;
    s.update(std::string_view(msg).substr(0, cut));
    s.update(std::string_view(msg).substr(cut));
    EXPECT_EQ(hex(s.finish()), hex(sha256(msg))) << "cut at " << cut;
  }
}

TEST(HmacSha256, Rfc4231Vectors) {
  // Test case 1
  EXPECT_EQ(hex(hmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2
  EXPECT_EQ(hex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3
  EXPECT_EQ(hex(hmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4
  EXPECT_EQ(hex(hmacSha256(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                           std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 6: a key longer than the block
  EXPECT_EQ(hex(hmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7
  EXPECT_EQ(hex(hmacSha256(std::string(131, '\xaa'),
                           "This is a test using a larger than block-size key and a "
                           "larger than block-size data. The key needs to be hashed "
                           "before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, ConstantTimeEqualAndRandomBytes) {
  const std::string a = "0123456789", b = "0123456788";
  EXPECT_TRUE(constantTimeEqual(a.data(), a.data(), a.size()));
  EXPECT_FALSE(constantTimeEqual(a.data(), b.data(), a.size()));
  std::string r1 = randomBytes(32), r2 = randomBytes(32);
  EXPECT_EQ(r1.size(), 32u);
  EXPECT_NE(r1, r2);
}

}  // namespace
}  // namespace kolo
