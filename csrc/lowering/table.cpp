#include "lowering/table.h"

namespace lowering {
namespace {

std::vector<Row>& registry() {
  static std::vector<Row> rows;
  return rows;
}

}  // namespace

const std::vector<Row>& table() { return registry(); }

Rows::Rows(std::initializer_list<Row> rows) {
  for (const auto& r : rows) registry().push_back(r);
}

const Value& Ctx::t(size_t i) const {
  const Arg& a = args.at(i);
  if (!a.value.valid()) throw hlo::Error("lowering: argument " + std::to_string(i) + " is not a tensor value");
  return a.value;
}

}  // namespace lowering
