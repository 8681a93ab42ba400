#include "distributed/agreement.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>

namespace torch_pjrt::distributed {

namespace {

std::string seconds(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", t.count() / 1000.0);
  return buf;
}

}  // namespace

Agreement::Agreement(c10::intrusive_ptr<c10d::Store> store, const Group& group)
    : store_(std::move(store)), group_(group) {
  const char* v = std::getenv("TORCH_PJRT_DIST_CHECKS");
  enabled_ = group.size > 1 && !(v && std::strcmp(v, "0") == 0);
}

std::string Agreement::key(uint64_t seq, int rank) const {
  return "tpu_dist/agree/" + std::to_string(seq) + "/" + std::to_string(rank);
}

void Agreement::check(const char* collective, const std::string& call) {
  if (!enabled_) return;
  uint64_t seq = seq_++;
  std::vector<std::string> keys;
  for (int r = 0; r < group_.size; ++r) keys.push_back(key(seq, r));
  store_->set(keys[group_.rank], std::vector<uint8_t>(call.begin(), call.end()));
  // Every rank has read this rank's key of seq - 2 before writing its own key of seq - 1, which this
  // rank has read: nobody reads it any more.
  if (seq >= 2) store_->deleteKey(key(seq - 2, group_.rank));
  try {
    store_->wait(keys, group_.timeout);
  } catch (const std::exception& e) {
    std::string missing;
    for (int r = 0; r < group_.size; ++r)
      if (!store_->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(group_.global_rank(r));
    TORCH_CHECK(false, "tpu_dist: ", collective, " (collective #", seq, " of ", group_.describe(), ", called by global rank ",
                group_.global_rank(group_.rank), " as ", call, "): global rank(s) ", missing.empty() ? "?" : missing,
                " did not reach it within the group's timeout of ", seconds(group_.timeout),
                ". Every rank of a group must call the same collectives in the same order; a rank that skips one, "
                "or stopped, leaves the others waiting (set the timeout with init_process_group(timeout=...)).");
  }
  auto values = store_->multiGet(keys);
  bool same = true;
  for (auto& v : values) same = same && std::string(v.begin(), v.end()) == call;
  if (same) return;
  std::string calls;
  for (int r = 0; r < group_.size; ++r)
    calls += "\n  global rank " + std::to_string(group_.global_rank(r)) + ": " + std::string(values[r].begin(), values[r].end());
  TORCH_CHECK(false, "tpu_dist: ", collective, " (collective #", seq, " of ", group_.describe(),
              "): the ranks' calls differ; every rank of a group must call the same collective with the same dtypes "
              "and shapes, in the same order:", calls);
}

}  // namespace torch_pjrt::distributed
