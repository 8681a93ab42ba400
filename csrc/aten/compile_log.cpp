#include "aten/compile_log.h"

#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "aten/storage.h"

namespace torch_pjrt {
namespace {

std::atomic<bool>& log_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("TORCH_PJRT_LOG_COMPILES");
    return v && *v && std::string(v) != "0";
  }()};
  return on;
}

constexpr size_t kMaxRecords = 20000;
constexpr size_t kMaxHistory = 256;  // earlier programs' fields compared per op

struct Log {
  std::mutex mu;
  std::unordered_map<std::string, std::deque<KeyFields>> history;  // by op
  std::deque<CompileRecord> records;
};
Log& log() {
  static auto* l = new Log;  // never destroyed: programs may still be noted at exit
  return *l;
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "f32";
    case at::kDouble: return "f64";
    case at::kHalf: return "f16";
    case at::kBFloat16: return "bf16";
    case at::kLong: return "i64";
    case at::kInt: return "i32";
    case at::kShort: return "i16";
    case at::kChar: return "i8";
    case at::kByte: return "u8";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "c64";
    case at::kComplexDouble: return "c128";
    default: return c10::toString(t);
  }
}

template <class T>
std::string list_text(const T& values) {
  std::ostringstream o;
  o << "[";
  bool first = true;
  for (const auto& v : values) {
    o << (first ? "" : ", ") << v;
    first = false;
  }
  o << "]";
  return o.str();
}

std::string storage_text(const at::Tensor& t) {
  const StorageHandle& h = handle_of(t.storage());
  if (std::optional<lowering::BaseForm> p = pending_form(h))
    return dtype_name(scalar_type(p->elem)) + list_text(p->dims) + " (pending)";
  lowering::BaseForm f = base_form(t.storage());
  if (!f.present) return "unwritten, " + std::to_string(f.nbytes) + " bytes";
  std::string s = dtype_name(scalar_type(f.elem)) + list_text(f.dims);
  if (is_growable(t.storage())) s = "growable " + s + ", " + std::to_string(f.nbytes) + " bytes used";
  return s;
}

void tensor_fields(const std::string& name, const at::Tensor& t, KeyFields& out) {
  if (!t.defined()) {
    out.push_back({name, "None", "argument"});
    return;
  }
  if (t.device().type() != c10::DeviceType::PrivateUse1) {
    out.push_back({name, std::string(t.unsafeGetTensorImpl()->is_wrapped_number() ? "Python number " : "cpu tensor ") +
                             dtype_name(t.scalar_type()),
                   "argument"});
    return;
  }
  out.push_back({name + " dtype", dtype_name(t.scalar_type()), "dtype"});
  out.push_back({name + " shape", list_text(t.sizes()), "shape"});
  // what follows from the shape reads as such, so that a new shape is reported as one difference
  out.push_back({name + " strides", t.is_contiguous() ? "contiguous" : list_text(t.strides()), "stride"});
  out.push_back({name + " offset", offset_is_dynamic(t) ? "run-time" : std::to_string(t.storage_offset()), "offset"});
  std::string storage = storage_text(t);
  if (storage == dtype_name(t.scalar_type()) + list_text(t.sizes())) storage = "its own";
  out.push_back({name + " storage", storage, "storage"});
  if (t.is_conj() || t.is_neg())
    out.push_back({name + " view", t.is_conj() ? (t.is_neg() ? "conj, neg" : "conj") : "neg", "argument"});
}

std::string scalar_kind_text(const c10::Scalar& s) {
  if (s.isComplex()) return "complex";
  if (s.isBoolean()) return "bool";
  if (s.isIntegral(false)) return "int";
  return "float";
}

std::string scalar_text(const c10::Scalar& s) {
  std::ostringstream o;
  if (s.isComplex()) o << s.toComplexDouble();
  else if (s.isBoolean()) o << (s.toBool() ? "True" : "False");
  else if (s.isIntegral(false)) o << s.toLong();
  else o << s.toDouble();
  return o.str();
}

std::string ivalue_text(const c10::IValue& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

std::string tensor_signature(const at::Tensor& t) {
  if (!t.defined()) return "None";
  if (t.device().type() != c10::DeviceType::PrivateUse1) {
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return scalar_text(t.item());
    return "cpu " + dtype_name(t.scalar_type());
  }
  std::string s = dtype_name(t.scalar_type()) + list_text(t.sizes());
  if (!t.is_contiguous()) s += " strides " + list_text(t.strides());
  return s;
}

KeyFields call_fields(const torch::jit::Stack& stack, size_t base, const std::vector<std::string>& names,
                      const std::vector<ArgKind>& kinds, bool baked_scalars, bool runtime_floats,
                      std::string* signature) {
  KeyFields out;
  std::string sig;
  auto add_sig = [&](const std::string& name, const std::string& text) {
    sig += (sig.empty() ? "" : ", ") + name + ": " + text;
  };
  for (size_t i = 0; i < kinds.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    const std::string& name = names[i];
    if (v.isNone()) {
      out.push_back({name, "None", "argument"});
      continue;
    }
    switch (kinds[i]) {
      case ArgKind::kTensor:
        tensor_fields(name, v.toTensor(), out);
        add_sig(name, tensor_signature(v.toTensor()));
        break;
      case ArgKind::kTensorList: {
        std::vector<at::Tensor> items;
        if (v.isTensorList()) {
          for (const at::Tensor& t : v.toTensorList()) items.push_back(t);
        } else {
          for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) items.push_back(t ? *t : at::Tensor());
        }
        out.push_back({name + " length", std::to_string(items.size()), "argument"});
        std::vector<std::string> sigs;
        for (size_t k = 0; k < items.size(); ++k) {
          tensor_fields(name + "[" + std::to_string(k) + "]", items[k], out);
          sigs.push_back(tensor_signature(items[k]));
        }
        add_sig(name, list_text(sigs));
        break;
      }
      case ArgKind::kScalar: {
        const c10::Scalar s = v.toScalar();
        std::string text = baked_scalars ? scalar_text(s) : "run-time " + scalar_kind_text(s);
        out.push_back({name, text, "argument"});
        add_sig(name, baked_scalars ? text : scalar_text(s));
        break;
      }
      case ArgKind::kScalarList: {
        std::vector<std::string> kinds_text;
        for (const auto& e : v.toListRef()) kinds_text.push_back(scalar_kind_text(e.toScalar()));
        out.push_back({name, "run-time " + list_text(kinds_text), "argument"});
        add_sig(name, ivalue_text(v));
        break;
      }
      case ArgKind::kDouble: {
        std::string text = runtime_floats ? "run-time float" : ivalue_text(v);
        out.push_back({name, text, "argument"});
        add_sig(name, ivalue_text(v));
        break;
      }
      case ArgKind::kDtype:
        out.push_back({name, dtype_name(static_cast<at::ScalarType>(v.toInt())), "argument"});
        add_sig(name, out.back().value);
        break;
      case ArgKind::kIgnored:
        if (!v.isInt()) break;  // generators: not part of the program
        [[fallthrough]];
      default:
        out.push_back({name, ivalue_text(v), "argument"});
        add_sig(name, out.back().value);
        break;
    }
  }
  if (signature) *signature = std::move(sig);
  return out;
}

void note_program(const std::string& op, const std::string& signature, KeyFields fields, const pjrt::Served& served) {
  if (served.from == pjrt::Served::kMemory) return;
  Log& l = log();
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    std::deque<KeyFields>& past = l.history[op];
    // the nearest earlier program: fewest fields that differ (or that only one of the two has)
    const KeyFields* nearest = nullptr;
    size_t best = SIZE_MAX;
    for (const KeyFields& p : past) {
      std::map<std::string, const std::string*> before;
      for (const KeyField& f : p) before[f.name] = &f.value;
      size_t diff = 0;
      for (const KeyField& f : fields) {
        auto it = before.find(f.name);
        if (it == before.end() || *it->second != f.value) ++diff;
        if (it != before.end()) before.erase(it);
      }
      diff += before.size();
      if (diff <= best) {  // ties: the most recent
        best = diff;
        nearest = &p;
      }
    }
    if (!nearest) {
      reason = "first program of " + op;
    } else {
      std::map<std::string, const KeyField*> before;
      for (const KeyField& f : *nearest) before[f.name] = &f;
      std::vector<std::string> kinds, details;
      auto kind = [&](const char* k) {
        if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
      };
      for (const KeyField& f : fields) {
        auto it = before.find(f.name);
        if (it == before.end()) {
          kind(f.kind);
          details.push_back(f.name + " " + f.value + " (none before)");
        } else {
          if (it->second->value != f.value) {
            kind(f.kind);
            details.push_back(f.name + " " + f.value + " (was " + it->second->value + ")");
          }
          before.erase(it);
        }
      }
      for (const auto& [name, f] : before) {
        kind(f->kind);
        details.push_back(name + " gone (was " + f->value + ")");
      }
      if (details.empty()) {
        reason = "same key parts as an earlier program, another program text";
      } else {
        std::string k;
        for (const auto& x : kinds) k += (k.empty() ? "" : ", ") + x;
        reason = "new " + k + ": ";
        for (size_t i = 0; i < details.size() && i < 4; ++i) reason += (i ? "; " : "") + details[i];
        if (details.size() > 4) reason += "; and " + std::to_string(details.size() - 4) + " more";
      }
    }
    past.push_back(std::move(fields));
    if (past.size() > kMaxHistory) past.pop_front();
    l.records.push_back({op, signature, reason, served.from == pjrt::Served::kDisk, served.seconds});
    if (l.records.size() > kMaxRecords) l.records.pop_front();
  }
  if (log_flag().load(std::memory_order_relaxed)) {
    std::fprintf(stderr, "tpu: new program: %s(%s) [%s %.3f s]: %s\n", op.c_str(), signature.c_str(),
                 served.from == pjrt::Served::kDisk ? "loaded from disk in" : "compiled in", served.seconds,
                 reason.c_str());
    std::fflush(stderr);
  }
}

std::vector<CompileRecord> compile_records() {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mu);
  return std::vector<CompileRecord>(l.records.begin(), l.records.end());
}

void reset_compile_report() {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mu);
  l.records.clear();
}

void set_log_compiles(bool on) { log_flag().store(on); }
bool log_compiles() { return log_flag().load(); }

}  // namespace torch_pjrt
