// One process group as the tpu_dist backend sees it: this rank, the group's size and name, and which
// global rank each group rank is (for error messages and, later, device assignments).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_pjrt::distributed {

struct Group {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<uint64_t> global_ranks;  // group rank -> global rank
  std::chrono::milliseconds timeout{1800000};

  uint64_t global_rank(int r) const { return r < (int)global_ranks.size() ? global_ranks[r] : r; }
  // "group 'default_pg' (global ranks [0, 1])"
  std::string describe() const {
    std::string s = "group '" + name + "' (global ranks [";
    for (int r = 0; r < size; ++r) s += (r ? ", " : "") + std::to_string(global_rank(r));
    return s + "])";
  }
};

}  // namespace torch_pjrt::distributed
