#include "lowering/helpers.h"

namespace lowering {
namespace {
}  // namespace
}  // namespace lowering
