// What ONNX Runtime's dynamic quantizer (quantize_dynamic) writes for a MatMul with constant
// weights becomes its MatMulIntegerToFloat, one kernel (kernels/cpu/matmul_integer.cc):
//
//   [Add(bias,] Mul(Cast(MatMulInteger(aq, bq, az, bz)), Mul(as, bs)) [)]
//     -> com.microsoft.MatMulIntegerToFloat(aq, bq, as, bs, az, bz [, bias])
//
// The int32 product no longer goes to memory as a tensor to be cast, scaled and biased by three
// more passes over it: the kernel scales and biases each row as the GEMM leaves it (with one
// fma, so within an ulp of the Mul and Add). bert_base's 72 such chains (Cast, Mul, Add) took 4.5 ms of 46
// (AMD EPYC Zen 4, 2 threads). as is a run-time scalar (DynamicQuantizeLinear's), bs a constant
// scalar or one per column, bias a constant vector. -O2: ONNX Runtime's op, not standard ONNX.
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using P = Pattern;

bool is_f32(const Tensor& t) { return t.dtype() == DType::kFloat32; }
bool is_f32_vector(const Tensor& t) { return is_f32(t) && t.rank() == 1; }
bool any_tensor(const Tensor&) { return true; }

P scaled_product() {
  const P product = P::op("MatMulInteger", {P::value("aq"), P::constant(any_tensor, "bq"), P::value("az"),
                                            P::constant(any_tensor, "bz")})
                        .bind("product");
  const P as_float = P::op("Cast", {product}).where([](const ir::Node& n) {
    return n.attr_int("to", 0) == static_cast<int64_t>(DType::kFloat32);
  });
  // ONNX Runtime computes as * bs once for MatMuls that share both (bert_base's last K and V).
  const P scale = P::op("Mul", {P::value("as"), P::constant(is_f32, "bs")}).commutative().bind("scale").kept();
  return P::op("Mul", {as_float, scale}).commutative();
}

// The input of two-input node n that is not `v`.
const std::string& other(const ir::Node& n, const std::string& v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

std::optional<std::vector<ir::Node>> fuse(const Match& m, RuleContext& rc, bool biased) {
  const Tensor& bq = m.constant("bq");
  const int64_t n = bq.rank() == 2 ? bq.dim(1) : -1;
  const Tensor& bs = m.constant("bs");
  if (n < 0 || (bs.numel() != 1 && (bs.rank() != 1 || bs.numel() != n))) return std::nullopt;
  if (biased && m.constant("bias").numel() != n) return std::nullopt;
  const ir::TypeInfo* as = rc.ctx.types().tensor(m.value("as"));
  if (!as || as->dtype != DType::kFloat32 || !as->has_shape || !as->shape.empty()) return std::nullopt;  // one value
  const ir::Node& product = m.node("product");
  std::vector<std::string> in = {m.value("aq"), product.inputs[1], m.value("as"), other(m.node("scale"), m.value("as")),
                                 m.value("az"), product.inputs[3]};
  if (biased) {
    const ir::Node& add = *m.root;
    in.push_back(rc.ctx.index(rc.graph).constant(add.inputs[0]) ? add.inputs[0] : add.inputs[1]);
  }
  rc.model.opsets.emplace("com.microsoft", 1);
  return std::vector<ir::Node>{replacement_node(m, "MatMulIntegerToFloat", in, "com.microsoft")};
}

class DynamicQuantMatMul : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    static const std::vector<Rule> rules = {
        {"biased", P::op("Add", {P::constant(is_f32_vector, "bias"), scaled_product()}).commutative(),
         [](const Match& m, RuleContext& rc) { return fuse(m, rc, true); }},
        {"plain", scaled_product(), [](const Match& m, RuleContext& rc) { return fuse(m, rc, false); }},
    };
    return apply_rules(model, ctx, rules);
  }
};

}  // namespace

// Before attention (20) and the elementwise chains (70), which would take the Cast, Mul and Add.
KILN_REGISTER_PASS(DynamicQuantMatMul, "dynamic-quant-matmul", 2, kFuse, 5, false);

}  // namespace kiln::passes
