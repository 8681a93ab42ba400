// A StableHLO program builder that prints MLIR text in the generic form ("stablehlo.op"(...) {attrs} :
// (types) -> types), which every plugin since 2024 parses. One Builder makes one module with one public
// function @main. Shapes are checked as ops are added: a mismatch is a bug in a lowering, reported as
// hlo::Error with the op's name and the offending types.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pjrt/element_type.h"

namespace hlo {

using pjrt::ElementType;
using Dims = std::vector<int64_t>;

class Error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Which variant the calling thread is lowering (Builder::per_variant): -1 outside any per_variant scope,
// else 0 or 1. A lowering whose choice differs between the variants calls note_variant_choice() in
// variant 0, so that per_variant lowers variant 1 too.
int lowering_variant();
void note_variant_choice();

struct Type {
  ElementType elem = ElementType::kInvalid;
  Dims dims;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  std::string str() const;  // tensor<2x3xf32>
  bool operator==(const Type&) const = default;
};

struct Value {
  int id = -1;
  Type type;
  bool valid() const { return id >= 0; }
  ElementType elem() const { return type.elem; }
  const Dims& dims() const { return type.dims; }
  int64_t rank() const { return type.rank(); }
};

enum class Cmp { EQ, NE, LT, LE, GT, GE };

struct GatherDims {
  Dims offset_dims, collapsed_slice_dims, start_index_map;
  int64_t index_vector_dim = 0;
};
struct ScatterDims {
  Dims update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
};

class Builder {
 public:
  using Body = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;

  Value arg(Type type, const std::string& attrs = "");
  void ret(const std::vector<Value>& results);
  // The module as variant `variant` of its per-target lowerings (per_variant below): 0 is the program
  // this process's device runs, 1 the program for a device without torch-pjrt's host kernels.
  // `plugin` ("cuda", "tpu"): with the functions add_functions was given for that plugin kind.
  std::string module_text(const std::string& name = "op", int variant = 0, const std::string& plugin = "") const;

  // Lowering for several targets at once (deviceless compiles for other devices, pjrt/aot.h). Choices
  // that depend on the device (a host kernel's custom call, chlo.ragged_dot) are made inside per_variant:
  // while `two_variants` is set, `fn` runs once for variant 0, and again for variant 1 only if it made
  // such a choice (note_variant_choice); each run's text is kept, and module_text renders one of them.
  // Otherwise `fn` runs once, inline. The results are the same values in both variants (same types).
  std::vector<Value> per_variant(const std::function<std::vector<Value>()>& fn);
  bool has_variants() const { return !variants_.empty(); }
  // Why a variant-1 lowering threw, if one did: the module then holds variant 0's text in its place, so
  // that this device's program is unchanged (the targets' program is not valid; aten/aot.h says so).
  const std::string& variant_error() const { return variant_error_; }
  static bool two_variants;  // set once, before any lowering, when deviceless targets are configured

  // Device-side checks (aten/device_checks.h): a lowering that can meet an invalid value (an index out of
  // range) adds a check. `code` is an s64[2]: {1 + the flat position of the first offending element, or 0
  // when none offends; that element's value}. `message` is what the CPU would raise, with "{value}" standing
  // for that value and "{position}" for its flat position; an IndexError where `index_error`, else a
  // RuntimeError. The program's maker returns the codes with its results (one s64[2 * n] output) and the
  // runtime reads them at the next sync point.
  // Checks are made at the function's top level only (a value inside a region cannot be returned).
  struct Check {
    Value code;
    std::string message;
    bool index_error = false;
  };
  // False when checks are off (TORCH_PJRT_DEVICE_CHECKS=0, read once): rows then add none.
  static bool device_checks;
  bool can_check() const { return device_checks && indent_ == 4; }
  void add_check(Check c);
  const std::vector<Check>& checks() const { return checks_; }

  // Constants: a splat of `v` converted to `type` (bool for pred: v != 0).
  Value constant(double v, const Type& type);
  Value constant_i(int64_t v, const Type& type);
  Value scalar(double v, ElementType t) { return constant(v, Type{t, {}}); }
  Value scalar_i(int64_t v, ElementType t) { return constant_i(v, Type{t, {}}); }

  // Elementwise (operand types must match): "add", "subtract", "multiply", "divide", "remainder",
  // "maximum", "minimum", "power", "and", "or", "xor", "atan2", "shift_left", ...
  Value binary(const char* op, Value a, Value b);
  // "negate", "abs", "exponential", "log", "sqrt", "rsqrt", "tanh", "logistic", "floor", "ceil",
  // "sine", "cosine", "not", "sign", "log_plus_one", "exponential_minus_one", "round_nearest_even", ...
  Value unary(const char* op, Value a);
  // A unary op whose result type differs (stablehlo.real, stablehlo.imag, stablehlo.abs of complex).
  Value unary_to(const char* op, Value a, ElementType result);
  Value chlo_unary(const char* op, Value a);  // chlo.erf, chlo.lgamma, ...
  Value compare(Cmp dir, Value a, Value b);
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value lo, Value x, Value hi);
  Value complex(Value re, Value im);

  Value convert(Value a, ElementType to);  // no-op when already `to`
  Value bitcast_convert(Value a, const Type& to);
  Value broadcast_in_dim(Value a, const Dims& out_dims, const Dims& broadcast_dims);
  Value broadcast_to(Value a, const Dims& out_dims);  // numpy-style, trailing alignment
  Value reshape(Value a, const Dims& dims);
  Value transpose(Value a, const Dims& perm);
  Value slice(Value a, const Dims& start, const Dims& limit, const Dims& strides);
  Value dynamic_slice(Value a, const std::vector<Value>& starts, const Dims& sizes);
  Value dynamic_update_slice(Value a, Value update, const std::vector<Value>& starts);
  Value concatenate(const std::vector<Value>& parts, int64_t dim);
  Value pad(Value a, Value pad_value, const Dims& low, const Dims& high, const Dims& interior);
  Value iota(const Type& type, int64_t dim);
  Value reverse(Value a, const Dims& dims);
  Value dot_general(Value a, Value b, const Dims& lhs_batch, const Dims& rhs_batch,
                    const Dims& lhs_contract, const Dims& rhs_contract, ElementType result);
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const Dims& dims, const Body& body);
  Value reduce_window(Value input, Value init, const Dims& window, const Dims& strides,
                      const Dims& base_dilations, const Dims& window_dilations,
                      const std::vector<std::pair<int64_t, int64_t>>& padding, const Body& body);
  Value gather(Value operand, Value indices, const GatherDims& dims, const Dims& slice_sizes,
               const Dims& result_dims);
  Value scatter(Value operand, Value indices, Value updates, const ScatterDims& dims, const Body& body);
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dim, bool stable, const Body& cmp);
  // stablehlo.case: runs only branches[index] (index a 0-d s32; out of range runs the last branch).
  // Each branch builds its results from values outside (captured) and returns `results`' types.
  std::vector<Value> case_of(Value index, const std::vector<Body>& branches, const std::vector<Type>& results);
  // stablehlo.while over the loop state `init`: `cond` maps the state to a 0-d pred, `body` to the next
  // state (same types). Pass every value the regions use through the state (no implicit captures).
  std::vector<Value> while_loop(const std::vector<Value>& init, const Body& cond, const Body& body);
  Value convolution(Value input, Value kernel, const std::string& dim_numbers, const Dims& strides,
                    const std::vector<std::pair<int64_t, int64_t>>& padding, const Dims& lhs_dilation,
                    const Dims& rhs_dilation, int64_t feature_groups, int64_t batch_groups,
                    const Type& result);
  // Returns {new_state, bits} with bits of `bits_type` (ui32/ui64 elements).
  std::pair<Value, Value> rng_bit_generator(Value state, const Type& bits_type);

  // Collectives over replica groups (each a list of replica ids; the program is compiled with one
  // replica per participant). `body` reduces two scalars of the operand's type.
  using Groups = std::vector<Dims>;
  Value all_reduce(Value a, const Groups& groups, const Body& body);
  Value all_gather(Value a, int64_t dim, const Groups& groups);
  Value reduce_scatter(Value a, int64_t dim, const Groups& groups, const Body& body);
  Value all_to_all(Value a, int64_t split_dim, int64_t concat_dim, const Groups& groups);

  // Escape hatch for ops without a helper: appends `%N = <text> : <signature>` and returns %N.
  Value raw(const std::string& op_and_operands, const std::string& attrs,
            const std::vector<Value>& operands, const Type& result);

  // Functions from another producer (a JAX-lowered module's func.func definitions, already renamed so that
  // they cannot clash: python/torch_pjrt/jax_ops.py) appended to this module once, and a call of one of them.
  // The callee's signature must be `operands`' types to `results`; XLA inlines the call.
  // `by_plugin`: the same functions as lowered for another plugin kind's targets ("cuda", "tpu"; same names
  // and signatures), rendered by module_text(name, variant, plugin).
  void add_functions(const std::string& text, const std::map<std::string, std::string>& by_plugin = {});
  // The plugin kinds some added functions have their own text for.
  std::vector<std::string> function_plugins() const;
  std::vector<Value> call(const std::string& callee, const std::vector<Value>& operands,
                          const std::vector<Type>& results);

  // stablehlo.custom_call of a typed-FFI handler (api_version 4) with one or more results.
  std::vector<Value> custom_call(const std::string& target, const std::vector<Value>& operands,
                                 const std::vector<Type>& results);

  std::string name(const Value& v) const;

  // Makes a costly value (see costly_) a buffer of its own before broadcast_in_dim widens it by
  // kMaterializeAbove elements or more. Set once by the lowering layer (a host kernel's copy on XLA:CPU);
  // without it values are broadcast as they are.
  static Value (*materialize)(Builder&, Value);
  static constexpr int64_t kMaterializeAbove = 4096;

  // A matrix product as dot_general's operands give it, when it has one contracting dim and its batch
  // dims lead both operands in order: a is [batch..., M, K] or (a_t) [batch..., K, M], b is
  // [batch..., K, N] or (b_t) [batch..., N, K], the result [batch..., M, N]. An operand that is a
  // transpose of its last two dims (a linear layer's weight, x^T in a weight's gradient) is given as the
  // value it transposes, with its flag flipped.
  struct Product {
    Value a, b;
    bool a_t = false, b_t = false;
    ElementType result = ElementType::kInvalid;
  };
  // Offered every such product first; returns an invalid Value to leave it to stablehlo.dot_general. Set
  // once by the lowering layer (a host kernel on XLA:CPU).
  static Value (*product)(Builder&, const Product&);

  // What a value was made from, for rows that read through a layout op instead of the copy XLA would
  // write: the value a reshape (or a chain of them) made `v` from, else `v` itself; the operand and
  // broadcast_dimensions of a broadcast_in_dim that made `v`, else nullptr.
  Value reshaped_from(const Value& v) const;
  const std::pair<Value, Dims>* broadcast_of(const Value& v) const;

 private:
  Value fresh(Type t);
  std::vector<Value> emit(const std::string& op, const std::vector<Value>& operands,
                          const std::string& attrs, const std::vector<Type>& results,
                          const std::vector<std::string>& regions = {});
  std::string region(const std::vector<Type>& arg_types, const Body& body);
  // stablehlo.dot_general as given (dot_general offers products to `product` first)
  Value dot(Value a, Value b, const Dims& lhs_batch, const Dims& rhs_batch, const Dims& lhs_contract,
            const Dims& rhs_contract, ElementType result);
  std::string expand_variants(const std::string& text, int variant) const;
  std::string ref(const Value& v) const;  // %vN, or %gM#i for a result of a multi-result op
  bool as_product(Value a, Value b, const Dims& lhs_batch, const Dims& rhs_batch, const Dims& lhs_contract,
                  const Dims& rhs_contract, ElementType result, Product* p) const;
  bool costly(const Value& v) const { return v.id < static_cast<int>(costly_.size()) && costly_[v.id]; }

  // Values that compute sine or cosine (also through elementwise and layout ops after it): XLA's loop
  // fusion would compute them again for every element a broadcast makes of them (the tiny Llama's rotary
  // cos and sin, [32, 16], once per element of each [8, 4, 32, 16] query and key: its compiled forward
  // 1.30-1.37 -> 1.23-1.25 ms materialized). Indexed by value id.
  std::vector<bool> costly_;
  // Values made by transposing the last two dims of another (Product's operands), and by reshaping
  // another (so that a view read back in its base's shape is the base itself), by value id
  std::unordered_map<int, Value> swapped_of_, reshaped_of_;
  std::unordered_map<int, std::pair<Value, Dims>> broadcast_of_;  // by value id: (operand, broadcast dims)

  struct Alias {
    int group, first_id, count;
  };
  std::vector<Alias> aliases_;

  // per_variant's texts: a line "//@variant K" in the body stands for variants_[K][variant]
  std::vector<std::pair<std::string, std::string>> variants_;
  std::string variant_error_;

  int next_id_ = 0;
  std::vector<std::pair<Type, std::string>> args_;
  std::vector<int> arg_ids_;
  std::string body_;
  struct Functions {
    std::string text;
    std::map<std::string, std::string> by_plugin;
  };
  std::vector<Functions> functions_;  // add_functions' texts, each once, after @main
  std::string* out_ = &body_;
  int indent_ = 4;
  std::vector<Type> results_;
  std::vector<Check> checks_;  // add_check's, in order
  std::vector<int> result_ids_;
  bool returned_ = false;
};

std::string dims_attr(const Dims& d);  // array<i64: 1, 2>

}  // namespace hlo
