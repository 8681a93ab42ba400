// Builder::per_variant: one program lowered for two kinds of device at once (builder.h). Each variant's
// text is captured by pointing the builder's output at a string of its own; the body keeps a marker line
// where the texts go, and module_text puts one variant's text there. Both variants end by binding their
// results to the same names (an identity reshape each), so the code after them reads one set of values.
#include <cstring>

#include "hlo/builder.h"

namespace hlo {

bool Builder::two_variants = false;

namespace {
constexpr char kMarker[] = "//@variant ";
thread_local int t_variant = -1;   // lowering_variant()
thread_local int64_t t_choices = 0;  // note_variant_choice() calls, for per_variant to compare
}  // namespace

int lowering_variant() { return t_variant; }
void note_variant_choice() { ++t_choices; }

std::vector<Value> Builder::per_variant(const std::function<std::vector<Value>()>& fn) {
  if (!two_variants || t_variant >= 0) return fn();  // one variant, or already inside a per_variant
  std::string* const out = out_;
  // The checks fn adds (add_check) are each variant's own values: their codes are returned as results
  // too, so that both variants bind them to the same names.
  const size_t first_check = checks_.size();
  size_t num_results = 0;
  auto run = [&](int variant, std::string& text) {
    struct Restore {  // the builder's output and the thread's variant, also when fn throws
      Builder& b;
      std::string* out;
      ~Restore() { b.out_ = out, t_variant = -1; }
    } restore{*this, out};
    out_ = &text;
    t_variant = variant;
    checks_.resize(first_check);
    std::vector<Value> r = fn();
    num_results = r.size();
    for (size_t i = first_check; i < checks_.size(); ++i) r.push_back(checks_[i].code);
    return r;
  };
  // fn's results, and the checks' codes (now those of `values`) back in checks_
  auto split = [&](std::vector<Value> values, size_t n) {
    for (size_t i = n; i < values.size(); ++i) checks_[first_check + i - n].code = values[i];
    values.resize(n);
    return values;
  };
  std::string text0, text1;
  const int64_t choices = t_choices;
  std::vector<Value> r0 = run(0, text0);
  const size_t n0 = num_results;
  if (t_choices == choices) {  // nothing depended on the device: one text for both
    *out += text0;
    return split(r0, n0);
  }
  const std::vector<Check> checks0(checks_.begin() + static_cast<std::ptrdiff_t>(first_check), checks_.end());
  std::vector<Value> r1;
  try {
    r1 = run(1, text1);
  } catch (const std::exception& e) {  // the targets' lowering must not change this device's program
    if (variant_error_.empty()) variant_error_ = e.what();
    checks_.resize(first_check);
    checks_.insert(checks_.end(), checks0.begin(), checks0.end());
    *out += text0;
    return split(r0, n0);
  }
  if (checks_.size() - first_check != checks0.size()) throw Error("per_variant: the variants make different checks");
  checks_.resize(first_check);
  checks_.insert(checks_.end(), checks0.begin(), checks0.end());
  if (r0.size() != r1.size()) throw Error("per_variant: the variants return different numbers of values");
  std::vector<Value> joined(r0.size());
  for (size_t i = 0; i < r0.size(); ++i) {
    if (r0[i].valid() != r1[i].valid() || (r0[i].valid() && !(r0[i].type == r1[i].type)))
      throw Error("per_variant: result " + std::to_string(i) + " differs between the variants: " +
                  (r0[i].valid() ? r0[i].type.str() : "none") + " and " + (r1[i].valid() ? r1[i].type.str() : "none"));
    if (!r0[i].valid()) continue;
    joined[i] = fresh(r0[i].type);
    const std::string t = r0[i].type.str();
    const std::string bind = std::string(indent_, ' ') + name(joined[i]) + " = \"stablehlo.reshape\"(";
    text0 += bind + ref(r0[i]) + ") : (" + t + ") -> " + t + "\n";
    text1 += bind + ref(r1[i]) + ") : (" + t + ") -> " + t + "\n";
    if (costly(r0[i]) || costly(r1[i])) {
      costly_.resize(next_id_, false);
      costly_[joined[i].id] = true;
    }
  }
  *out += std::string(indent_, ' ') + kMarker + std::to_string(variants_.size()) + "\n";
  variants_.emplace_back(std::move(text0), std::move(text1));
  return split(std::move(joined), n0);
}

std::string Builder::expand_variants(const std::string& text, int variant) const {
  std::string s;
  s.reserve(text.size() * 2);
  size_t at = 0;
  while (true) {
    size_t m = text.find(kMarker, at);
    if (m == std::string::npos) break;
    size_t line = text.rfind('\n', m);
    line = line == std::string::npos ? 0 : line + 1;  // the marker's indent goes with it
    size_t end = text.find('\n', m);
    const size_t k = std::stoul(text.substr(m + std::strlen(kMarker), end - m - std::strlen(kMarker)));
    s.append(text, at, line - at);
    s += variant == 0 ? variants_.at(k).first : variants_.at(k).second;
    at = end + 1;
  }
  s.append(text, at, std::string::npos);
  return s;
}

}  // namespace hlo
