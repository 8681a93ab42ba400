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

std::vector<Value> lower_row(const Row& row, Ctx& c) {
  // The advanced generator state is a result too: both variants' code after the row reads it.
  std::vector<Value> r = c.b.per_variant([&] {
    c.new_rng_state = Value{};
    std::vector<Value> v = row.fn(c);
    v.push_back(c.new_rng_state);
    return v;
  });
  c.new_rng_state = r.back();
  r.pop_back();
  return r;
}

const Value& Ctx::t(size_t i) const {
  const Arg& a = args.at(i);
  if (!a.value.valid()) throw hlo::Error("lowering: argument " + std::to_string(i) + " is not a tensor value");
  return a.value;
}

}  // namespace lowering
