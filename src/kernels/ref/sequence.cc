// Sequence ops: construct, read, insert, erase, split a tensor into one, concatenate one, and
// SequenceMap (a body graph applied to each element).
#include "kernels/kernel_util.h"
#include "kernels/ref/tensor_list.h"

namespace kiln {
namespace {

Result<const Value*> sequence_input(const KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i) || !ctx.value(i).is_sequence())
    return ctx.error("input " + std::to_string(i) + " must be a sequence");
  return &ctx.value(i);
}

// Input i, which must be given and be a tensor (a model can name a sequence, or no value, there).
Result<const Tensor*> tensor_input(const KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i) || !ctx.value(i).is_tensor())
    return ctx.error("input " + std::to_string(i) + " must be a tensor");
  return &ctx.input(i);
}

// A position input (possibly negative) checked against a sequence of `size` items; `size` itself
// is valid when `allow_end` (for inserting at the end).
Result<int64_t> position(const KernelContext& ctx, size_t i, int64_t size, bool allow_end) {
  KILN_ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, i));
  KILN_ASSIGN_OR_RETURN(double p, read_scalar(*t));
  int64_t pos = static_cast<int64_t>(p);
  if (pos < 0) pos += size;
  if (pos < 0 || pos > size || (pos == size && !allow_end))
    return ctx.error("position " + std::to_string(static_cast<int64_t>(p)) + " is out of range for a sequence of " +
                     std::to_string(size));
  return pos;
}

Status sequence_empty(KernelContext& ctx) {
  ctx.outputs[0] = Value::of_sequence({}, static_cast<DType>(ctx.node.attr_int("dtype", 1)));
  return Status::ok();
}

Status sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || !ctx.value(i).is_tensor()) return ctx.error("inputs must be tensors");
    if (!items.empty() && ctx.input(i).dtype() != items[0].dtype()) return ctx.error("inputs differ in type");
    items.push_back(ctx.input(i));
  }
  DType t = items.empty() ? DType::kFloat32 : items[0].dtype();
  ctx.outputs[0] = Value::of_sequence(std::move(items), t);
  return Status::ok();
}

Status sequence_at(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* seq, sequence_input(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t pos, position(ctx, 1, static_cast<int64_t>(seq->sequence.size()), false));
  ctx.set_output(0, seq->sequence[pos]);
  return Status::ok();
}

Status sequence_insert(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* seq, sequence_input(ctx, 0));
  if (!ctx.has_input(1) || !ctx.value(1).is_tensor()) return ctx.error("input 1 must be a tensor");
  std::vector<Tensor> items = seq->sequence;
  int64_t pos = static_cast<int64_t>(items.size());
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(pos, position(ctx, 2, pos, true));
  }
  if (seq->sequence_dtype != DType::kUndefined && ctx.input(1).dtype() != seq->sequence_dtype && !items.empty())
    return ctx.error("tensor type does not match the sequence");
  items.insert(items.begin() + pos, ctx.input(1));
  ctx.outputs[0] = Value::of_sequence(std::move(items), ctx.input(1).dtype());
  return Status::ok();
}

Status sequence_erase(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* seq, sequence_input(ctx, 0));
  std::vector<Tensor> items = seq->sequence;
  if (items.empty()) return ctx.error("cannot erase from an empty sequence");
  int64_t pos = static_cast<int64_t>(items.size()) - 1;
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(pos, position(ctx, 1, static_cast<int64_t>(items.size()), false));
  }
  items.erase(items.begin() + pos);
  ctx.outputs[0] = Value::of_sequence(std::move(items), seq->sequence_dtype);
  return Status::ok();
}

Status sequence_length(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* seq, sequence_input(ctx, 0));
  ctx.set_output(0, Tensor::scalar<int64_t>(DType::kInt64, static_cast<int64_t>(seq->sequence.size())));
  return Status::ok();
}

Status split_to_sequence(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Tensor* input, tensor_input(ctx, 0));
  const Tensor& x = *input;
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), x.rank()));
  const int64_t len = x.dim(axis);
  std::vector<int64_t> sizes;
  bool drop_axis = false;
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(const Tensor* split, tensor_input(ctx, 1));
    const Tensor& s = *split;
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, read_int64s(s));
    if (s.rank() > 1) return ctx.error("split must be a scalar or a 1-D tensor");
    if (s.rank() == 0) {
      if (v.empty() || v[0] <= 0) return ctx.error("split size must be positive");
      for (int64_t at = 0; at < len; at += v[0]) sizes.push_back(std::min(v[0], len - at));
    } else {
      int64_t sum = 0;
      for (int64_t n : v) {
        if (n < 0) return ctx.error("split sizes must not be negative");
        sum += n;
      }
      if (sum != len) return ctx.error("split sizes add up to " + std::to_string(sum) + ", not " + std::to_string(len));
      sizes = v;
    }
  } else {
    sizes.assign(len, 1);
    drop_axis = ctx.node.attr_int("keepdims", 1) == 0;
  }
  std::vector<Tensor> items;
  int64_t at = 0;
  for (int64_t n : sizes) {
    KILN_ASSIGN_OR_RETURN(Tensor part, take_range(x, axis, at, at + n));
    if (drop_axis) {
      Shape s = part.shape();
      s.erase(s.begin() + axis);
      part = part.reshaped(s);
    }
    items.push_back(std::move(part));
    at += n;
  }
  ctx.outputs[0] = Value::of_sequence(std::move(items), x.dtype());
  return Status::ok();
}

Status concat_from_sequence(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* seq, sequence_input(ctx, 0));
  if (seq->sequence.empty()) return ctx.error("cannot concatenate an empty sequence");
  const bool new_axis = ctx.node.attr_int("new_axis", 0) != 0;
  auto joined = join_tensors(seq->sequence, ctx.node.attr_int("axis", 0), new_axis);
  if (!joined) return ctx.error(joined.status().message());
  ctx.set_output(0, std::move(joined).value());
  return Status::ok();
}

Status sequence_map(KernelContext& ctx) {
  const ir::Attribute* body_attr = ctx.node.attr("body");
  if (!body_attr || !body_attr->g) return ctx.error("missing body graph");
  KILN_ASSIGN_OR_RETURN(const Value* seq, sequence_input(ctx, 0));
  const size_t n = seq->sequence.size();
  std::vector<std::vector<Tensor>> results(ctx.num_outputs());
  for (size_t i = 0; i < n; ++i) {
    std::vector<Value> in{Value::of(seq->sequence[i])};
    for (size_t k = 1; k < ctx.num_inputs(); ++k) {
      const Value& extra = ctx.value(k);
      if (extra.is_sequence()) {
        if (extra.sequence.size() != n) return ctx.error("input sequences differ in length");
        in.push_back(Value::of(extra.sequence[i]));
      } else {
        in.push_back(extra);
      }
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Value> out, ctx.subgraphs->run(*body_attr->g, std::move(in)));
    for (size_t o = 0; o < results.size() && o < out.size(); ++o) results[o].push_back(out[o].tensor);
  }
  for (size_t o = 0; o < results.size(); ++o) {
    DType t = results[o].empty() ? body_attr->g->outputs[o].type.dtype : results[o][0].dtype();
    ctx.outputs[o] = Value::of_sequence(std::move(results[o]), t);
  }
  return Status::ok();
}

Status optional(KernelContext& ctx) {
  if (ctx.has_input(0)) {
    ctx.outputs[0] = Value::optional_of(ctx.value(0));
    return Status::ok();
  }
  const ir::Attribute* type = ctx.node.attr("type");
  if (!type) return ctx.error("an Optional without input needs the 'type' attribute");
  const bool seq = type->tp.kind == ir::TypeInfo::Kind::kSequence;
  DType dt = seq && type->tp.elem ? type->tp.elem->dtype : type->tp.dtype;
  ctx.outputs[0] = Value::empty_optional(seq ? Value::Kind::kSequence : Value::Kind::kTensor, dt);
  return Status::ok();
}

Status optional_has_element(KernelContext& ctx) {
  bool has = ctx.has_input(0) && (!ctx.value(0).is_optional() || ctx.value(0).has_element);
  ctx.set_output(0, Tensor::scalar<bool>(DType::kBool, has));
  return Status::ok();
}

Status optional_get_element(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("input is missing");
  Value v = ctx.value(0);
  if (v.is_optional()) {
    if (!v.has_element) return ctx.error("the optional input is empty");
    v.kind = v.element_kind;
    v.has_element = false;
  }
  ctx.outputs[0] = std::move(v);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "SequenceEmpty", sequence_empty);
KILN_REGISTER_KERNEL("", "SequenceConstruct", sequence_construct);
KILN_REGISTER_KERNEL("", "SequenceAt", sequence_at);
KILN_REGISTER_KERNEL("", "SequenceInsert", sequence_insert);
KILN_REGISTER_KERNEL("", "SequenceErase", sequence_erase);
KILN_REGISTER_KERNEL("", "SequenceLength", sequence_length);
KILN_REGISTER_KERNEL("", "SplitToSequence", split_to_sequence);
KILN_REGISTER_KERNEL("", "ConcatFromSequence", concat_from_sequence);
KILN_REGISTER_KERNEL("", "SequenceMap", sequence_map);
KILN_REGISTER_KERNEL("", "Optional", optional);
KILN_REGISTER_KERNEL("", "OptionalHasElement", optional_has_element);
KILN_REGISTER_KERNEL("", "OptionalGetElement", optional_get_element);

}  // namespace kiln
