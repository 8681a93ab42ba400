// The view model inside a program (DESIGN.md, "Data model"). A storage holds one PJRT buffer, its base,
// in the shape and dtype of whatever wrote it last as a whole. A tensor is (dtype, sizes, strides,
// offset) over that storage. Reading a tensor materializes it from the base; writing a tensor produces a
// new base. Both are ordinary ops in the op's own program, so a view costs no extra execution.
#pragma once

#include "hlo/builder.h"

namespace lowering {

using hlo::Builder;
using hlo::Dims;
using hlo::Value;
using pjrt::ElementType;

struct ViewForm {
  ElementType elem;
  Dims sizes;
  Dims strides;  // in elements of `elem`
  int64_t offset = 0;
  // torch's lazy conjugate and negative views: the storage holds the plain values, reads apply these.
  bool conj = false;
  bool neg = false;
  // A view whose offset is a run-time input (DESIGN.md: "a view's form in the key, not its offset"): every
  // view but one spanning its whole storage from 0, so `t[i]` is one program for every i. The program's
  // builder sets `offset_value` (an s64 scalar) before reading or writing it; `offset` is then ignored.
  bool dynamic = false;
  Value offset_value;
  int64_t numel() const;
  int64_t extent() const;  // elements from the first addressed to one past the last (0 when empty)
  bool contiguous() const;  // row-major dense (size-1 dims may have any stride)
  Dims storage_order() const;  // dims by decreasing stride (ties in dim order)
};

struct BaseForm {
  bool present = false;  // false: never written (torch.empty); reads see zeros
  ElementType elem = ElementType::kInvalid;
  Dims dims;
  int64_t nbytes = 0;  // the storage's size in bytes
};

// True when writing `view` replaces the whole storage (so the old base need not be read).
bool covers_storage(const BaseForm& base, const ViewForm& view);

// `base` is the program argument holding the storage's buffer (ignored when !base_form.present).
Value read_view(Builder& b, const Value& base, const BaseForm& base_form, const ViewForm& view);

// Growable storages (DESIGN.md, "growing shapes"): a base kept as a flat array with room to spare, so a
// tensor that grows by a few elements per step (generate's input_ids) keeps the same program shapes until
// its capacity doubles. Reads of such a base take the view's geometry at run time.

// True when the base is a flat array holding more elements than the storage's bytes need.
bool has_spare_capacity(const BaseForm& base);

// Gathers `flat[idx]` for an s64 index array of any shape (indices clamped into the array).
Value gather_flat(Builder& b, const Value& flat, Value idx);

// A view read with run-time geometry: `flat` is the base as a 1-D array of the view's type, `offset` and
// `strides` are s64 scalars (program inputs), `sizes` are the view's static sizes.
Value read_view_dynamic(Builder& b, const Value& flat, const Dims& sizes, const Value& offset,
                        const std::vector<Value>& strides);

// Returns the storage's new base after writing `update` (of the view's type) through `view`. When the
// view covers the storage, that is `update` itself, and `new_form` reports its form.
Value write_view(Builder& b, const Value& base, const BaseForm& base_form, const ViewForm& view, Value update,
                 BaseForm* new_form);

}  // namespace lowering
