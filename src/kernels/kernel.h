// The kernel interface and registry. A kernel is registered once, in its own file, with
// KILN_REGISTER_KERNEL; a node may have several kernels (reference, fast, backends), and the
// compile step picks one per node. Kernels read inputs and allocate outputs through KernelContext.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

class ThreadPool;

// Runs a subgraph (If/Loop/Scan/SequenceMap bodies) in the scope of the node being run, so the
// body can read the outer graph's values.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  virtual Result<std::vector<Value>> run(const ir::Graph& body, std::vector<Value> inputs) = 0;
};

class KernelContext {
  // Storage for the owning constructor; declared first so that `outputs` can refer to it.
  std::vector<const Value*> owned_inputs_;
  std::vector<Value> owned_outputs_;

 public:
  // Owns its inputs list and outputs (a pass folding constants, a fused kernel running an inner op).
  KernelContext(const ir::Node& node, int64_t opset, std::vector<const Value*> inputs,
                ThreadPool* pool, SubgraphRunner* subgraphs)
      : owned_inputs_(std::move(inputs)), owned_outputs_(node.outputs.size()), node(node),
        opset(opset), outputs(owned_outputs_), pool(pool), subgraphs(subgraphs),
        inputs_(owned_inputs_.data()), num_inputs_(owned_inputs_.size()) {}
  // Borrows both, so that the runtime allocates nothing per step: `inputs` (num_inputs entries)
  // must outlive the context, and `outputs` is reset to one empty value per node output.
  KernelContext(const ir::Node& node, int64_t opset, const Value* const* inputs, size_t num_inputs,
                std::vector<Value>& outputs, ThreadPool* pool, SubgraphRunner* subgraphs)
      : node(node), opset(opset), outputs(outputs), pool(pool), subgraphs(subgraphs),
        inputs_(inputs), num_inputs_(num_inputs) {
    outputs.resize(node.outputs.size());
    for (Value& v : outputs) v = Value();
  }
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  const ir::Node& node;
  const int64_t opset;  // version of the node's domain in the model
  std::vector<Value>& outputs;
  ThreadPool* const pool;
  SubgraphRunner* const subgraphs;

  size_t num_inputs() const { return num_inputs_; }
  // True when optional input i was given (named and fed).
  bool has_input(size_t i) const { return i < num_inputs_ && inputs_[i] != nullptr; }
  const Value& value(size_t i) const { return *inputs_[i]; }
  // Input i as a tensor; the caller checks has_input for optional inputs.
  const Tensor& input(size_t i) const { return inputs_[i]->tensor; }
  size_t num_outputs() const { return outputs.size(); }
  // True when output i is wanted by the graph (named and not "").
  bool wants_output(size_t i) const { return i < node.outputs.size() && !node.outputs[i].empty(); }
  // Allocates output i as a tensor and returns it for the kernel to fill.
  Result<Tensor*> make_output(size_t i, DType dtype, Shape shape);
  // The same, not zeroed first (Tensor::make_for_overwrite): for kernels that write every element.
  Result<Tensor*> make_output_for_overwrite(size_t i, DType dtype, Shape shape);
  // The same, written over the storage of the first of inputs `over` that the runtime donated
  // (donate_inputs: this node is the last to read it, and no other tensor shares its storage) and
  // that has this dtype and shape; else a fresh output. For kernels that read each element of
  // such an input only at the output's own place, before writing it there (an element-wise
  // epilogue): the output's lines are then in cache, and the run's working set a tensor smaller
  // (ONNX Runtime's MayInplace).
  Result<Tensor*> make_output_over_input(size_t i, std::initializer_list<size_t> over, DType dtype, Shape shape);
  // Whether make_output_over_input would take input `in`'s storage for an output of this dtype and shape.
  bool input_donated(size_t in, DType dtype, const Shape& shape) const;
  // Inputs whose storage the kernel may take (per input; the runtime's), or null: none.
  void donate_inputs(const std::vector<bool>* donated) { donated_ = donated; }
  // Sets output i; an output the node does not have (an omitted trailing output) is dropped.
  void set_output(size_t i, Tensor t) {
    if (i < outputs.size()) outputs[i] = Value::of(std::move(t));
  }
  // An error naming this node: "node 'conv1' (Conv): <message>".
  Status error(const std::string& message) const;

 private:
  const Value* const* inputs_;
  size_t num_inputs_;
  const std::vector<bool>* donated_ = nullptr;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Called once when the graph is compiled, before any run. constants[i] is input i when it is an
  // initializer the caller cannot override (so the same tensor every run), else null. A kernel
  // prepacks its weights here into the layout it wants, so that runs never repack them. Setting
  // absorbed[i] (sized like constants, all false) promises that run() never reads input i's data
  // again (only has_input(i), its dtype and shape), so the runtime may free the original.
  virtual Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed) {
    (void)constants, (void)absorbed;
    return Status::ok();
  }
  virtual Status run(KernelContext& ctx) = 0;
};

using KernelFn = Status (*)(KernelContext&);
using KernelFactory = std::function<Result<std::unique_ptr<Kernel>>(const ir::Node&, int64_t opset)>;

// The backend name of kiln's own kernels (KernelDef::backend).
inline constexpr const char* kKilnBackend = "kiln";

// Whether a backend's kernel can run `node`, its inputs' types known at compile time (null where
// a type is not known: then a backend that needs it declines).
using KernelAccepts =
    std::function<bool(const ir::Node& node, const std::vector<const ir::TypeInfo*>& input_types)>;

// The element types a kernel computes on: its input `input`, when given, is one of `types`.
// A node whose input is known to be another fails at compile time with both named, instead of
// deep in a run (and the registry says which kernels take 8-bit data: the oracle tests' list).
struct DtypeConstraint {
  size_t input;
  std::vector<DType> types;
};

struct KernelDef {
  std::string domain;   // "" for the default ONNX domain
  std::string op_type;
  std::string name;     // "ref", "avx512", "openblas_sgemm", ...
  KernelFactory create;
  // The library the kernel comes from: "kiln" for kiln's own, else a third-party backend's name
  // (src/backends/). kiln's own kernel of an op runs every node the op's schema accepts;
  // another backend's says which nodes it takes in `accepts`.
  std::string backend = kKilnBackend;
  KernelAccepts accepts;
  // A named variant of kiln's kernel of the op ("direct": BlockedConv's direct convolution where
  // the kernel would run Winograd), taking the nodes `accepts` takes: one more candidate the
  // tuner times, not a backend of its own. Empty for a backend's kernel.
  std::string variant;
  // How a tuning choice names this kernel: its backend ("kiln", "onednn"), or "kiln.VARIANT".
  std::string choice() const { return variant.empty() ? backend : backend + "." + variant; }
  // The element types it takes, per input (none listed: any the op's schema allows).
  std::vector<DtypeConstraint> dtypes;
  // "" when every input of `node` whose type is known fits `dtypes`; else which does not, and
  // what the kernel takes there.
  std::string dtype_mismatch(const ir::Node& node, const std::vector<const ir::TypeInfo*>& input_types) const;
};

// All kernels, collected at start-up from the registrars in their files.
class KernelRegistry {
 public:
  static KernelRegistry& global();
  void add(KernelDef def);
  // Every kernel for (domain, op_type), in registration order.
  std::vector<const KernelDef*> find(const std::string& domain, const std::string& op_type) const;
  // kiln's own kernel for (domain, op_type) (backend "kiln", no variant), or null.
  const KernelDef* own(const std::string& domain, const std::string& op_type) const;
  std::vector<const KernelDef*> all() const;

 private:
  std::vector<std::unique_ptr<KernelDef>> defs_;
};

// Wraps a plain function as a Kernel: reference kernels are mostly this.
std::unique_ptr<Kernel> kernel_from_fn(KernelFn fn);

struct KernelRegistrar {
  KernelRegistrar(const char* domain, const char* op_type, const char* name, KernelFactory f);
  // A third-party backend's kernel: registered under `backend`, for the nodes `accepts` takes.
  KernelRegistrar(const char* domain, const char* op_type, const char* name, KernelFactory f,
                  const char* backend, KernelAccepts accepts);
  KernelRegistrar(const char* domain, const char* op_type, KernelFn fn);  // name "ref"
  // kiln's kernel with the element types it takes (KernelDef::dtypes).
  KernelRegistrar(const char* domain, const char* op_type, const char* name, KernelFactory f,
                  std::vector<DtypeConstraint> dtypes);
  KernelRegistrar(const char* domain, const char* op_type, KernelFn fn, std::vector<DtypeConstraint> dtypes);
};

// Registers a named variant of kiln's kernel of an op (KernelDef::variant), for the nodes
// `accepts` takes.
struct KernelVariantRegistrar {
  KernelVariantRegistrar(const char* domain, const char* op_type, const char* variant, KernelFactory f,
                         KernelAccepts accepts);
};

}  // namespace kiln

// Registers a plain function `Status fn(KernelContext&)` as the reference kernel of an op.
// Usage, at namespace scope in the kernel's own file: KILN_REGISTER_KERNEL("", "Relu", relu);
#define KILN_REGISTER_KERNEL(domain, op_type, fn) \
  static const ::kiln::KernelRegistrar KILN_CONCAT(kiln_kernel_registrar_, __LINE__)(domain, op_type, fn)
// The same with the element types it takes: KILN_REGISTER_TYPED_KERNEL("", "MatMulInteger", fn,
// {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kUInt8, DType::kInt8}}}).
#define KILN_REGISTER_TYPED_KERNEL(domain, op_type, fn, ...)                                                      \
  static const ::kiln::KernelRegistrar KILN_CONCAT(kiln_kernel_registrar_, __LINE__)(domain, op_type, fn, \
                                                                                    __VA_ARGS__)
