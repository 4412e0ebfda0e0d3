// What flows along a graph edge at run time: a tensor, a sequence of tensors (or of maps, as
// ai.onnx.ml's ZipMap makes), or an optional.
#pragma once

#include <vector>

#include "kiln/tensor.h"

namespace kiln {

struct Value {
  // kMap is only ever an element kind: a sequence's items are maps.
  enum class Kind : uint8_t { kTensor, kSequence, kOptional, kMap };

  Kind kind = Kind::kTensor;
  Tensor tensor;                 // kTensor, or an optional's tensor element
  std::vector<Tensor> sequence;  // kSequence, or an optional's sequence element
  DType sequence_dtype = DType::kUndefined;  // element type, so that empty sequences keep it
  bool has_element = false;                  // kOptional only
  Kind element_kind = Kind::kTensor;         // kOptional: what it holds (or would hold);
                                             // kSequence: kTensor, or kMap for maps
  // A sequence of maps: item i maps the 1-D sequence_keys[i] (int64 or string) to the values of
  // the same length in sequence[i]; sequence_dtype is the values' type.
  std::vector<Tensor> sequence_keys;

  static Value of(Tensor t) {
    Value v;
    v.tensor = std::move(t);
    return v;
  }
  static Value of_sequence(std::vector<Tensor> items, DType dtype) {
    Value v;
    v.kind = Kind::kSequence;
    v.sequence = std::move(items);
    v.sequence_dtype = dtype;
    return v;
  }
  static Value of_map_sequence(std::vector<Tensor> keys, std::vector<Tensor> values, DType dtype) {
    Value v = of_sequence(std::move(values), dtype);
    v.element_kind = Kind::kMap;
    v.sequence_keys = std::move(keys);
    return v;
  }
  // An optional holding `inner` (a tensor or sequence Value).
  static Value optional_of(Value inner) {
    inner.element_kind = inner.kind;
    inner.kind = Kind::kOptional;
    inner.has_element = true;
    return inner;
  }
  static Value empty_optional(Kind element_kind, DType dtype) {
    Value v;
    v.kind = Kind::kOptional;
    v.element_kind = element_kind;
    v.sequence_dtype = dtype;
    return v;
  }
  bool is_tensor() const { return kind == Kind::kTensor; }
  bool is_sequence() const { return kind == Kind::kSequence; }
  bool is_optional() const { return kind == Kind::kOptional; }
  bool is_map_sequence() const { return kind == Kind::kSequence && element_kind == Kind::kMap; }
};

}  // namespace kiln
