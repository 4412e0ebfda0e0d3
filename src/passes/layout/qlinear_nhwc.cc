// -O3 layout pass "qlinear-nhwc": the 8-bit conv tile (kernels/cpu/qconv) reads and writes
// channels-last tensors; run on NCHW ones it transposes X in and Y out at every conv. This pass
// states those transposes in the graph instead:
//
//   QLinearConv(x, ...)  ->  T_nchw(com.microsoft.QLinearConv(T_nhwc(x), ..., channels_last=1))
//                            (an ai.kiln.QLinearConv with an activation stays ai.kiln's)
//   MaxPool(x8)          ->  T_nchw(com.microsoft.NhwcMaxPool(T_nhwc(x8)))     (8-bit x)
//   QLinearGlobalAveragePool(T_nchw(x))  ->  T_nchw(QLinearGlobalAveragePool(T_nhwc(T_nchw(x)),
//                                            channels_last=1))  (x channels-last already: the
//                                            pair cancels, and the transpose left is of one pixel)
//
// (ONNX Runtime's own forms of the two ops, so a saved model still loads there), and
// channels-last (15), which runs next, moves them through the elementwise ops between (the
// DequantizeLinear, Add, QuantizeLinear of a residual) and cancels each T_nchw against the next
// T_nhwc: a chain of 8-bit convs stays channels-last from its first input to its last output.
// Only convs the tile takes (qlinear_conv_tileable) change.
#include "kernels/cpu/qconv/qlinear_conv.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

const std::vector<int64_t> kToNhwc = {0, 2, 3, 1}, kToNchw = {0, 3, 1, 2};


ir::Node transpose(const ir::Graph& g, const std::string& in, const std::string& out, const std::vector<int64_t>& p) {
  ir::Node n = make_node(fresh_name(g, out + "_transpose"), "Transpose", {in}, {out});
  n.attrs.push_back(ir::Attribute::of_ints("perm", p));
  return n;
}

// Node n (rank-4 X) as `op` in com.microsoft (ai.kiln's stay there) on channels-last X and Y,
// between two Transposes.
std::vector<ir::Node> channels_last_form(const ir::Graph& g, const ir::Node& n, const char* op, bool flag) {
  const std::string x = fresh_name(g, n.inputs[0] + "_nhwc"), y = fresh_name(g, n.outputs[0] + "_nhwc");
  ir::Node q = n;
  q.name = fresh_name(g, n.name + "_nhwc");
  q.domain = n.domain == "ai.kiln" ? "ai.kiln" : "com.microsoft", q.op_type = op;
  q.inputs[0] = x, q.outputs[0] = y;
  std::erase_if(q.attrs, [](const ir::Attribute& a) { return a.name == "channels_last"; });
  if (flag) q.attrs.push_back(ir::Attribute::of_int("channels_last", 1));
  return {transpose(g, n.inputs[0], x, kToNhwc), std::move(q), transpose(g, y, n.outputs[0], kToNchw)};
}

// Whether n is a Transpose from channels-last to NCHW (an 8-bit conv's output on its way out).
bool transposed_to_nchw(const ir::Node* n) { return is_onnx_op(n, "Transpose") && n->attr_ints("perm") == kToNchw; }

class QLinearNhwc : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (!ctx.types().inferred) return int64_t{0};
    const ValueTypes& types = ctx.types();
    auto rank4_8bit = [&](const std::string& v) {
      const ir::TypeInfo* t = types.tensor(v);
      return t && t->has_shape && t->shape.size() == 4 && dtype_is_8bit_integer(t->dtype);
    };
    ir::Graph& g = model.graph;
    // One at a time: each rewrite's fresh names must see the last one's.
    const int64_t rewrites = rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& n) {
      if (n.inputs.empty() || n.outputs.empty() || !rank4_8bit(n.inputs[0])) return false;
      std::vector<ir::Node> put;
      const bool kiln_nchw_conv = n.domain == "ai.kiln" && n.op_type == "QLinearConv" && !n.attr_int("channels_last", 0);
      if (is_onnx_op(&n, "QLinearConv") || kiln_nchw_conv) {
        std::vector<const Tensor*> constants;
        for (const std::string& in : n.inputs) constants.push_back(in.empty() ? nullptr : idx.constant(in));
        // The tile reads X of its zero point's type (u8 when absent).
        const Tensor* xz = constants.size() > 2 ? constants[2] : nullptr;
        if (!qlinear_conv_tileable(n, constants) || types.tensor(n.inputs[0])->dtype != (xz ? xz->dtype() : DType::kUInt8))
          return false;
        put = channels_last_form(g, n, "QLinearConv", true);
      } else if (is_onnx_op(&n, "MaxPool") && n.outputs.size() == 1 && n.attr_ints("kernel_shape").size() == 2 &&
                 n.attr_int("storage_order", 0) == 0) {
        put = channels_last_form(g, n, "NhwcMaxPool", false);
      } else if (n.domain == "com.microsoft" && n.op_type == "QLinearGlobalAveragePool" &&
                 !n.attr_int("channels_last", 0) && transposed_to_nchw(idx.producer(n.inputs[0]))) {
        put = channels_last_form(g, n, "QLinearGlobalAveragePool", true);
      } else {
        return false;
      }
      std::vector<NodeReplacement> found{{{&n}, std::move(put)}};
      replace_nodes(g, found);
      return true;
    });
    if (rewrites == 0) return int64_t{0};
    model.opsets.emplace("com.microsoft", 1);
    return rewrites;
  }
};

}  // namespace

// After nchwc-layout (10), before channels-last (15), which moves and cancels the Transposes.
KILN_REGISTER_PASS(QLinearNhwc, "qlinear-nhwc", 3, kLayout, 12, false);

}  // namespace kiln::passes
