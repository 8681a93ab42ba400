#include "hlo/builder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <cstring>
#include <sstream>
#include <unordered_map>

namespace hlo {
namespace {

std::string join(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i]);
  }
  return s;
}

std::string list(const Dims& d) { return "[" + join(d) + "]"; }

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& p) {
  std::string s = "dense<";
  if (p.empty()) return "dense<> : tensor<0x2xi64>";
  s += "[";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += ", ";
    s += "[" + std::to_string(p[i].first) + ", " + std::to_string(p[i].second) + "]";
  }
  s += "]> : tensor<" + std::to_string(p.size()) + "x2xi64>";
  return s;
}

const char* cmp_name(Cmp c) {
  switch (c) {
    case Cmp::EQ: return "EQ";
    case Cmp::NE: return "NE";
    case Cmp::LT: return "LT";
    case Cmp::LE: return "LE";
    case Cmp::GT: return "GT";
    case Cmp::GE: return "GE";
  }
  return "EQ";
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error("hlo: " + what);
}

}  // namespace

Value (*Builder::materialize)(Builder&, Value) = nullptr;
Value (*Builder::product)(Builder&, const Product&) = nullptr;

std::string dims_attr(const Dims& d) { return "array<i64" + (d.empty() ? std::string() : ": " + join(d)) + ">"; }

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string Type::str() const {
  std::string s = "tensor<";
  for (int64_t d : dims) s += std::to_string(d) + "x";
  s += pjrt::mlir_name(elem);
  s += ">";
  return s;
}

std::string Builder::name(const Value& v) const {
  require(v.valid(), "use of an invalid value");
  return "%v" + std::to_string(v.id);
}

Value Builder::fresh(Type t) { return Value{next_id_++, std::move(t)}; }

Value Builder::arg(Type type, const std::string& attrs) {
  Value v = fresh(type);
  args_.emplace_back(type, attrs);
  arg_ids_.push_back(v.id);
  return v;
}

bool Builder::device_checks = [] {
  const char* v = std::getenv("TORCH_PJRT_DEVICE_CHECKS");
  return !(v && std::string(v) == "0");
}();

void Builder::add_check(Check c) {
  require(can_check(), "add_check: checks are off, or inside a region");
  require(c.code.type == (Type{ElementType::kS64, {2}}), "add_check: the code must be an s64[2]");
  checks_.push_back(std::move(c));
}

void Builder::ret(const std::vector<Value>& results) {
  require(!returned_, "ret called twice");
  returned_ = true;
  for (const auto& r : results) {
    results_.push_back(r.type);
    result_ids_.push_back(r.id);
  }
}

std::string Builder::module_text(const std::string& name, int variant, const std::string& plugin) const {
  require(returned_, "module has no return");
  std::string s = "module @" + name +
                  " attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
                  "  func.func public @main(";
  for (size_t i = 0; i < args_.size(); ++i) {
    if (i) s += ", ";
    s += "%v" + std::to_string(arg_ids_[i]) + ": " + args_[i].first.str();
    if (!args_[i].second.empty()) s += " {" + args_[i].second + "}";
  }
  s += ") -> (";
  for (size_t i = 0; i < results_.size(); ++i) {
    if (i) s += ", ";
    s += results_[i].str();
  }
  s += ") {\n" + body_ + "    \"func.return\"(";
  for (size_t i = 0; i < result_ids_.size(); ++i) {
    if (i) s += ", ";
    s += ref(Value{result_ids_[i], results_[i]});
  }
  s += ") : (";
  for (size_t i = 0; i < results_.size(); ++i) {
    if (i) s += ", ";
    s += results_[i].str();
  }
  s += ") -> ()\n  }\n";
  for (const auto& f : functions_) {
    auto own = plugin.empty() ? f.by_plugin.end() : f.by_plugin.find(plugin);
    s += own == f.by_plugin.end() ? f.text : own->second;
  }
  s += "}\n";
  return variants_.empty() ? s : expand_variants(s, variant);
}

namespace {

// Elementwise ops that cost many instructions per element but that XLA's fusion counts as cheap, so it
// fuses them into a consumer that reads each element many times (a broadcast) and computes them again for
// each read. Seen in XLA:CPU's optimized programs for sine and cosine; the ops it counts as expensive
// (exponential, log, power, divide, ...) it keeps out of such fusions itself.
bool cheap_to_xla_but_costly(const std::string& op) {
  return op == "stablehlo.sine" || op == "stablehlo.cosine" || op == "stablehlo.tan";
}

// Ops a loop fusion computes element by element from their operands' elements: a costly operand makes
// their result costly too.
bool elementwise_or_layout(const std::string& op) {
  static const char* const names[] = {
      "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide", "stablehlo.negate",
      "stablehlo.maximum", "stablehlo.minimum", "stablehlo.select", "stablehlo.clamp", "stablehlo.convert",
      "stablehlo.reshape", "stablehlo.transpose", "stablehlo.slice", "stablehlo.concatenate",
      "stablehlo.broadcast_in_dim", "stablehlo.abs", "stablehlo.sqrt", "stablehlo.rsqrt", "stablehlo.compare",
      "stablehlo.reverse", "stablehlo.pad"};
  for (const char* n : names)
    if (op == n) return true;
  return false;
}

}  // namespace

std::vector<Value> Builder::emit(const std::string& op, const std::vector<Value>& operands,
                                 const std::string& attrs, const std::vector<Type>& results,
                                 const std::vector<std::string>& regions) {
  bool costly_operand = false;
  for (const Value& v : operands) costly_operand |= costly(v);
  const bool costly_result = cheap_to_xla_but_costly(op) || (costly_operand && elementwise_or_layout(op));
  std::vector<Value> out;
  std::string& o = *out_;
  o.append(indent_, ' ');
  // A multi-result op binds a group `%gM:k`; its results get consecutive ids referenced as %gM#i.
  if (results.size() == 1) {
    out.push_back(fresh(results[0]));
    o += name(out[0]) + " = ";
  } else if (results.size() > 1) {
    int group = next_id_++;
    o += "%g" + std::to_string(group) + ":" + std::to_string(results.size()) + " = ";
    for (size_t i = 0; i < results.size(); ++i) out.push_back(fresh(results[i]));
    aliases_.push_back({group, out.front().id, static_cast<int>(results.size())});
  }
  o += "\"" + op + "\"(";
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) o += ", ";
    o += ref(operands[i]);
  }
  o += ")";
  if (!regions.empty()) {
    o += " (";
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i) o += ", ";
      o += regions[i];
    }
    o += ")";
  }
  if (!attrs.empty()) o += " {" + attrs + "}";
  o += " : (";
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) o += ", ";
    o += operands[i].type.str();
  }
  o += ") -> ";
  if (results.size() == 1) {
    o += results[0].str();
  } else {
    o += "(";
    for (size_t i = 0; i < results.size(); ++i) {
      if (i) o += ", ";
      o += results[i].str();
    }
    o += ")";
  }
  o += "\n";
  if (costly_result) {
    costly_.resize(next_id_, false);
    for (const Value& v : out) costly_[v.id] = true;
  }
  return out;
}

std::string Builder::region(const std::vector<Type>& arg_types, const Body& body) {
  std::string text = "{\n";
  std::string* saved = out_;
  int saved_indent = indent_;
  out_ = &text;
  indent_ = saved_indent + 4;
  std::vector<Value> block_args;
  text.append(saved_indent + 2, ' ');
  text += "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    Value v = fresh(arg_types[i]);
    block_args.push_back(v);
    if (i) text += ", ";
    text += name(v) + ": " + v.type.str();
  }
  text += "):\n";
  std::vector<Value> results = body(*this, block_args);
  text.append(indent_, ' ');
  text += "\"stablehlo.return\"(";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) text += ", ";
    text += ref(results[i]);
  }
  text += ") : (";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) text += ", ";
    text += results[i].type.str();
  }
  text += ") -> ()\n";
  text.append(saved_indent, ' ');
  text += "}";
  out_ = saved;
  indent_ = saved_indent;
  return text;
}

std::string Builder::ref(const Value& v) const {
  for (const auto& a : aliases_) {
    if (v.id >= a.first_id && v.id < a.first_id + a.count) {
      return "%g" + std::to_string(a.group) + "#" + std::to_string(v.id - a.first_id);
    }
  }
  return name(v);
}

// ----------------------------------------------------------------------------------------- constants

Value Builder::constant(double v, const Type& type) {
  Value c;
  if (type.elem == ElementType::kPred) {
    c = emit("stablehlo.constant", {}, std::string("value = dense<") + (v != 0 ? "true" : "false") + "> : tensor<i1>",
             {Type{ElementType::kPred, {}}})[0];
  } else if (pjrt::is_integral(type.elem)) {
    return constant_i(static_cast<int64_t>(v), type);
  } else {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%016llX", static_cast<unsigned long long>(bits));
    c = emit("stablehlo.constant", {}, std::string("value = dense<") + hex + "> : tensor<f64>",
             {Type{ElementType::kF64, {}}})[0];
    if (pjrt::is_complex(type.elem)) {
      Value re = convert(c, pjrt::real_type(type.elem));
      Value im = convert(scalar(0.0, ElementType::kF64), pjrt::real_type(type.elem));
      c = complex(re, im);
    } else {
      c = convert(c, type.elem);
    }
  }
  if (type.dims.empty()) return c;
  return broadcast_in_dim(c, type.dims, {});
}

Value Builder::constant_i(int64_t v, const Type& type) {
  if (!pjrt::is_integral(type.elem)) return constant(static_cast<double>(v), type);
  Value c = emit("stablehlo.constant", {}, "value = dense<" + std::to_string(v) + "> : tensor<i64>",
                 {Type{ElementType::kS64, {}}})[0];
  c = convert(c, type.elem);
  if (type.dims.empty()) return c;
  return broadcast_in_dim(c, type.dims, {});
}

// --------------------------------------------------------------------------------------- elementwise

// StableHLO's element types per op (bool, integer, float, complex), for the ops that do not take every
// type: a row that emits one for another type fails here, at lowering (its op then runs on the CPU, which
// raises its own error), not later in a compile (under fused eager, a whole stream's).
static void require_element_types(const char* op, const Value& a) {
  enum : int { B = 1, I = 2, F = 4, C = 8 };
  static const std::unordered_map<std::string, int> allowed = {
      {"not", B | I}, {"and", B | I}, {"or", B | I}, {"xor", B | I}, {"shift_left", I},
      {"shift_right_arithmetic", I}, {"shift_right_logical", I}, {"popcnt", I}, {"count_leading_zeros", I},
      {"abs", I | F | C}, {"negate", I | F | C}, {"sign", I | F | C}, {"divide", I | F | C},
      {"remainder", I | F | C}, {"power", I | F | C}, {"exponential", F | C}, {"log", F | C}, {"sqrt", F | C},
      {"rsqrt", F | C}, {"tanh", F | C}, {"sine", F | C}, {"cosine", F | C}, {"floor", F}, {"ceil", F},
      {"logistic", F | C}, {"exponential_minus_one", F | C}, {"log_plus_one", F | C}, {"cbrt", F | C},
      {"round_nearest_afz", F}, {"round_nearest_even", F}, {"atan2", F | C}};
  auto it = allowed.find(op);
  if (it == allowed.end()) return;
  const ElementType t = a.elem();
  const int kind = t == ElementType::kPred ? B : pjrt::is_integral(t) ? I : pjrt::is_complex(t) ? C : F;
  require(it->second & kind, std::string("stablehlo.") + op + " does not take operands of " + a.type.str());
}

Value Builder::binary(const char* op, Value a, Value b) {
  require(a.type == b.type, std::string(op) + ": operand types differ: " + a.type.str() + " vs " + b.type.str());
  require_element_types(op, a);
  return emit(std::string("stablehlo.") + op, {a, b}, "", {a.type})[0];
}

Value Builder::unary(const char* op, Value a) {
  require_element_types(op, a);
  return emit(std::string("stablehlo.") + op, {a}, "", {a.type})[0];
}

Value Builder::unary_to(const char* op, Value a, ElementType result) {
  return emit(std::string("stablehlo.") + op, {a}, "", {Type{result, a.type.dims}})[0];
}

Value Builder::chlo_unary(const char* op, Value a) { return emit(std::string("chlo.") + op, {a}, "", {a.type})[0]; }

Value Builder::compare(Cmp dir, Value a, Value b) {
  require(a.type == b.type, "compare: operand types differ: " + a.type.str() + " vs " + b.type.str());
  const char* kind = "FLOAT";
  if (pjrt::is_signed_int(a.elem())) kind = "SIGNED";
  if (pjrt::is_unsigned_int(a.elem()) || a.elem() == ElementType::kPred) kind = "UNSIGNED";
  std::string attrs = std::string("comparison_direction = #stablehlo<comparison_direction ") + cmp_name(dir) +
                      ">, compare_type = #stablehlo<comparison_type " + kind + ">";
  return emit("stablehlo.compare", {a, b}, attrs, {Type{ElementType::kPred, a.type.dims}})[0];
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  require(on_true.type == on_false.type, "select: branch types differ");
  require(pred.elem() == ElementType::kPred, "select: predicate is not i1");
  if (pred.dims() != on_true.dims()) pred = broadcast_to(pred, on_true.dims());
  return emit("stablehlo.select", {pred, on_true, on_false}, "", {on_true.type})[0];
}

Value Builder::clamp(Value lo, Value x, Value hi) {
  return emit("stablehlo.clamp", {lo, x, hi}, "", {x.type})[0];
}

Value Builder::complex(Value re, Value im) {
  require(re.type == im.type, "complex: part types differ");
  ElementType t = re.elem() == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64;
  return emit("stablehlo.complex", {re, im}, "", {Type{t, re.dims()}})[0];
}

Value Builder::convert(Value a, ElementType to) {
  if (a.elem() == to) return a;
  if (pjrt::is_complex(a.elem()) && !pjrt::is_complex(to)) {
    // torch semantics: complex -> real drops the imaginary part
    a = unary_to("real", a, pjrt::real_type(a.elem()));
    return convert(a, to);
  }
  if (to == ElementType::kPred && a.elem() != ElementType::kPred) {
    // nonzero -> true, like torch; a plain convert would do the same but keep NaN explicit
    return compare(Cmp::NE, a, constant(0, a.type));
  }
#if defined(__x86_64__) || defined(_M_X64)
  if (pjrt::is_float(a.elem()) && (pjrt::is_integral(to) && to != ElementType::kU32 && to != ElementType::kU64)) {
    // torch's CPU kernels on x86: a float converts through int32 (int64 for int64 results) with the
    // instruction's "integer indefinite" (the lowest value) for NaN and out-of-range values, then wraps to
    // narrower types; XLA saturates instead (as torch's kernels do on ARM hosts).
    const ElementType wide = to == ElementType::kS64 ? ElementType::kS64 : ElementType::kS32;
    const double limit = wide == ElementType::kS64 ? 9223372036854775808.0 : 2147483648.0;
    // (compared in the input's own type: a float32 detour lets XLA drop the input's rounding to half)
    Value in_range = a.elem() == ElementType::kF16  // every finite half is in range
                         ? compare(Cmp::LT, unary("abs", a), constant(INFINITY, a.type))
                         : binary("and", compare(Cmp::GE, a, constant(-limit, a.type)), compare(Cmp::LT, a, constant(limit, a.type)));
    Type wt{wide, a.type.dims};
    Value w = select(in_range, emit("stablehlo.convert", {a}, "", {wt})[0],
                     constant_i(wide == ElementType::kS64 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min(), wt));
    return wide == to ? w : emit("stablehlo.convert", {w}, "", {Type{to, a.type.dims}})[0];
  }
#endif
  return emit("stablehlo.convert", {a}, "", {Type{to, a.type.dims}})[0];
}

Value Builder::bitcast_convert(Value a, const Type& to) { return emit("stablehlo.bitcast_convert", {a}, "", {to})[0]; }

// -------------------------------------------------------------------------------------------- shapes

Value Builder::broadcast_in_dim(Value a, const Dims& out_dims, const Dims& broadcast_dims) {
  require(static_cast<int64_t>(broadcast_dims.size()) == a.rank(), "broadcast_in_dim: rank mismatch");
  bool identity = a.dims() == out_dims;
  for (int64_t i = 0; identity && i < a.rank(); ++i) identity = broadcast_dims[i] == i;
  if (identity) return a;
  if (materialize && costly(a) && Type{a.elem(), out_dims}.numel() - a.type.numel() >= kMaterializeAbove)
    a = per_variant([&] { return std::vector<Value>{materialize(*this, a)}; })[0];
  Value r = emit("stablehlo.broadcast_in_dim", {a}, "broadcast_dimensions = " + dims_attr(broadcast_dims),
                 {Type{a.elem(), out_dims}})[0];
  broadcast_of_[r.id] = {a, broadcast_dims};
  return r;
}

const std::pair<Value, Dims>* Builder::broadcast_of(const Value& v) const {
  auto it = broadcast_of_.find(v.id);
  return it == broadcast_of_.end() ? nullptr : &it->second;
}

Value Builder::reshaped_from(const Value& v) const {
  auto it = reshaped_of_.find(v.id);
  return it == reshaped_of_.end() ? v : it->second;
}

Value Builder::broadcast_to(Value a, const Dims& out_dims) {
  if (a.dims() == out_dims) return a;
  int64_t shift = static_cast<int64_t>(out_dims.size()) - a.rank();
  require(shift >= 0, "broadcast_to: cannot broadcast " + a.type.str() + " to rank " + std::to_string(out_dims.size()));
  // Drop size-1 dims that need expanding by reshaping first; broadcast_in_dim allows 1 -> n anyway.
  Dims bdims;
  for (int64_t i = 0; i < a.rank(); ++i) {
    require(a.dims()[i] == 1 || a.dims()[i] == out_dims[i + shift],
            "broadcast_to: " + a.type.str() + " vs " + list(out_dims));
    bdims.push_back(i + shift);
  }
  return broadcast_in_dim(a, out_dims, bdims);
}

Value Builder::reshape(Value a, const Dims& dims) {
  Type t{a.elem(), dims};
  require(t.numel() == a.type.numel(), "reshape: " + a.type.str() + " to " + t.str());
  auto it = reshaped_of_.find(a.id);  // a reshape of a reshape reshapes the first's operand
  if (it != reshaped_of_.end()) a = it->second;
  if (a.dims() == dims) return a;
  Value r = emit("stablehlo.reshape", {a}, "", {t})[0];
  reshaped_of_[r.id] = a;
  return r;
}

Value Builder::transpose(Value a, const Dims& perm) {
  bool identity = true;
  Dims out;
  for (size_t i = 0; i < perm.size(); ++i) {
    identity &= perm[i] == static_cast<int64_t>(i);
    out.push_back(a.dims().at(perm[i]));
  }
  if (identity) return a;
  const int64_t r = a.rank();
  bool last_two = r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
  for (int64_t i = 0; i + 2 < r; ++i) last_two &= perm[i] == i;
  if (last_two) {  // a swap of a swap is the value swapped
    auto it = swapped_of_.find(a.id);
    if (it != swapped_of_.end()) return it->second;
  }
  Value t = emit("stablehlo.transpose", {a}, "permutation = " + dims_attr(perm), {Type{a.elem(), out}})[0];
  if (last_two) swapped_of_[t.id] = a;
  return t;
}

Value Builder::slice(Value a, const Dims& start, const Dims& limit, const Dims& strides) {
  Dims out;
  bool identity = true;
  for (size_t i = 0; i < start.size(); ++i) {
    int64_t n = limit[i] > start[i] ? (limit[i] - start[i] + strides[i] - 1) / strides[i] : 0;
    out.push_back(n);
    identity &= start[i] == 0 && limit[i] == a.dims()[i] && strides[i] == 1;
  }
  if (identity) return a;
  std::string attrs = "start_indices = " + dims_attr(start) + ", limit_indices = " + dims_attr(limit) +
                      ", strides = " + dims_attr(strides);
  return emit("stablehlo.slice", {a}, attrs, {Type{a.elem(), out}})[0];
}

Value Builder::dynamic_slice(Value a, const std::vector<Value>& starts, const Dims& sizes) {
  std::vector<Value> ops{a};
  ops.insert(ops.end(), starts.begin(), starts.end());
  return emit("stablehlo.dynamic_slice", ops, "slice_sizes = " + dims_attr(sizes), {Type{a.elem(), sizes}})[0];
}

Value Builder::dynamic_update_slice(Value a, Value update, const std::vector<Value>& starts) {
  std::vector<Value> ops{a, update};
  ops.insert(ops.end(), starts.begin(), starts.end());
  return emit("stablehlo.dynamic_update_slice", ops, "", {a.type})[0];
}

Value Builder::concatenate(const std::vector<Value>& parts, int64_t dim) {
  require(!parts.empty(), "concatenate of nothing");
  if (parts.size() == 1) return parts[0];
  Dims out = parts[0].dims();
  out[dim] = 0;
  for (const auto& p : parts) out[dim] += p.dims()[dim];
  return emit("stablehlo.concatenate", parts, "dimension = " + std::to_string(dim) + " : i64",
              {Type{parts[0].elem(), out}})[0];
}

Value Builder::pad(Value a, Value pad_value, const Dims& low, const Dims& high, const Dims& interior) {
  Dims out;
  for (int64_t i = 0; i < a.rank(); ++i) {
    int64_t n = a.dims()[i];
    out.push_back(low[i] + high[i] + n + (n > 0 ? (n - 1) * interior[i] : 0));
  }
  std::string attrs = "edge_padding_low = " + dims_attr(low) + ", edge_padding_high = " + dims_attr(high) +
                      ", interior_padding = " + dims_attr(interior);
  return emit("stablehlo.pad", {a, pad_value}, attrs, {Type{a.elem(), out}})[0];
}

Value Builder::iota(const Type& type, int64_t dim) {
  return emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(dim) + " : i64", {type})[0];
}

Value Builder::reverse(Value a, const Dims& dims) {
  if (dims.empty()) return a;
  return emit("stablehlo.reverse", {a}, "dimensions = " + dims_attr(dims), {a.type})[0];
}

// Products of float32 operands at full float32 precision, as torch computes them by default
// (torch.get_float32_matmul_precision() == "highest"): DEFAULT lets a GPU compiler use TF32 and a TPU
// one a single bfloat16 pass. Other types have one precision.
static std::string f32_precision(const Value& a, const Value& b) {
  auto f32 = [](ElementType t) { return t == ElementType::kF32 || t == ElementType::kC64; };
  if (!f32(a.elem()) && !f32(b.elem())) return "";
  return ", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]";
}

// dot_general's operands as a Product (see builder.h), or false when they are not one
bool Builder::as_product(Value a, Value b, const Dims& lhs_batch, const Dims& rhs_batch, const Dims& lhs_contract,
                         const Dims& rhs_contract, ElementType result, Product* p) const {
  const int64_t nb = static_cast<int64_t>(lhs_batch.size());
  if (lhs_batch != rhs_batch || lhs_contract.size() != 1 || rhs_contract.size() != 1 || a.rank() != nb + 2 ||
      b.rank() != nb + 2)
    return false;
  for (int64_t i = 0; i < nb; ++i)
    if (lhs_batch[i] != i) return false;
  if (lhs_contract[0] < nb || rhs_contract[0] < nb) return false;
  p->a = a, p->b = b, p->result = result;
  p->a_t = lhs_contract[0] == nb;
  p->b_t = rhs_contract[0] == nb + 1;
  for (auto [v, t] : {std::pair{&p->a, &p->a_t}, std::pair{&p->b, &p->b_t}}) {
    auto it = swapped_of_.find(v->id);
    if (it != swapped_of_.end()) *v = it->second, *t = !*t;
  }
  return true;
}

Value Builder::dot_general(Value a, Value b, const Dims& lhs_batch, const Dims& rhs_batch,
                           const Dims& lhs_contract, const Dims& rhs_contract, ElementType result) {
  Product p;
  if (product && as_product(a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result, &p)) {
    return per_variant([&] {
      Value v = product(*this, p);
      return std::vector<Value>{v.valid() ? v : dot(a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result)};
    })[0];
  }
  return dot(a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result);
}

Value Builder::dot(Value a, Value b, const Dims& lhs_batch, const Dims& rhs_batch, const Dims& lhs_contract,
                   const Dims& rhs_contract, ElementType result) {
  Dims out;
  for (int64_t d : lhs_batch) out.push_back(a.dims()[d]);
  auto free_dims = [&](const Value& v, const Dims& batch, const Dims& contract) {
    for (int64_t i = 0; i < v.rank(); ++i) {
      bool used = false;
      for (int64_t d : batch) used |= d == i;
      for (int64_t d : contract) used |= d == i;
      if (!used) out.push_back(v.dims()[i]);
    }
  };
  free_dims(a, lhs_batch, lhs_contract);
  free_dims(b, rhs_batch, rhs_contract);
  std::string dn = "dot_dimension_numbers = #stablehlo.dot<";
  std::vector<std::string> fields;
  if (!lhs_batch.empty()) fields.push_back("lhs_batching_dimensions = " + list(lhs_batch));
  if (!rhs_batch.empty()) fields.push_back("rhs_batching_dimensions = " + list(rhs_batch));
  if (!lhs_contract.empty()) fields.push_back("lhs_contracting_dimensions = " + list(lhs_contract));
  if (!rhs_contract.empty()) fields.push_back("rhs_contracting_dimensions = " + list(rhs_contract));
  for (size_t i = 0; i < fields.size(); ++i) dn += (i ? ", " : "") + fields[i];
  dn += ">" + f32_precision(a, b);
  return emit("stablehlo.dot_general", {a, b}, dn, {Type{result, out}})[0];
}

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                                   const Dims& dims, const Body& body) {
  std::vector<Type> results;
  std::vector<Type> block;
  for (const auto& in : inputs) {
    Dims out;
    for (int64_t i = 0; i < in.rank(); ++i) {
      bool reduced = false;
      for (int64_t d : dims) reduced |= d == i;
      if (!reduced) out.push_back(in.dims()[i]);
    }
    results.push_back(Type{in.elem(), out});
    block.push_back(Type{in.elem(), {}});
  }
  std::vector<Type> block_args = block;
  block_args.insert(block_args.end(), block.begin(), block.end());
  std::string r = region(block_args, body);
  std::vector<Value> ops = inputs;
  ops.insert(ops.end(), inits.begin(), inits.end());
  return emit("stablehlo.reduce", ops, "dimensions = " + dims_attr(dims), results, {r});
}

Value Builder::reduce_window(Value input, Value init, const Dims& window, const Dims& strides,
                             const Dims& base_dilations, const Dims& window_dilations,
                             const std::vector<std::pair<int64_t, int64_t>>& padding, const Body& body) {
  Dims out;
  for (int64_t i = 0; i < input.rank(); ++i) {
    int64_t n = input.dims()[i];
    int64_t dn = n > 0 ? (n - 1) * base_dilations[i] + 1 : 0;
    int64_t padded = dn + padding[i].first + padding[i].second;
    int64_t dw = (window[i] - 1) * window_dilations[i] + 1;
    out.push_back(padded < dw ? 0 : (padded - dw) / strides[i] + 1);
  }
  Type scalar_t{input.elem(), {}};
  std::string r = region({scalar_t, scalar_t}, body);
  std::string attrs = "window_dimensions = " + dims_attr(window) + ", window_strides = " + dims_attr(strides) +
                      ", base_dilations = " + dims_attr(base_dilations) +
                      ", window_dilations = " + dims_attr(window_dilations) + ", padding = " + padding_attr(padding);
  return emit("stablehlo.reduce_window", {input, init}, attrs, {Type{input.elem(), out}}, {r})[0];
}

Value Builder::gather(Value operand, Value indices, const GatherDims& d, const Dims& slice_sizes,
                      const Dims& result_dims) {
  std::string attrs = "dimension_numbers = #stablehlo.gather<offset_dims = " + list(d.offset_dims) +
                      ", collapsed_slice_dims = " + list(d.collapsed_slice_dims) +
                      ", start_index_map = " + list(d.start_index_map) +
                      ", index_vector_dim = " + std::to_string(d.index_vector_dim) +
                      ">, slice_sizes = " + dims_attr(slice_sizes) + ", indices_are_sorted = false";
  return emit("stablehlo.gather", {operand, indices}, attrs, {Type{operand.elem(), result_dims}})[0];
}

Value Builder::scatter(Value operand, Value indices, Value updates, const ScatterDims& d, const Body& body) {
  Type scalar_t{operand.elem(), {}};
  std::string r = region({scalar_t, scalar_t}, body);
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " +
                      list(d.update_window_dims) + ", inserted_window_dims = " + list(d.inserted_window_dims) +
                      ", scatter_dims_to_operand_dims = " + list(d.scatter_dims_to_operand_dims) +
                      ", index_vector_dim = " + std::to_string(d.index_vector_dim) +
                      ">, indices_are_sorted = false, unique_indices = false";
  return emit("stablehlo.scatter", {operand, indices, updates}, attrs, {operand.type}, {r})[0];
}

namespace {

// replica_groups = dense<[[0, 1]]> : tensor<1x2xi64> (groups of equal size, as the attribute requires)
std::string groups_attr(const Builder::Groups& groups) {
  std::string s = "replica_groups = dense<[";
  for (size_t g = 0; g < groups.size(); ++g) {
    s += g ? ", [" : "[";
    for (size_t i = 0; i < groups[g].size(); ++i) s += (i ? ", " : "") + std::to_string(groups[g][i]);
    s += "]";
  }
  return s + "]> : tensor<" + std::to_string(groups.size()) + "x" + std::to_string(groups.empty() ? 0 : groups[0].size()) +
         "xi64>";
}

}  // namespace

Value Builder::all_reduce(Value a, const Groups& groups, const Body& body) {
  Type scalar_t{a.elem(), {}};
  std::string r = region({scalar_t, scalar_t}, body);
  return emit("stablehlo.all_reduce", {a}, groups_attr(groups), {a.type}, {r})[0];
}

Value Builder::all_gather(Value a, int64_t dim, const Groups& groups) {
  Type t = a.type;
  t.dims[dim] *= static_cast<int64_t>(groups.at(0).size());
  return emit("stablehlo.all_gather", {a}, "all_gather_dim = " + std::to_string(dim) + " : i64, " + groups_attr(groups),
              {t})[0];
}

Value Builder::reduce_scatter(Value a, int64_t dim, const Groups& groups, const Body& body) {
  Type scalar_t{a.elem(), {}};
  std::string r = region({scalar_t, scalar_t}, body);
  Type t = a.type;
  t.dims[dim] /= static_cast<int64_t>(groups.at(0).size());
  return emit("stablehlo.reduce_scatter", {a}, "scatter_dimension = " + std::to_string(dim) + " : i64, " +
              groups_attr(groups), {t}, {r})[0];
}

Value Builder::all_to_all(Value a, int64_t split_dim, int64_t concat_dim, const Groups& groups) {
  int64_t n = static_cast<int64_t>(groups.at(0).size());
  Type t = a.type;
  t.dims[split_dim] /= n;
  t.dims[concat_dim] *= n;
  return emit("stablehlo.all_to_all", {a}, "split_dimension = " + std::to_string(split_dim) +
              " : i64, concat_dimension = " + std::to_string(concat_dim) + " : i64, split_count = " +
              std::to_string(n) + " : i64, " + groups_attr(groups), {t})[0];
}

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dim, bool stable, const Body& cmp) {
  std::vector<Type> block;
  std::vector<Type> results;
  for (const auto& in : inputs) {
    block.push_back(Type{in.elem(), {}});
    block.push_back(Type{in.elem(), {}});
    results.push_back(in.type);
  }
  std::string r = region(block, cmp);
  std::string attrs = "dimension = " + std::to_string(dim) + " : i64, is_stable = " + (stable ? "true" : "false");
  return emit("stablehlo.sort", inputs, attrs, results, {r});
}

std::vector<Value> Builder::case_of(Value index, const std::vector<Body>& branches, const std::vector<Type>& results) {
  require(index.type == Type{ElementType::kS32, {}}, "case: the index must be one 0-d s32");
  std::vector<std::string> regions;
  for (const Body& branch : branches)
    regions.push_back(region({}, [&](Builder& b, const std::vector<Value>& none) {
      std::vector<Value> r = branch(b, none);
      require(r.size() == results.size(), "case: a branch returns another number of results");
      for (size_t i = 0; i < r.size(); ++i)
        require(r[i].type == results[i], "case: branch result " + std::to_string(i) + " has type " + r[i].type.str());
      return r;
    }));
  return emit("stablehlo.case", {index}, "", results, regions);
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& init, const Body& cond, const Body& body) {
  std::vector<Type> types;
  for (const auto& v : init) types.push_back(v.type);
  std::string c = region(types, [&](Builder& b, const std::vector<Value>& s) {
    std::vector<Value> r = cond(b, s);
    require(r.size() == 1 && r[0].type == Type{ElementType::kPred, {}}, "while: the condition must be one 0-d pred");
    return r;
  });
  std::string r = region(types, [&](Builder& b, const std::vector<Value>& s) {
    std::vector<Value> next = body(b, s);
    require(next.size() == types.size(), "while: the body must return the whole state");
    for (size_t i = 0; i < next.size(); ++i)
      require(next[i].type == types[i], "while: state " + std::to_string(i) + " changes type to " + next[i].type.str());
    return next;
  });
  return emit("stablehlo.while", init, "", types, {c, r});
}

Value Builder::convolution(Value input, Value kernel, const std::string& dim_numbers, const Dims& strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding, const Dims& lhs_dilation,
                           const Dims& rhs_dilation, int64_t feature_groups, int64_t batch_groups,
                           const Type& result) {
  std::string attrs = "dimension_numbers = #stablehlo.conv<" + dim_numbers + ">, window_strides = " +
                      dims_attr(strides) + ", padding = " + padding_attr(padding) +
                      ", lhs_dilation = " + dims_attr(lhs_dilation) + ", rhs_dilation = " + dims_attr(rhs_dilation) +
                      ", feature_group_count = " + std::to_string(feature_groups) +
                      " : i64, batch_group_count = " + std::to_string(batch_groups) + " : i64" +
                      f32_precision(input, kernel);
  return emit("stablehlo.convolution", {input, kernel}, attrs, {result})[0];
}

std::pair<Value, Value> Builder::rng_bit_generator(Value state, const Type& bits_type) {
  auto out = emit("stablehlo.rng_bit_generator", {state}, "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>",
                  {state.type, bits_type});
  return {out[0], out[1]};
}

std::vector<Value> Builder::custom_call(const std::string& target, const std::vector<Value>& operands,
                                        const std::vector<Type>& results) {
  return emit("stablehlo.custom_call", operands,
              "call_target_name = \"" + target + "\", api_version = 4 : i32, backend_config = {}", results);
}

void Builder::add_functions(const std::string& text, const std::map<std::string, std::string>& by_plugin) {
  auto lines = [](const std::string& t) { return t.empty() || t.back() == '\n' ? t : t + "\n"; };
  Functions f{lines(text), {}};
  for (const auto& [plugin, t] : by_plugin) f.by_plugin[plugin] = lines(t);
  for (const auto& g : functions_)
    if (g.text == f.text) return;
  functions_.push_back(std::move(f));
}

std::vector<std::string> Builder::function_plugins() const {
  std::vector<std::string> out;
  for (const auto& f : functions_)
    for (const auto& [plugin, t] : f.by_plugin)
      if (std::find(out.begin(), out.end(), plugin) == out.end()) out.push_back(plugin);
  return out;
}

std::vector<Value> Builder::call(const std::string& callee, const std::vector<Value>& operands,
                                 const std::vector<Type>& results) {
  require(!callee.empty(), "func.call without a callee");
  return emit("func.call", operands, "callee = @" + callee, results);
}

Value Builder::raw(const std::string& op, const std::string& attrs, const std::vector<Value>& operands,
                   const Type& result) {
  return emit(op, operands, attrs, {result})[0];
}

}  // namespace hlo
