// The lowering table itself: every overload has exactly one row (a second registration of an ATen
// overload for the same dispatch key would silently replace the first).
#include <map>
#include <string>

#include "check.h"
#include "lowering/table.h"

TEST(every_overload_has_one_row) {
  std::map<std::string, int> seen;
  for (const auto& row : lowering::table()) {
    CHECK(!row.overloads.empty());
    CHECK(row.fn != nullptr);
    for (const auto& o : row.overloads) {
      if (++seen[o] == 2) std::printf("  overload listed twice: %s\n", o.c_str());
    }
  }
  for (const auto& [name, n] : seen) CHECK(n == 1);
  CHECK(seen.size() > 300);
}
