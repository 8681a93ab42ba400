// Device-side checks (hlo::Builder::add_check): out-of-range indices and invalid values raise, as on CUDA.
// A program whose rows made checks returns one more output, the checks' codes (an s64[2n]); launching it
// keeps that buffer with what each check reports, and the next sync point (a copy to the host, .item(),
// printing, torch.tpu.synchronize) reads every kept code of its device and raises the first failure as the
// CPU would have raised it (IndexError or RuntimeError, its words), naming the op. Under launch blocking
// (TORCH_PJRT_LAUNCH_BLOCKING=1) an eager op's checks are read at the op. TORCH_PJRT_DEVICE_CHECKS=0 makes
// no checks (hlo::Builder::device_checks).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hlo/builder.h"
#include "pjrt/runtime.h"

namespace torch_pjrt {

struct CheckInfo {
  std::string op;       // "aten::gather"
  std::string message;  // the CPU's words; "{value}" and "{position}" are filled in from the code
  bool index_error;
};
using CheckInfos = std::shared_ptr<const std::vector<CheckInfo>>;

// The builder's checks from index `from` on, as reported for `op` (appended to `infos`).
void note_checks(const hlo::Builder& b, size_t from, const std::string& op, std::vector<CheckInfo>& infos);
// All of the builder's checks' codes as one s64[2n] value: the program's last output where it has checks.
hlo::Value check_codes(hlo::Builder& b);
// Keeps a launched program's codes until the next sync point of `device`; with `now`, reads them at once
// (raising a failure).
void watch_checks(int device, pjrt::BufferPtr codes, const CheckInfos& infos, bool now);
// A sync point of `device`: reads every kept code, raises the first failure.
void raise_failed_checks(int device);

struct CheckCounts {
  int64_t pending = 0, read = 0, failed = 0;
};
CheckCounts check_counts();

}  // namespace torch_pjrt
