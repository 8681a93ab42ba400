// A minimal test harness: TEST(name) { ... } registers a case; CHECK* failures are counted and printed.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace check {

struct Case {
  const char* name;
  std::function<void()> fn;
};
inline std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}
inline int& failures() {
  static int f = 0;
  return f;
}
struct Register {
  Register(const char* name, std::function<void()> fn) { cases().push_back({name, std::move(fn)}); }
};

}  // namespace check

#define TEST(name)                                                  \
  static void test_##name();                                        \
  static check::Register register_##name(#name, test_##name);       \
  static void test_##name()

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::printf("  FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
      ++check::failures();                                                       \
    }                                                                            \
  } while (0)

#define CHECK_NEAR(a, b, tol) CHECK(std::fabs(double(a) - double(b)) <= (tol))

// Runs `stmt`, expects it to throw E whose what() contains `needle`.
#define CHECK_THROWS(E, stmt, needle)                                                    \
  do {                                                                                   \
    bool thrown = false;                                                                 \
    try {                                                                                \
      stmt;                                                                              \
    } catch (const E& e) {                                                               \
      thrown = true;                                                                     \
      if (std::string(e.what()).find(needle) == std::string::npos) {                     \
        std::printf("  FAILED %s:%d: message lacks '%s': %s\n", __FILE__, __LINE__,      \
                    needle, e.what());                                                   \
        ++check::failures();                                                             \
      }                                                                                  \
    }                                                                                    \
    if (!thrown) {                                                                       \
      std::printf("  FAILED %s:%d: %s did not throw\n", __FILE__, __LINE__, #stmt);     \
      ++check::failures();                                                               \
    }                                                                                    \
  } while (0)
