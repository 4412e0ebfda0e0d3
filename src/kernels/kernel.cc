// Kernel registry and context helpers.
#include "kernels/kernel.h"

#include <algorithm>

namespace kiln {

namespace {
Result<Tensor*> set_new_output(KernelContext& ctx, size_t i, Result<Tensor> t) {
  if (!t) return ctx.error(t.status().message());
  ctx.outputs[i] = Value::of(std::move(t).value());
  return &ctx.outputs[i].tensor;
}
}  // namespace

Result<Tensor*> KernelContext::make_output(size_t i, DType dtype, Shape shape) {
  if (i >= outputs.size()) return error("output index " + std::to_string(i) + " out of range");
  return set_new_output(*this, i, Tensor::make(dtype, std::move(shape)));
}

Result<Tensor*> KernelContext::make_output_for_overwrite(size_t i, DType dtype, Shape shape) {
  if (i >= outputs.size()) return error("output index " + std::to_string(i) + " out of range");
  return set_new_output(*this, i, Tensor::make_for_overwrite(dtype, std::move(shape)));
}

bool KernelContext::input_donated(size_t in, DType dtype, const Shape& shape) const {
  if (!donated_ || in >= donated_->size() || !(*donated_)[in] || !value(in).is_tensor()) return false;
  const Tensor& t = input(in);
  // The slot's tensor alone holds the storage: no view of it (a Reshape's output) is alive.
  return t.dtype() == dtype && t.shape() == shape && t.owner() && t.owner().use_count() == 1;
}

Result<Tensor*> KernelContext::make_output_over_input(size_t i, std::initializer_list<size_t> over, DType dtype,
                                                      Shape shape) {
  for (const size_t in : over)
    if (i < outputs.size() && input_donated(in, dtype, shape)) {
      outputs[i] = Value::of(input(in));
      return &outputs[i].tensor;
    }
  return make_output_for_overwrite(i, dtype, std::move(shape));
}

Status KernelContext::error(const std::string& message) const {
  return Status::error(node.describe() + ": " + message);
}

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(KernelDef def) { defs_.push_back(std::make_unique<KernelDef>(std::move(def))); }

std::vector<const KernelDef*> KernelRegistry::find(const std::string& domain,
                                                   const std::string& op_type) const {
  std::vector<const KernelDef*> out;
  const std::string d = ir::normalize_domain(domain);
  for (const auto& def : defs_)
    if (def->op_type == op_type && def->domain == d) out.push_back(def.get());
  return out;
}

const KernelDef* KernelRegistry::own(const std::string& domain, const std::string& op_type) const {
  for (const KernelDef* d : find(domain, op_type))
    if (d->backend == kKilnBackend && d->variant.empty()) return d;
  return nullptr;
}

std::vector<const KernelDef*> KernelRegistry::all() const {
  std::vector<const KernelDef*> out;
  for (const auto& def : defs_) out.push_back(def.get());
  return out;
}

namespace {
class FnKernel : public Kernel {
 public:
  explicit FnKernel(KernelFn fn) : fn_(fn) {}
  Status run(KernelContext& ctx) override { return fn_(ctx); }

 private:
  KernelFn fn_;
};
}  // namespace

std::unique_ptr<Kernel> kernel_from_fn(KernelFn fn) { return std::make_unique<FnKernel>(fn); }

namespace {
KernelDef make_def(const char* domain, const char* op_type, const char* name, KernelFactory f) {
  KernelDef d;
  d.domain = ir::normalize_domain(domain);
  d.op_type = op_type;
  d.name = name;
  d.create = std::move(f);
  return d;
}
}  // namespace

KernelRegistrar::KernelRegistrar(const char* domain, const char* op_type, const char* name,
                                 KernelFactory f) {
  KernelRegistry::global().add(make_def(domain, op_type, name, std::move(f)));
}

KernelRegistrar::KernelRegistrar(const char* domain, const char* op_type, const char* name,
                                 KernelFactory f, const char* backend, KernelAccepts accepts) {
  KernelDef d = make_def(domain, op_type, name, std::move(f));
  d.backend = backend;
  d.accepts = std::move(accepts);
  KernelRegistry::global().add(std::move(d));
}

KernelVariantRegistrar::KernelVariantRegistrar(const char* domain, const char* op_type, const char* variant,
                                               KernelFactory f, KernelAccepts accepts) {
  KernelDef d = make_def(domain, op_type, variant, std::move(f));
  d.accepts = std::move(accepts);
  d.variant = variant;
  KernelRegistry::global().add(std::move(d));
}

KernelRegistrar::KernelRegistrar(const char* domain, const char* op_type, KernelFn fn)
    : KernelRegistrar(domain, op_type, fn, std::vector<DtypeConstraint>{}) {}

KernelRegistrar::KernelRegistrar(const char* domain, const char* op_type, const char* name, KernelFactory f,
                                 std::vector<DtypeConstraint> dtypes) {
  KernelDef d = make_def(domain, op_type, name, std::move(f));
  d.dtypes = std::move(dtypes);
  KernelRegistry::global().add(std::move(d));
}

KernelRegistrar::KernelRegistrar(const char* domain, const char* op_type, KernelFn fn,
                                 std::vector<DtypeConstraint> dtypes)
    : KernelRegistrar(
          domain, op_type, "ref",
          [fn](const ir::Node&, int64_t) -> Result<std::unique_ptr<Kernel>> { return kernel_from_fn(fn); },
          std::move(dtypes)) {}

std::string KernelDef::dtype_mismatch(const ir::Node& node, const std::vector<const ir::TypeInfo*>& input_types) const {
  for (const DtypeConstraint& c : dtypes) {
    if (c.input >= input_types.size() || c.input >= node.inputs.size() || node.inputs[c.input].empty()) continue;
    const ir::TypeInfo* t = input_types[c.input];
    if (!t || t->kind != ir::TypeInfo::Kind::kTensor || t->dtype == DType::kUndefined) continue;
    if (std::find(c.types.begin(), c.types.end(), t->dtype) != c.types.end()) continue;
    std::string takes;
    for (size_t i = 0; i < c.types.size(); ++i)
      takes += (i == 0 ? "" : i + 1 == c.types.size() ? " or " : ", ") + std::string(dtype_name(c.types[i]));
    return "input " + std::to_string(c.input) + " ('" + node.inputs[c.input] + "') is " + dtype_name(t->dtype) +
           "; the kernel takes " + takes;
  }
  return "";
}

}  // namespace kiln
