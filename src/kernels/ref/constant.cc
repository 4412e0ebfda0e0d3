// Constant: a tensor from whichever value attribute the node carries.
#include "kernels/fast_path.h"
#include "kernels/kernel.h"

namespace kiln {
namespace {

Status constant(KernelContext& ctx) {
  for (const ir::Attribute& a : ctx.node.attrs) {
    if (a.name == "value" || a.name == "sparse_value") {
      ctx.set_output(0, a.t);
      return Status::ok();
    }
    auto make = [&](DType t, int64_t n, bool scalar) -> Result<Tensor*> {
      return ctx.make_output(0, t, scalar ? Shape{} : Shape{n});
    };
    if (a.name == "value_float" || a.name == "value_int") {
      const bool is_float = a.name == "value_float";
      KILN_ASSIGN_OR_RETURN(Tensor * y, make(is_float ? DType::kFloat32 : DType::kInt64, 1, true));
      if (is_float) *y->data<float>() = a.f;
      else *y->data<int64_t>() = a.i;
      return Status::ok();
    }
    if (a.name == "value_floats") {
      KILN_ASSIGN_OR_RETURN(Tensor * y, make(DType::kFloat32, static_cast<int64_t>(a.floats.size()), false));
      std::copy(a.floats.begin(), a.floats.end(), y->data<float>());
      return Status::ok();
    }
    if (a.name == "value_ints") {
      KILN_ASSIGN_OR_RETURN(Tensor * y, make(DType::kInt64, static_cast<int64_t>(a.ints.size()), false));
      std::copy(a.ints.begin(), a.ints.end(), y->data<int64_t>());
      return Status::ok();
    }
    if (a.name == "value_string") {
      KILN_ASSIGN_OR_RETURN(Tensor * y, make(DType::kString, 1, true));
      *y->data<std::string>() = a.s;
      return Status::ok();
    }
    if (a.name == "value_strings") {
      KILN_ASSIGN_OR_RETURN(Tensor * y, make(DType::kString, static_cast<int64_t>(a.strings.size()), false));
      std::copy(a.strings.begin(), a.strings.end(), y->data<std::string>());
      return Status::ok();
    }
  }
  return ctx.error("has no value attribute");
}

}  // namespace

KILN_REGISTER_KERNEL("", "Constant", constant);

KILN_REGISTER_FAST_PATH("", "Constant", always_fast);

}  // namespace kiln
