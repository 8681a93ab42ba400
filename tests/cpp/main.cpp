#include <cstring>

#include "check.h"

int main(int argc, char** argv) {
  int ran = 0, failed = 0;
  for (const auto& c : check::cases()) {
    if (argc > 1 && std::strstr(c.name, argv[1]) == nullptr) continue;
    int before = check::failures();
    std::printf("[ RUN  ] %s\n", c.name);
    try {
      c.fn();
    } catch (const std::exception& e) {
      std::printf("  FAILED: uncaught exception: %s\n", e.what());
      ++check::failures();
    }
    bool ok = check::failures() == before;
    std::printf("[ %s ] %s\n", ok ? " OK " : "FAIL", c.name);
    ++ran;
    failed += ok ? 0 : 1;
  }
  std::printf("%d passed, %d failed\n", ran - failed, failed);
  return failed ? 1 : 0;
}
