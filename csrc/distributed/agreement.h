// Before each collective the ranks of a group agree on what they are about to do, through the group's
// c10d Store: each rank writes a one-line description of its call (the collective, its reduce op and
// root, dtypes and shapes) under the group's next sequence number and reads every other rank's. Ranks
// whose calls differ (another shape, another collective, collectives called in another order) raise a
// RuntimeError naming the collective, the group and each rank's call; a rank that does not come within
// the group's timeout (init_process_group(timeout=...)) is named as missing. Never a silent hang.
// TORCH_PJRT_DIST_CHECKS=0 turns the agreement off (the collective library's own timeout remains).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>

#include "distributed/group.h"

namespace torch_pjrt::distributed {

class Agreement {
 public:
  Agreement(c10::intrusive_ptr<c10d::Store> store, const Group& group);
  bool enabled() const { return enabled_; }
  // `call` describes this rank's call; `collective` names it in errors.
  void check(const char* collective, const std::string& call);

 private:
  std::string key(uint64_t seq, int rank) const;
  c10::intrusive_ptr<c10d::Store> store_;
  const Group& group_;
  uint64_t seq_ = 0;
  bool enabled_;
};

}  // namespace torch_pjrt::distributed
