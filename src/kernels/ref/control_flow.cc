// If, Loop and Scan: run their body graphs through ctx.subgraphs, in the scope of the node.
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/tensor_list.h"

namespace kiln {
namespace {

// Bodies loop at most this often without a trip count, so a model whose condition never turns
// false gets an error instead of a hang.
constexpr int64_t kMaxLoopIterations = int64_t{1} << 31;

const ir::Graph* graph_attr(const ir::Node& n, const char* name) {
  const ir::Attribute* a = n.attr(name);
  return a && a->g ? a->g.get() : nullptr;
}

Status if_kernel(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("missing condition");
  KILN_ASSIGN_OR_RETURN(double cond, read_scalar(ctx.input(0)));
  const ir::Graph* body = graph_attr(ctx.node, cond != 0 ? "then_branch" : "else_branch");
  if (!body) return ctx.error("missing branch graph");
  KILN_ASSIGN_OR_RETURN(std::vector<Value> outs, ctx.subgraphs->run(*body, {}));
  if (outs.size() != ctx.num_outputs())
    return ctx.error("branch returns " + std::to_string(outs.size()) + " values, the node has " +
                     std::to_string(ctx.num_outputs()) + " outputs");
  for (size_t i = 0; i < outs.size(); ++i) ctx.outputs[i] = std::move(outs[i]);
  return Status::ok();
}

// Stacks per-iteration scan outputs; zero iterations give an empty tensor of the body's type.
Result<Value> stack_scan_output(const std::vector<Value>& items, const ir::ValueInfo& info, int64_t axis,
                                bool reverse) {
  if (items.empty()) {
    DType t = info.type.dtype == DType::kUndefined ? DType::kFloat32 : info.type.dtype;
    Shape s{0};
    if (info.type.has_shape)
      for (const auto& d : info.type.shape) s.push_back(d.known() ? d.value : 0);
    KILN_ASSIGN_OR_RETURN(Tensor e, Tensor::make(t, s));
    return Value::of(std::move(e));
  }
  std::vector<Tensor> parts;
  for (const Value& v : items) {
    if (!v.is_tensor()) return Status::error("scan output '" + info.name + "' must be a tensor");
    parts.push_back(v.tensor);
  }
  if (reverse) std::reverse(parts.begin(), parts.end());
  KILN_ASSIGN_OR_RETURN(Tensor t, join_tensors(parts, axis, true));
  return Value::of(std::move(t));
}

Status loop_kernel(KernelContext& ctx) {
  const ir::Graph* body = graph_attr(ctx.node, "body");
  if (!body) return ctx.error("missing body graph");
  int64_t max_trips = kMaxLoopIterations;
  if (ctx.has_input(0)) {
    KILN_ASSIGN_OR_RETURN(double m, read_scalar(ctx.input(0)));
    max_trips = static_cast<int64_t>(m);
  }
  bool cond = true;
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(double c, read_scalar(ctx.input(1)));
    cond = c != 0;
  }
  const size_t carried = ctx.num_inputs() > 2 ? ctx.num_inputs() - 2 : 0;
  if (body->inputs.size() != carried + 2 || body->outputs.size() < carried + 1)
    return ctx.error("body has " + std::to_string(body->inputs.size()) + " inputs and " +
                     std::to_string(body->outputs.size()) + " outputs for " + std::to_string(carried) +
                     " loop-carried values");
  const size_t scans = body->outputs.size() - 1 - carried;
  if (ctx.num_outputs() > carried + scans) return ctx.error("more outputs than the body produces");
  std::vector<Value> state;
  for (size_t i = 0; i < carried; ++i) {
    if (!ctx.has_input(2 + i)) return ctx.error("loop-carried input " + std::to_string(i) + " is missing");
    state.push_back(ctx.value(2 + i));
  }
  std::vector<std::vector<Value>> scan_items(scans);
  for (int64_t it = 0; it < max_trips && cond; ++it) {
    if (it >= kMaxLoopIterations) return ctx.error("loop ran past " + std::to_string(kMaxLoopIterations) + " iterations");
    std::vector<Value> in;
    in.push_back(Value::of(Tensor::scalar<int64_t>(DType::kInt64, it)));
    in.push_back(Value::of(Tensor::scalar<bool>(DType::kBool, cond)));
    for (const Value& v : state) in.push_back(v);
    KILN_ASSIGN_OR_RETURN(std::vector<Value> out, ctx.subgraphs->run(*body, std::move(in)));
    if (!out[0].is_tensor() || !out[0].tensor.defined()) return ctx.error("body condition output is not a tensor");
    KILN_ASSIGN_OR_RETURN(double c, read_scalar(out[0].tensor));
    cond = c != 0;
    for (size_t i = 0; i < carried; ++i) state[i] = std::move(out[1 + i]);
    for (size_t i = 0; i < scans; ++i) scan_items[i].push_back(std::move(out[1 + carried + i]));
  }
  for (size_t i = 0; i < carried && i < ctx.num_outputs(); ++i) ctx.outputs[i] = std::move(state[i]);
  for (size_t i = 0; i < scans && carried + i < ctx.num_outputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(ctx.outputs[carried + i],
                          stack_scan_output(scan_items[i], body->outputs[1 + carried + i], 0, false));
  }
  return Status::ok();
}

// Scan (opset 9+): states, then scan inputs sliced along their axes. Opset 8 has a leading
// sequence_lens input and a batch axis 0 on every tensor; it is run batch by batch.
Status scan_kernel(KernelContext& ctx) {
  const ir::Graph* body = graph_attr(ctx.node, "body");
  if (!body) return ctx.error("missing body graph");
  const int64_t num_scan = ctx.node.attr_int("num_scan_inputs", -1);
  const bool v8 = ctx.opset < 9;
  const size_t first = v8 ? 1 : 0;
  if (num_scan <= 0 || ctx.num_inputs() < first + num_scan) return ctx.error("bad num_scan_inputs");
  const size_t num_state = ctx.num_inputs() - first - num_scan;
  const size_t num_scan_out = body->outputs.size() - num_state;
  auto axes_in = ctx.node.attr_ints("scan_input_axes");
  auto dirs_in = ctx.node.attr_ints(v8 ? "directions" : "scan_input_directions");
  auto axes_out = ctx.node.attr_ints("scan_output_axes");
  auto dirs_out = ctx.node.attr_ints("scan_output_directions");
  const int64_t batches = v8 ? ctx.input(first).dim(0) : 1;

  std::vector<std::vector<Value>> per_batch_outputs(ctx.num_outputs());
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<Value> state;
    for (size_t i = 0; i < num_state; ++i) {
      Tensor t = ctx.input(first + i);
      if (v8) {
        KILN_ASSIGN_OR_RETURN(t, take_slice(t, 0, b, false));
      }
      state.push_back(Value::of(t));
    }
    std::vector<Tensor> scan_in;
    int64_t steps = -1;
    for (int64_t i = 0; i < num_scan; ++i) {
      Tensor t = ctx.input(first + num_state + i);
      if (v8) {
        KILN_ASSIGN_OR_RETURN(t, take_slice(t, 0, b, false));
      }
      int64_t axis = i < static_cast<int64_t>(axes_in.size()) ? axes_in[i] : 0;
      KILN_ASSIGN_OR_RETURN(axis, normalize_axis(axis, t.rank()));
      if (axis != 0) {  // move the scan axis to the front so slices are contiguous
        std::vector<Tensor> slices;
        for (int64_t k = 0; k < t.dim(axis); ++k) {
          KILN_ASSIGN_OR_RETURN(Tensor s, take_slice(t, axis, k, false));
          slices.push_back(s);
        }
        KILN_ASSIGN_OR_RETURN(t, join_tensors(slices, 0, true));
      }
      if (steps >= 0 && t.dim(0) != steps) return ctx.error("scan inputs differ in length");
      steps = t.dim(0);
      scan_in.push_back(t);
    }
    std::vector<std::vector<Value>> outs(num_scan_out);
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<Value> in = state;
      for (int64_t i = 0; i < num_scan; ++i) {
        const bool rev = i < static_cast<int64_t>(dirs_in.size()) && dirs_in[i] == 1;
        KILN_ASSIGN_OR_RETURN(Tensor sl, take_slice(scan_in[i], 0, rev ? steps - 1 - s : s, false));
        in.push_back(Value::of(sl));
      }
      KILN_ASSIGN_OR_RETURN(std::vector<Value> out, ctx.subgraphs->run(*body, std::move(in)));
      for (size_t i = 0; i < num_state; ++i) state[i] = std::move(out[i]);
      for (size_t i = 0; i < num_scan_out; ++i) outs[i].push_back(std::move(out[num_state + i]));
    }
    for (size_t i = 0; i < num_state && i < ctx.num_outputs(); ++i) per_batch_outputs[i].push_back(state[i]);
    for (size_t i = 0; i < num_scan_out && num_state + i < ctx.num_outputs(); ++i) {
      const bool rev = i < dirs_out.size() && dirs_out[i] == 1;
      int64_t axis = i < axes_out.size() ? axes_out[i] : 0;
      const ir::ValueInfo& info = body->outputs[num_state + i];
      if (axis < 0 && !outs[i].empty()) axis += outs[i][0].tensor.rank() + 1;
      KILN_ASSIGN_OR_RETURN(Value v, stack_scan_output(outs[i], info, axis, rev));
      per_batch_outputs[num_state + i].push_back(std::move(v));
    }
  }
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    if (!v8) {
      ctx.outputs[o] = std::move(per_batch_outputs[o][0]);
      continue;
    }
    std::vector<Tensor> parts;
    for (const Value& v : per_batch_outputs[o]) parts.push_back(v.tensor);
    KILN_ASSIGN_OR_RETURN(Tensor t, join_tensors(parts, 0, true));
    ctx.set_output(o, std::move(t));
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "If", if_kernel);
// If computes nothing itself: it runs one branch, whose nodes run on their own kernels, and hands
// on the branch's outputs without a copy. Loop and Scan slice and join per-iteration values.
KILN_REGISTER_FAST_PATH("", "If", always_fast);
KILN_REGISTER_KERNEL("", "Loop", loop_kernel);
KILN_REGISTER_KERNEL("", "Scan", scan_kernel);

}  // namespace kiln
