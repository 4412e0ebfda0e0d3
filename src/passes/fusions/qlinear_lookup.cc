// -O2: an 8-bit SiLU, QLinearMul(x, QLinearSigmoid(x)) as qdq-fusion leaves a QDQ model's
// Q(Mul(DQ(x), DQ(Q(Sigmoid(DQ(x)))))), is a function of x's code alone, so its 256 answers are
// a table: ai.kiln.QLinearLookup(x, table) (docs/ops.md), one pass over 8-bit data instead of
// two, the second with a division a value. The table is the two ops' own kernels run on the 256
// codes, so the outputs are theirs bit for bit. (QDQ efficientnets carry 49 such SiLUs.)
#include "kernels/kernel.h"
#include "passes/fusions/qlinear_table.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using P = Pattern;

bool is_op(const ir::Node* n, const char* op) { return n && n->domain == "com.microsoft" && n->op_type == op; }

std::optional<std::vector<ir::Node>> to_lookup(const Match& m, RuleContext& rc) {
  const ir::Node& mul = *m.root;
  const GraphIndex& idx = rc.ctx.index(rc.graph);
  for (const size_t side : {size_t{0}, size_t{3}}) {  // the sigmoid as QLinearMul's A or B
    const ir::Node* sig = idx.producer(mul.inputs[side]);
    if (!is_op(sig, "QLinearSigmoid") || sig->inputs.empty() || sig->inputs[0] != mul.inputs[3 - side]) continue;
    const ir::TypeInfo* xt = rc.ctx.types().tensor(sig->inputs[0]);
    if (!xt || !dtype_is_8bit_integer(xt->dtype)) return std::nullopt;
    // Every scale and zero point a constant: then the table is fixed.
    // (data inputs: the sigmoid's 0, the product's 0 and 3)
    auto params = [&](const ir::Node& n, bool binary) -> std::optional<std::vector<const Tensor*>> {
      std::vector<const Tensor*> in(n.inputs.size(), nullptr);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (i == 0 || (binary && i == 3) || n.inputs[i].empty()) continue;
        if (!(in[i] = idx.constant(n.inputs[i]))) return std::nullopt;
      }
      return in;
    };
    auto sig_in = params(*sig, false);
    auto mul_in = params(mul, true);
    if (!sig_in || !mul_in) return std::nullopt;
    Tensor codes = Tensor::make(xt->dtype, {256}).value();
    for (int c = 0; c < 256; ++c) static_cast<uint8_t*>(codes.raw_data())[c] = static_cast<uint8_t>(c);
    (*sig_in)[0] = &codes;
    auto s = run_kernel(rc.model, *sig, *sig_in);
    if (!s) return std::nullopt;
    (*mul_in)[side] = &*s, (*mul_in)[3 - side] = &codes;
    auto table = run_kernel(rc.model, mul, *mul_in);
    if (!table) return std::nullopt;
    const std::string name = rc.fresh_name(mul.outputs[0] + "_table");
    rc.graph.initializers[name] = std::move(table).value();
    rc.model.opsets.emplace("ai.kiln", 1);
    return std::vector<ir::Node>{replacement_node(m, "QLinearLookup", {sig->inputs[0], name}, "ai.kiln")};
  }
  return std::nullopt;
}

class QLinearLookupFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    static const std::vector<Rule> rules = {
        {"silu", P::op_in("com.microsoft", "QLinearMul",
                          {P::value("a"), P::value("as"), P::value("az"), P::value("b"), P::value("bs"), P::value("bz"),
                           P::value("cs"), P::value("cz")}),
         to_lookup}};
    return apply_rules(model, ctx, rules);
  }
};

}  // namespace

KILN_REGISTER_PASS(QLinearLookupFusion, "qlinear-lookup", 2, kFuse, 6, false);

}  // namespace kiln::passes
