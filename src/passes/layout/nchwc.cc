// -O3 layout pass "nchwc-layout": runs convolutions in the blocked NCHWc layout (the scheme of
// ONNX Runtime's NchwcTransformer). Conv/FusedConv with constant weights become
// ai.kiln.BlockedConv (weights reordered here, once); pools, SqueezeExcite, Resizes of H and W,
// Add/Mul of equal channels, zero-preserving activations, channel Concats of whole blocks and
// FusedElementwise chains with per-channel operands (DenseNet's BN-ReLU) reading blocked values
// stay blocked, so a chain of them forms one region with a ReorderToBlocked where a plain value
// enters and a ReorderFromBlocked where a plain reader or graph output leaves.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/layout/nchwc_weights.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using epilogue::Types;
using namespace nchwc;

enum class Kind { kConv, kDepthwiseConv, kPool, kSqueezeExcite, kResize, kElementwise, kUnary, kConcat, kChain };

bool is_conv(const ir::Node& n) {
  return (n.domain.empty() && n.op_type == "Conv") ||
         (n.domain == "ai.kiln" && n.op_type == "FusedConv");
}

// Groups narrower than a block (resnext's first stage: 32 groups of 4 channels in and out): k
// = 8 / channels-a-group of them side by side make one group of a whole block, whose weights are
// block-diagonal. The zeros cost k times the multiply-adds, still well ahead of the plain
// grouped kernel for k <= 4 (resnext50's three: 4.8 ms plain). Returns k, or 0 when the conv's
// groups are not of that kind.
int64_t narrow_groups_merged(int64_t c, int64_t m, int64_t group) {
  if (group <= 1 || c % group != 0 || m % group != 0) return 0;
  const int64_t cg = c / group;
  if (cg != m / group || cg >= kBlock || kBlock % cg != 0) return 0;
  const int64_t k = kBlock / cg;
  return k <= 4 && group % k == 0 ? k : 0;
}

// W [M, cg, KH, KW] of `group` groups as the weights of group / k groups of k * cg channels:
// output channel o reads its own group's slot of its merged group, zeros elsewhere.
Tensor merged_group_weights(const Tensor& w, int64_t group, int64_t k) {
  const int64_t m = w.dim(0), cg = w.dim(1), taps = w.dim(2) * w.dim(3), mg = m / group;
  Tensor out = Tensor::make(DType::kFloat32, {m, k * cg, w.dim(2), w.dim(3)}).value();  // zeros
  for (int64_t o = 0; o < m; ++o) {
    const int64_t slot = (o / mg) % k;
    for (int64_t i = 0; i < cg; ++i)
      std::copy_n(w.data<float>() + (o * cg + i) * taps, taps,
                  out.data<float>() + (o * k * cg + slot * cg + i) * taps);
  }
  return out;
}

// The static channel count of a rank-4 float32 value, or 0.
int64_t static_channels(const Types& types, const std::string& v) {
  const auto t = types.of(v);
  if (!t || t->dtype != DType::kFloat32 || !t->has_shape || t->shape.size() != 4 ||
      !t->shape[1].known())
    return 0;
  return t->shape[1].value;
}

// A float 2-D conv with constant weights and bias and a static channel count, group 1,
// depthwise or groups of whole 8-channel blocks: the convs BlockedConv runs. The RGB stem is one of them: BlockedConv reads its
// 3-channel input plain (no reorder, no padded lanes), and its MaxPool then runs blocked too.
std::optional<Kind> blockable_conv(const ir::Node& n, const GraphIndex& idx, const Types& types) {
  const size_t max_inputs = n.op_type == "Conv" ? 3 : 4;
  if (!is_conv(n) || n.outputs.size() != 1 || n.inputs.size() > max_inputs || !n.has_input(0))
    return std::nullopt;
  const int64_t c = static_channels(types, n.inputs[0]);
  if (c == 0) return std::nullopt;
  const Tensor* w = n.has_input(1) ? idx.constant(n.inputs[1]) : nullptr;
  if (!w || w->dtype() != DType::kFloat32 || w->rank() != 4) return std::nullopt;
  const int64_t m = w->dim(0), group = n.attr_int("group", 1);
  if (w->dim(1) * group != c || m == 0) return std::nullopt;
  if (n.has_input(2)) {
    const Tensor* b = idx.constant(n.inputs[2]);
    if (!b || b->dtype() != DType::kFloat32 || b->rank() != 1 || b->numel() != m)
      return std::nullopt;
  }
  if (group == 1) return Kind::kConv;
  if (group == c && m == c) return Kind::kDepthwiseConv;
  // Groups of whole blocks in and out (regnet's 8-, resnext's 8- to 32-channel groups): dense
  // per group, the weights in the dense layout.
  if (group > 1 && m % group == 0 && (c / group) % kBlock == 0 && (m / group) % kBlock == 0) return Kind::kConv;
  if (narrow_groups_merged(c, m, group) > 1) return Kind::kConv;
  return std::nullopt;
}

// A unary activation with f(0) = 0, so the zero padding lanes of a blocked value stay zero:
// it runs on the blocked buffer as it is (elementwise, whatever the layout), between convs of one
// region instead of splitting it (tf2onnx's Max(LeakyRelu(x), -0.4) after every conv, which
// clip-canonical makes a Clip).
bool zero_preserving_unary(const ir::Node& n, const GraphIndex& idx) {
  if (!n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0].empty()) return false;
  const std::string& op = n.op_type;
  if (op == "Relu" || op == "Tanh" || op == "HardSwish" || op == "LeakyRelu") return n.inputs.size() == 1;
  if (op != "Clip") return false;
  if (n.has_attr("min") || n.has_attr("max"))
    return n.inputs.size() == 1 && n.attr_float("min", -1.0f) <= 0 && n.attr_float("max", 1.0f) >= 0;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor* t = idx.constant(n.inputs[i]);
    if (!t || t->numel() != 1 || t->dtype() != DType::kFloat32) return false;
    const float v = t->data<float>()[0];
    if (i == 1 ? !(v <= 0) : !(v >= 0)) return false;
  }
  return n.inputs.size() <= 3;
}


// Concat on the channel axis of rank-4 values whose channel counts are whole blocks: in the
// blocked layout [N, C/8, H, W, 8] it is the same Concat on axis 1, block by block.
bool blockable_concat(const ir::Node& n, const Types& types) {
  if (!n.domain.empty() || n.op_type != "Concat" || n.outputs.size() != 1 || n.inputs.empty())
    return false;
  const int64_t axis = n.attr_int("axis", 0);
  if (axis != 1 && axis != -3) return false;
  for (const std::string& in : n.inputs) {
    const int64_t c = in.empty() ? 0 : static_channels(types, in);
    if (c == 0 || c % kBlock != 0) return false;
  }
  return true;
}

// A [C] operand spread over the channel axis: shape [C, 1, 1] or [1, C, 1, 1].
bool per_channel(const Tensor& t, int64_t c) {
  if (t.dtype() != DType::kFloat32 || t.numel() != c || t.rank() < 3 || t.rank() > 4) return false;
  return t.dim(t.rank() - 3) == c && t.dim(t.rank() - 2) == 1 && t.dim(t.rank() - 1) == 1;
}

// A FusedElementwise chain on a blocked X0 whose channels are whole blocks (no padding lanes, so
// f(0) need not be 0), its other inputs scalars, per-channel constants, or blocked values of X0's
// shape.
bool blockable_chain(const ir::Node& n, const GraphIndex& idx, const Types& types,
                     const std::set<std::string>& blocked) {
  if (n.domain != "ai.kiln" || n.op_type != "FusedElementwise" || n.outputs.size() != 1 ||
      n.inputs.empty() || !n.has_input(0) || !blocked.count(n.inputs[0]))
    return false;
  const int64_t c = static_channels(types, n.inputs[0]);
  if (c == 0 || c % kBlock != 0 || !types.same_float_shape(n.inputs[0], n.outputs[0])) return false;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const std::string& in = n.inputs[i];
    if (in.empty()) return false;
    if (blocked.count(in) && types.same_float_shape(n.inputs[0], in)) continue;
    const Tensor* t = idx.constant(in);
    if (!t || !(t->numel() == 1 && t->rank() <= 4 && t->dtype() == DType::kFloat32) && !per_channel(*t, c))
      return false;
  }
  return true;
}

// A per-channel operand [C, 1, 1] as [1, C/8, 1, 1, 8], to broadcast over the blocked layout.
Tensor blocked_channel_operand(const Tensor& t) {
  const int64_t c = t.numel();
  Tensor out = Tensor::make(DType::kFloat32, {1, c / kBlock, 1, 1, kBlock}).value();
  std::copy_n(t.data<float>(), c, out.data<float>());
  return out;
}

bool blockable_pool(const ir::Node& n) {
  if (!n.domain.empty() || n.inputs.size() != 1) return false;
  if (n.op_type == "GlobalAveragePool") return n.outputs.size() == 1;
  if (n.op_type != "MaxPool" && n.op_type != "AveragePool") return false;
  // MaxPool's Indices depend on the layout.
  if (n.outputs.size() != 1 && !(n.outputs.size() == 2 && n.outputs[1].empty())) return false;
  return n.attr_ints("kernel_shape").size() == 2;
}

// A float Resize (opset 11+) of H and W only, nearest or linear, with constant scales [1, 1, sh,
// sw] or sizes [N, C, OH, OW] naming the input's static N and C: ai.kiln.BlockedResize runs it on
// the blocked layout (an FPN's upsampling between its convs, which had cut the region with two
// reorders).
bool blockable_resize(const ir::Node& n, const GraphIndex& idx, const Types& types) {
  if (!n.domain.empty() || n.op_type != "Resize" || n.outputs.size() != 1 || n.inputs.size() < 3 ||
      !n.has_input(0))
    return false;
  const std::string mode = n.attr_string("mode", "nearest");
  if ((mode != "nearest" && mode != "linear") || n.attr_int("antialias", 0) != 0 || n.has_attr("axes") ||
      n.attr_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" ||
      n.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    return false;
  const int64_t c = static_channels(types, n.inputs[0]);
  if (c == 0) return false;
  const Tensor* scales = n.has_input(2) ? idx.constant(n.inputs[2]) : nullptr;
  const Tensor* sizes = n.inputs.size() > 3 && n.has_input(3) ? idx.constant(n.inputs[3]) : nullptr;
  if (scales && scales->numel() == 4 && scales->dtype() == DType::kFloat32)
    return scales->data<float>()[0] == 1 && scales->data<float>()[1] == 1;
  if (!sizes || sizes->numel() != 4 || sizes->dtype() != DType::kInt64) return false;
  const auto x = types.of(n.inputs[0]);
  return x->shape[0].known() && sizes->data<int64_t>()[0] == x->shape[0].value && sizes->data<int64_t>()[1] == c;
}

// Fewest convs a region needs to pay for its reorders, unless its one conv does enough work per
// element the reorders move: kMinLoneConvWork multiply-adds (output channels of a group x kernel
// taps) per input element. A lone conv between plain ops with less (a few channels out, a
// depthwise 3x3), or a patchify conv whose kernel equals its stride (ViT's 16x16 patch embedding,
// already one GEMM on a reshape), gains little or nothing from the blocked kernel and adds two
// reorders; YOLOv8's lone 1x1 convs after a Concat (64-128 channels out) ran 4-6x slower plain,
// ResNeXt's lone 3x3 with 16 channels a group 6x.
constexpr int kMinRegionConvs = 2;
constexpr int64_t kMinLoneConvWork = 32;

bool pays_alone(const ir::Node& conv, const GraphIndex& idx) {
  const Tensor* w = idx.constant(conv.inputs[1]);
  if (!w || w->rank() < 3) return false;
  const std::vector<int64_t> strides = conv.attr_ints("strides");
  int64_t taps = 1;
  bool patchify = strides.size() + 2 == static_cast<size_t>(w->rank());
  for (int64_t d = 2; d < w->rank(); ++d) {
    taps *= w->dim(d);
    if (patchify) patchify = w->dim(d) == strides[d - 2];
  }
  if (patchify && taps > 1) return false;
  // Each input element feeds the outputs of its group (all of them at group 1, one when depthwise)
  // at every tap.
  const int64_t group = std::max<int64_t>(conv.attr_int("group", 1), 1);
  const int64_t per_element = w->dim(0) / group * taps;
  return per_element >= kMinLoneConvWork;
}

// Drops the regions (sets of planned nodes joined by blocked values) with too few convs.
void drop_small_regions(const GraphIndex& idx, std::map<const ir::Node*, Kind>& plan) {
  std::map<const ir::Node*, const ir::Node*> parent;
  std::function<const ir::Node*(const ir::Node*)> root = [&](const ir::Node* n) {
    auto it = parent.find(n);
    return it == parent.end() || it->second == n ? n : (it->second = root(it->second));
  };
  for (const auto& [n, kind] : plan)
    for (const std::string& in : n->inputs) {
      const ir::Node* p = in.empty() ? nullptr : idx.producer(in);
      if (p && plan.count(p)) parent[root(n)] = root(p);
    }
  std::map<const ir::Node*, int> convs;
  std::map<const ir::Node*, bool> pays;  // a region's one conv pays for its reorders alone
  for (const auto& [n, kind] : plan)
    if (kind == Kind::kConv || kind == Kind::kDepthwiseConv) {
      convs[root(n)] += 1;
      pays[root(n)] = pays_alone(*n, idx);
    }
  std::erase_if(plan, [&](const auto& entry) {
    const ir::Node* r = root(entry.first);
    return convs[r] < kMinRegionConvs && !(convs[r] == 1 && pays[r]);
  });
}

// Decides which nodes run blocked, in graph order: a pool or Add/Mul only when what it reads is
// already blocked, so a region always starts at a conv. Fills `blocked` with their outputs.
std::map<const ir::Node*, Kind> plan_regions(const ir::Graph& g, const GraphIndex& idx,
                                             const Types& types, std::set<std::string>& blocked) {
  std::map<const ir::Node*, Kind> plan;
  for (const ir::Node& n : g.nodes) {
    std::optional<Kind> kind;
    if (auto conv = blockable_conv(n, idx, types)) {
      kind = conv;
    } else if (blockable_pool(n) && blocked.count(n.inputs[0])) {
      kind = Kind::kPool;
    } else if (blockable_resize(n, idx, types) && blocked.count(n.inputs[0])) {
      kind = Kind::kResize;
    } else if (n.domain == "ai.kiln" && n.op_type == "SqueezeExcite" && n.outputs.size() == 1 &&
               n.has_input(0) && blocked.count(n.inputs[0])) {
      kind = Kind::kSqueezeExcite;
    } else if (n.domain.empty() && (n.op_type == "Add" || n.op_type == "Mul") &&
               n.inputs.size() == 2 && n.outputs.size() == 1 && blocked.count(n.inputs[0]) &&
               blocked.count(n.inputs[1]) &&
               static_channels(types, n.inputs[0]) == static_channels(types, n.inputs[1])) {
      // Zero padding lanes stay zero under + and *. With the channels equal, broadcasting over N,
      // H or W is the same on [N, C/8, H, W, 8] as on NCHW: so an FPN's Add of a lateral conv
      // and an upsampled map, whose H and W a dynamic input leaves unproven equal, stays blocked.
      kind = Kind::kElementwise;
    } else if (zero_preserving_unary(n, idx) && blocked.count(n.inputs[0])) {
      kind = Kind::kUnary;
    } else if (blockable_concat(n, types) &&
               std::any_of(n.inputs.begin(), n.inputs.end(),
                           [&](const std::string& in) { return blocked.count(in) > 0; })) {
      kind = Kind::kConcat;
    } else if (blockable_chain(n, idx, types, blocked)) {
      kind = Kind::kChain;
    }
    if (!kind) continue;
    plan[&n] = *kind;
    blocked.insert(n.outputs[0]);
  }
  drop_small_regions(idx, plan);
  blocked.clear();
  for (const auto& [n, kind] : plan) blocked.insert(n->outputs[0]);
  return plan;
}

class NchwcLayout : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    bool any_conv = false;
    for (const ir::Node& n : g.nodes) any_conv |= is_conv(n);
    // The pass needs static channel counts; a model whose shapes do not infer is left as it is.
    if (!any_conv || !ctx.types().inferred) return int64_t{0};
    const GraphIndex idx(g);
    const Types types(g, ctx.types());
    std::set<std::string> blocked;
    const auto plan = plan_regions(g, idx, types, blocked);
    if (plan.empty()) return int64_t{0};

    std::map<std::string, std::string> blocked_name;  // plain value -> its blocked value
    std::map<std::string, std::string> consts;        // original constant -> blocked constant
    std::map<std::string, int64_t> channels;          // plain value -> its channel count
    std::vector<ir::Node> out;
    std::set<std::string> names = ir::free_names(g);  // every value name, to make new ones
    for (const auto& n : g.nodes) names.insert(n.outputs.begin(), n.outputs.end());
    for (const auto& vi : g.inputs) names.insert(vi.name);
    for (const auto& vi : g.value_info) names.insert(vi.name);
    for (const auto& kv : g.initializers) names.insert(kv.first);
    auto unique = [&](const std::string& base) {
      std::string name = base;
      for (int i = 1; names.count(name); ++i) name = base + "_" + std::to_string(i);
      names.insert(name);
      return name;
    };
    // The blocked form of plain value v, reordering it where the region first needs it.
    auto blocked_input = [&](const std::string& v) {
      auto it = blocked_name.find(v);
      if (it != blocked_name.end()) return it->second;
      ir::Node r;
      r.op_type = "ReorderToBlocked";
      r.domain = "ai.kiln";
      r.name = unique(v + "_to_nchwc");
      r.inputs = {v};
      r.outputs = {unique(v + "_nchwc")};
      out.push_back(r);
      return blocked_name[v] = r.outputs[0];
    };
    auto blocked_const = [&](const std::string& v, auto make) {
      auto it = consts.find(v);
      if (it != consts.end()) return it->second;
      const std::string name = unique(v + "_nchwc");
      g.initializers[name] = make(*idx.constant(v));
      return consts[v] = name;
    };

    int64_t rewrites = 0;
    for (const ir::Node& n : g.nodes) {
      auto p = plan.find(&n);
      if (p == plan.end()) {
        out.push_back(n);
        continue;
      }
      ir::Node b = n;
      const std::string plain = n.outputs[0];
      if (p->second == Kind::kConv || p->second == Kind::kDepthwiseConv) {
        const Tensor& w = *idx.constant(n.inputs[1]);
        const bool dw = p->second == Kind::kDepthwiseConv;
        b.op_type = "BlockedConv";
        b.domain = "ai.kiln";
        // Fewer than 8 channels (the RGB stem) are read plain: no reorder, no padded work.
        const bool plain_x = !dw && !blocked.count(n.inputs[0]) &&
                             static_channels(types, n.inputs[0]) < kBlock;
        b.inputs[0] = plain_x ? n.inputs[0] : blocked_input(n.inputs[0]);
        const int64_t group = n.attr_int("group", 1);
        const int64_t merge = dw ? 0 : narrow_groups_merged(w.dim(1) * group, w.dim(0), group);
        if (merge > 1) {
          b.inputs[1] = blocked_const(n.inputs[1], [&](const Tensor& t) {
            return blocked_dense_weights(merged_group_weights(t, group, merge));
          });
          for (ir::Attribute& a : b.attrs)
            if (a.name == "group") a.i = group / merge;
        } else {
          b.inputs[1] = blocked_const(n.inputs[1], dw ? blocked_depthwise_weights : blocked_dense_weights);
        }
        if (n.has_input(2))
          b.inputs[2] = blocked_const(n.inputs[2], [&](const Tensor& t) {
            return padded_bias(t, blocks_of(w.dim(0)));
          });
        if (n.has_input(3)) b.inputs[3] = blocked_input(n.inputs[3]);
        b.attrs.push_back(ir::Attribute::of_int("channels", w.dim(0)));
        channels[plain] = w.dim(0);
      } else if (p->second == Kind::kPool || p->second == Kind::kSqueezeExcite || p->second == Kind::kResize) {
        b.op_type = "Blocked" + n.op_type;
        b.domain = "ai.kiln";
        b.outputs.resize(1);
        b.inputs[0] = blocked_input(n.inputs[0]);
        channels[plain] = channels.at(n.inputs[0]);
      } else if (p->second == Kind::kUnary) {
        b.inputs[0] = blocked_input(n.inputs[0]);  // Clip's bounds stay the scalars they are
        channels[plain] = channels.at(n.inputs[0]);
      } else if (p->second == Kind::kConcat) {
        int64_t sum = 0;
        for (std::string& in : b.inputs) {
          sum += static_channels(types, in);
          in = blocked_input(in);
        }
        for (ir::Attribute& a : b.attrs)
          if (a.name == "axis") a.i = 1;  // the block axis of [N, C/8, H, W, 8]
        channels[plain] = sum;
      } else if (p->second == Kind::kChain) {
        b.inputs[0] = blocked_input(n.inputs[0]);
        for (size_t i = 1; i < b.inputs.size(); ++i) {
          const Tensor* t = idx.constant(n.inputs[i]);
          if (!t)
            b.inputs[i] = blocked_input(n.inputs[i]);
          else if (t->numel() > 1)
            b.inputs[i] = blocked_const(n.inputs[i], blocked_channel_operand);
        }
        channels[plain] = channels.at(n.inputs[0]);
      } else {
        b.inputs = {blocked_input(n.inputs[0]), blocked_input(n.inputs[1])};
        channels[plain] = channels.at(n.inputs[0]);
      }
      b.outputs[0] = unique(plain + "_nchwc");
      blocked_name[plain] = b.outputs[0];
      out.push_back(b);
      ++rewrites;
      // Readers outside the region (plain nodes, subgraphs, graph outputs) keep the plain value.
      int region_reads = 0;
      for (const ir::Node* c : idx.consumers(plain))
        if (plan.count(c)) ++region_reads;
      if (idx.use_count(plain) > region_reads) {
        ir::Node r;
        r.op_type = "ReorderFromBlocked";
        r.domain = "ai.kiln";
        r.name = unique(plain + "_from_nchwc");
        r.inputs = {b.outputs[0]};
        r.outputs = {plain};
        r.attrs.push_back(ir::Attribute::of_int("channels", channels.at(plain)));
        out.push_back(r);
      } else {
        forget_value_info(g, {plain});
      }
    }
    g.nodes = std::move(out);
    std::set<std::string> replaced;
    for (const auto& kv : consts) replaced.insert(kv.first);
    drop_unread_initializers(g, replaced);
    model.opsets.emplace("ai.kiln", 1);
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(NchwcLayout, "nchwc-layout", 3, kLayout, 10, false);

}  // namespace kiln::passes
