"""The C++ the generated kernels start with: fixed-width types, the <cmath> functions they use as
gcc builtins, vector-math declarations, torch's rounding and NaN semantics for min, max and
division, streaming stores, inlined float32 exp and tanh; and memory a kernel group owns."""

_VECTOR_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
                "erfc")


def _simd_decls() -> str:
    lines = ['extern "C" {']
    for fn in _VECTOR_MATH:
        for suffix, t in (("f", "float"), ("", "double")):
            lines.append(f"#pragma omp declare simd notinbranch\n{t} {fn}{suffix}({t}) noexcept;")
    for suffix, t in (("f", "float"), ("", "double")):
        for fn in ("pow", "atan2"):
            lines.append(f"#pragma omp declare simd notinbranch\n{t} {fn}{suffix}({t}, {t}) noexcept;")
    lines.append("}")
    return "\n".join(lines)


_MDM_UNARY = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
              "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
              "erfc", "lgamma", "floor", "ceil", "trunc", "nearbyint")


def _math_decls() -> str:
    """The few <cmath> functions the kernels use, as gcc builtins in namespace mdm: including
    <cmath> costs ~0.13 s of every g++ run, more than compiling a typical graph's kernels."""
    lines = ["namespace mdm {"]
    for fn in _MDM_UNARY:
        lines.append(f"static inline float {fn}(float x) {{ return __builtin_{fn}f(x); }}")
        lines.append(f"static inline double {fn}(double x) {{ return __builtin_{fn}(x); }}")
        lines.append(f"template <typename T> static inline double {fn}(T x) "
                     f"{{ return __builtin_{fn}(double(x)); }}")
    for fn in ("pow", "atan2", "fmod", "copysign"):
        lines.append(f"static inline float {fn}(float a, float b) {{ return __builtin_{fn}f(a, b); }}")
        lines.append(f"static inline double {fn}(double a, double b) {{ return __builtin_{fn}(a, b); }}")
        lines.append(f"template <typename A, typename B> static inline double {fn}(A a, B b) "
                     f"{{ return __builtin_{fn}(double(a), double(b)); }}")
    lines.append("static inline float abs(float x) { return __builtin_fabsf(x); }")
    lines.append("static inline double abs(double x) { return __builtin_fabs(x); }")
    lines.append("static inline int abs(int x) { return x < 0 ? -x : x; }")
    lines.append("static inline long abs(long x) { return x < 0 ? -x : x; }")
    lines.append("static inline long long abs(long long x) { return x < 0 ? -x : x; }")
    lines.append("}")
    return "\n".join(lines)


PRELUDE = r"""#include <cstdint>
#include <limits>
#include <type_traits>
""" + _simd_decls() + "\n" + _math_decls() + r"""
template <typename T> static inline T md_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> static inline T md_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <typename T> static inline T md_floordiv(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    if (b == 0) return a / b;
    T mod = mdm::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return mdm::copysign(T(0), a / b);
    T fl = mdm::floor(div);
    return div - fl > T(0.5) ? fl + T(1) : fl;
  } else {
    T q = a / b;
    return ((a < 0) != (b < 0) && q * b != a) ? T(q - 1) : q;
  }
}
template <typename T> static inline T md_remainder(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    T m = mdm::fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
  } else {
    T m = a % b;
    return (m != 0 && ((b < 0) != (m < 0))) ? T(m + b) : m;
  }
}
template <typename T> static inline T md_fmod(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) return mdm::fmod(a, b); else return a % b;
}
template <typename T> static inline T md_sign(T a) { return T((T(0) < a) - (a < T(0))); }
// Non-temporal store of 16 floats (a 64-byte aligned line): large outputs written without first
// reading each line into the cache.
typedef float md_v16f __attribute__((vector_size(64)));
static inline void md_stream16(float* p, const float* v) {
#ifdef __AVX512F__
  md_v16f x; __builtin_memcpy(&x, v, 64); __builtin_ia32_movntps512(p, x);
#else
  for (int i = 0; i < 16; i++) p[i] = v[i];
#endif
}
static inline void md_sfence() {
#ifdef __AVX512F__
  __builtin_ia32_sfence();
#endif
}
// float32 exp and tanh written out so gcc inlines and vectorises them at full vector width
// (glibc's vector tanhf falls back to scalar calls).
static inline float md_pow2i(int32_t k) { return __builtin_bit_cast(float, (k + 127) << 23); }
static inline float md_exp_reduced(float x, int32_t& k) {
  // Cephes-style: exp(x) = 2^k * p, p = exp(r), |r| <= ln2/2, degree-6 polynomial; about 1 ulp.
  float n = mdm::nearbyint(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  k = static_cast<int32_t>(n);
  return p * r * r + r + 1.0f;
}
static inline float md_expf(float x) {
  float xc = x > 88.8f ? 88.8f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  int32_t k;
  float p = md_exp_reduced(xc, k);
  int32_t k1 = k >> 1;
  // Two scalings keep 2^k representable for the full range (denormal results, k = 128).
  return p * md_pow2i(k1) * md_pow2i(k - k1);
}
static inline float md_tanhf(float x) {
  float ax = mdm::abs(x);
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                 + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  // exp(2|x|) with |x| <= 44 needs no clamps and one scaling; a NaN flows through to the result.
  int32_t k;
  float e = md_exp_reduced(2.0f * (ax > 44.f ? 44.f : ax), k) * md_pow2i(k);
  return mdm::copysign(ax < 0.625f ? small : 1.0f - 2.0f / (e + 1.0f), x);
}
"""

# Memory a kernel group owns for one call (new values copied into its inputs at its end), freed on
# return; gcc builtins instead of <memory> and <cstring>, whose parsing cost ~0.3 s of each g++ run.
OWNED_MEMORY = r"""
struct md_owned {
  void* p;
  explicit md_owned(unsigned long n) : p(__builtin_malloc(n)) {}
  ~md_owned() { __builtin_free(p); }
  md_owned(const md_owned&) = delete;
  md_owned& operator=(const md_owned&) = delete;
};
"""
