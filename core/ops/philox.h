// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011), the counter-based generator behind TensorFlow's stateless
// random ops, and the conversions TensorFlow applies to its output
// (random_distributions.h): uniform floats from the low mantissa bits, normal
// pairs by Box-Muller. Written so that a key and counter give TensorFlow's
// CPU numbers bit for bit.
#ifndef GRADTAPE_CORE_OPS_PHILOX_H_
#define GRADTAPE_CORE_OPS_PHILOX_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace gradtape {

class Philox4x32 {
 public:
  using Block = std::array<uint32_t, 4>;  // one output: 128 bits
  using Key = std::array<uint32_t, 2>;

  Philox4x32(const Block& counter, const Key& key)
      : counter_(counter), key_(key) {}
  // The key from a 64-bit value (low word first), counter words from two.
  static Philox4x32 FromWords(uint64_t key, uint64_t counter_lo,
                              uint64_t counter_hi) {
    return Philox4x32(
        {Lo(counter_lo), Hi(counter_lo), Lo(counter_hi), Hi(counter_hi)},
        {Lo(key), Hi(key)});
  }

  // The block for the current counter; then the counter moves on by one.
  Block Next() {
    Block c = counter_;
    Key k = key_;
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k[0] += kWeylA;
        k[1] += kWeylB;
      }
      const uint64_t p0 = uint64_t{kMulA} * c[0];
      const uint64_t p1 = uint64_t{kMulB} * c[2];
      c = {Hi(p1) ^ c[1] ^ k[0], Lo(p1), Hi(p0) ^ c[3] ^ k[1], Lo(p0)};
    }
    Skip(1);
    return c;
  }

  const Block& Counter() const { return counter_; }
  const Key& key() const { return key_; }

  // Moves the 128-bit counter on by n blocks.
  void Skip(uint64_t n) {
    const uint64_t lo = (uint64_t{counter_[1]} << 32 | counter_[0]) + n;
    const bool carry = lo < n;
    counter_[0] = Lo(lo);
    counter_[1] = Hi(lo);
    if (!carry) return;
    for (int w = 2; w < 4; ++w) {
      if (++counter_[w] != 0) break;
    }
  }

  static uint32_t Lo(uint64_t v) { return static_cast<uint32_t>(v); }
  static uint32_t Hi(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

  static constexpr uint32_t kMulA = 0xD2511F53;
  static constexpr uint32_t kMulB = 0xCD9E8D57;
  static constexpr uint32_t kWeylA = 0x9E3779B9;
  static constexpr uint32_t kWeylB = 0xBB67AE85;

 private:
  Block counter_;
  Key key_;
};

// A float in [0, 1): 1.m - 1 with the 23 low bits of x as mantissa m.
inline float PhiloxUniformFloat(uint32_t x) {
  const uint32_t bits = (uint32_t{127} << 23) | (x & 0x7fffffu);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f - 1.0f;
}

// A double in [0, 1) from 52 bits: the low 20 of hi, then all of lo.
inline double PhiloxUniformDouble(uint32_t hi, uint32_t lo) {
  const uint64_t bits =
      (uint64_t{1023} << 52) | (uint64_t{hi & 0xfffffu} << 32) | uint64_t{lo};
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d - 1.0;
}

// Box-Muller: two standard normals from two uniforms (u1 kept >= 1e-7 so
// that the log is finite). The angle is rounded to float after a product in
// double, as TensorFlow's 2.0f * M_PI * u does.
inline void PhiloxNormalFloats(uint32_t x0, uint32_t x1, float* f0, float* f1) {
  float u1 = PhiloxUniformFloat(x0);
  if (u1 < 1.0e-7f) u1 = 1.0e-7f;
  const float angle = static_cast<float>(2.0f * M_PI * PhiloxUniformFloat(x1));
  const float radius = std::sqrt(-2.0f * std::log(u1));
  *f0 = std::sin(angle) * radius;
  *f1 = std::cos(angle) * radius;
}

inline void PhiloxNormalDoubles(uint32_t x0, uint32_t x1, uint32_t x2,
                                uint32_t x3, double* d0, double* d1) {
  double u1 = PhiloxUniformDouble(x0, x1);
  if (u1 < 1.0e-7) u1 = 1.0e-7;
  const double angle = 2.0 * M_PI * PhiloxUniformDouble(x2, x3);
  const double radius = std::sqrt(-2.0 * std::log(u1));
  *d0 = std::sin(angle) * radius;
  *d1 = std::cos(angle) * radius;
}

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_PHILOX_H_
