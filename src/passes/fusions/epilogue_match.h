// Matching of the elementwise tails the -O2 epilogue fusions absorb (activation spellings,
// residual Adds, per-channel bias Adds), shared by conv-epilogue, gemm-epilogue and squeeze-excite.
// Matches go by data flow from one value and only absorb values nothing else reads.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/graph_index.h"
#include "passes/pass_context.h"

namespace kiln::passes::epilogue {

// An activation as the ai.kiln epilogue ops spell it: the `activation` attribute value and its
// `activation_params` (docs/ops.md).
struct Activation {
  std::string
      name;  // Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Silu, Gelu, GeluTanh, Tanh
  std::vector<float> params;
  std::vector<float> clip;  // [lo, hi] of a Clip after it (`activation_clip`), or empty
};

// What a matcher found: the nodes it absorbs and the value the last of them produces.
struct Match {
  std::vector<const ir::Node*> nodes;
  std::string output;
};

struct ActivationMatch : Match {
  Activation act;
};

struct ResidualMatch : Match {
  std::string z;  // the other Add operand
};

// A fused op's elementwise tail: act(v) [+ z], or act(v + z).
struct EpilogueMatch : Match {
  std::optional<Activation> act;
  std::string z;                // empty: no residual
  bool residual_first = false;  // act(v + z) rather than act(v) + z
};

// The type of a value: an initializer's, or what the pass context's type analysis inferred;
// nullopt when unknown.
class Types {
 public:
  Types(const ir::Graph& g, const ValueTypes& inferred) : g_(g), inferred_(inferred) {}
  std::optional<ir::TypeInfo> of(const std::string& value) const;
  // Both are float32 tensors with provably equal shapes (known or same-symbol dims).
  bool same_float_shape(const std::string& a, const std::string& b) const;
  bool is_float32(const std::string& value) const;

 private:
  const ir::Graph& g_;
  const ValueTypes& inferred_;
};

// Nodes already taken by an earlier match in this sweep.
using Taken = std::set<const ir::Node*>;

// The one node reading `v` (GraphIndex::sole_consumer), unless an earlier match took it.
const ir::Node* sole_consumer(const GraphIndex& idx, const std::string& v, const Taken& taken);

// The clamp a Relu ([0, +inf]) or Clip (bounds as attributes or constant inputs, an absent one
// infinite) applies; nullopt for another node, or bounds that are not constants.
std::optional<std::pair<float, float>> clamp_bounds(const GraphIndex& idx, const ir::Node& n);
// Whether a clamp to [lo, hi] before QuantizeLinear(scale, zero_point) to `type` (u8 or s8)
// changes no code: the quantization of lo is already the lowest code and that of hi the highest,
// so the Q's saturation does the clamp (a Relu before u8 codes with zero point 0, a ReLU6 before
// codes spanning at most [0, 6]).
bool clamp_is_saturation(float lo, float hi, float scale, int32_t zero_point, DType type);

// An activation reading `v` (v read by nothing else): Relu, Clip (attributes or constant inputs),
// LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu (ONNX or ai.kiln), v*Sigmoid(v) and
// v*HardSigmoid(v) (1/6, 1/2), with the Clip that alone reads its result, if one does, as its
// clamp. Other spellings of the hard activations (v*Clip(v+3, 0, 6)/6 ...) are canonicalised to
// these by the hard-sigmoid-canonical pass before the fusions run.
std::optional<ActivationMatch> match_activation(const ir::Graph& g, const GraphIndex& idx,
                                                const std::string& v, const Taken& taken);

// Add(v, z) or Add(z, v) with z of v's shape and type (so the Add does not broadcast v).
std::optional<ResidualMatch> match_residual(const ir::Graph& g, const GraphIndex& idx,
                                            const Types& types, const std::string& v,
                                            const Taken& taken);

// act, then an optional residual; or a residual, then an optional activation. nullopt when
// neither follows v.
std::optional<EpilogueMatch> match_epilogue(const ir::Graph& g, const GraphIndex& idx,
                                            const Types& types, const std::string& v,
                                            const Taken& taken);

// Appends the `activation`/`activation_params`/`activation_clip` (or other-named) attributes for
// `act`.
void add_activation_attrs(ir::Node& n, const Activation& act,
                          const std::string& name_attr = "activation",
                          const std::string& params_attr = "activation_params");
// Appends activation attributes (when any) and residual_before_activation.
void add_epilogue_attrs(ir::Node& n, const EpilogueMatch& e);

// Drops trailing omitted ("") inputs.
void trim_inputs(ir::Node& n);

// A fixed scalar (any float or integer type, one element) or nullopt.
std::optional<double> scalar_constant(const GraphIndex& idx, const std::string& v);

// Replaces matched groups of nodes: `fused` goes where the latest node of its group was, the
// others disappear. Collected during a sweep and applied once, so node pointers stay valid while
// matching.
struct Rewrites {
  std::set<const ir::Node*> drop;
  std::vector<std::pair<std::vector<const ir::Node*>, ir::Node>> put;
  void replace(const std::vector<const ir::Node*>& nodes, ir::Node fused);
  // Applies the edits to g.nodes; returns the number of fused nodes placed.
  int64_t apply(ir::Graph& g);
};

// The sweep each fusion here makes: with the context's types (a model whose shapes do not infer
// is left as it is), `visit` called on every node of every graph that no earlier match took, the
// rewrites applied once per graph. Returns the fused nodes placed, declaring the ai.kiln opset
// when there are any.
using Visit = std::function<void(const ir::Graph&, const GraphIndex&, const Types&, const ir::Node&,
                                 Rewrites&)>;
int64_t fuse_sweep(ir::Model& model, PassContext& ctx, const Visit& visit);

// True when the model has a node of one of these types (of `domain`, the default one unless
// told) anywhere.
bool has_op(const ir::Graph& g, const std::set<std::string>& ops, const std::string& domain = "");

}  // namespace kiln::passes::epilogue
