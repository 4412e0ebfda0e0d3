// Reference Einsum: any equation (explicit or implicit output, "..." broadcasting, repeated
// labels for diagonals), evaluated by one loop over every label's index.
#include <algorithm>
#include <cctype>
#include <map>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

constexpr int kEllipsisBase = 128;  // label ids for "..." dims: kEllipsisBase + k

// A term's labels, with "..." expanded to `ell` ids (right-aligned to the widest ellipsis).
Result<std::vector<int>> parse_term(const std::string& term, int64_t rank, int64_t* ell_rank,
                                    bool know_rank, int64_t max_ell) {
  std::vector<int> labels;
  int64_t letters = 0;
  size_t dots = term.find("...");
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (i == dots) {
      i += 2;
      continue;
    }
    if (ch == ' ') continue;
    if (!std::isalpha(static_cast<unsigned char>(ch)))
      return Status::error(std::string("bad character '") + ch + "' in equation");
    ++letters;
  }
  int64_t ell = 0;
  if (dots != std::string::npos) {
    if (term.find("...", dots + 3) != std::string::npos)
      return Status::error("more than one ellipsis in a term");
    ell = know_rank ? rank - letters : max_ell;
    if (ell < 0)
      return Status::error("operand rank " + std::to_string(rank) + " is less than its labels");
  } else if (know_rank && letters != rank) {
    return Status::error("term '" + term + "' has " + std::to_string(letters) +
                         " labels for rank " + std::to_string(rank));
  }
  *ell_rank = ell;
  for (size_t i = 0; i < term.size(); ++i) {
    if (i == dots) {
      for (int64_t k = 0; k < ell; ++k)
        labels.push_back(kEllipsisBase + static_cast<int>(max_ell - ell + k));
      i += 2;
      continue;
    }
    if (term[i] != ' ') labels.push_back(static_cast<unsigned char>(term[i]));
  }
  return labels;
}

Status einsum(KernelContext& ctx) {
  std::string eq = ctx.node.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t s = 0;;) {
    const size_t c = lhs.find(',', s);
    terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  const size_t nops = terms.size();
  if (ctx.num_inputs() != nops)
    return ctx.error("equation has " + std::to_string(nops) + " operands, got " +
                     std::to_string(ctx.num_inputs()) + " inputs");
  DType dt = DType::kUndefined;
  for (size_t i = 0; i < nops; ++i) {
    if (!ctx.has_input(i)) return ctx.error("missing input " + std::to_string(i));
    if (i == 0) dt = ctx.input(0).dtype();
    if (ctx.input(i).dtype() != dt) return ctx.error("Einsum inputs must share one type");
  }
  std::vector<std::vector<int>> op_labels(nops);
  int64_t max_ell = 0;
  std::vector<int64_t> ell(nops);
  for (size_t i = 0; i < nops; ++i) {
    auto r = parse_term(terms[i], ctx.input(i).rank(), &ell[i], true, 0);
    if (!r) return ctx.error(r.status().message());
    max_ell = std::max(max_ell, ell[i]);
  }
  std::map<int, int64_t> size;
  std::map<int, int> count;
  for (size_t i = 0; i < nops; ++i) {
    int64_t e;
    auto r = parse_term(terms[i], ctx.input(i).rank(), &e, true, max_ell);
    if (!r) return ctx.error(r.status().message());
    // Re-align this operand's ellipsis ids to the right of the widest one.
    std::vector<int> labels;
    size_t dots = terms[i].find("...");
    for (size_t k = 0; k < terms[i].size(); ++k) {
      if (k == dots) {
        for (int64_t q = 0; q < ell[i]; ++q)
          labels.push_back(kEllipsisBase + static_cast<int>(max_ell - ell[i] + q));
        k += 2;
      } else {
        labels.push_back(static_cast<unsigned char>(terms[i][k]));
      }
    }
    op_labels[i] = labels;
    for (size_t d = 0; d < labels.size(); ++d) {
      const int64_t sz = ctx.input(i).dim(d);
      auto it = size.find(labels[d]);
      if (it == size.end() || it->second == 1)
        size[labels[d]] = sz;
      else if (sz != 1 && sz != it->second)
        return ctx.error("label size mismatch in Einsum: " + std::to_string(sz) + " vs " +
                         std::to_string(it->second));
      ++count[labels[d]];
    }
  }
  std::vector<int> out_labels;
  if (arrow != std::string::npos) {
    int64_t e;
    auto r = parse_term(eq.substr(arrow + 2), 0, &e, false, max_ell);
    if (!r) return ctx.error(r.status().message());
    out_labels = *r;
    for (int l : out_labels) {
      if (!size.count(l)) return ctx.error("output label not found in the inputs");
      if (std::count(out_labels.begin(), out_labels.end(), l) > 1)
        return ctx.error("output label repeated");
    }
  } else {
    for (int64_t k = 0; k < max_ell; ++k) out_labels.push_back(kEllipsisBase + static_cast<int>(k));
    for (auto& [l, c] : count)
      if (l < kEllipsisBase && c == 1) out_labels.push_back(l);
  }
  // Loop order: output labels, then the summed ones.
  std::vector<int> all = out_labels;
  for (auto& [l, s] : size)
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  const size_t nl = all.size();
  Shape out_shape;
  for (int l : out_labels) out_shape.push_back(size[l]);
  std::vector<int64_t> dims(nl);
  for (size_t j = 0; j < nl; ++j) dims[j] = size[all[j]];
  // Per operand, the stride of each label (summed for repeated labels, 0 for broadcast dims).
  std::vector<std::vector<int64_t>> strides(nops + 1, std::vector<int64_t>(nl, 0));
  for (size_t i = 0; i < nops; ++i) {
    const Shape st = strides_of(ctx.input(i).shape());
    for (size_t d = 0; d < op_labels[i].size(); ++d) {
      const size_t j = std::find(all.begin(), all.end(), op_labels[i][d]) - all.begin();
      if (ctx.input(i).dim(d) != 1 || dims[j] == 1) strides[i][j] += st[d];
    }
  }
  const Shape ost = strides_of(out_shape);
  for (size_t j = 0; j < out_labels.size(); ++j) strides[nops][j] = ost[j];
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<Tensor> in(nops);
  const bool half = dt == DType::kFloat16 || dt == DType::kBFloat16;
  for (size_t i = 0; i < nops; ++i) {
    if (half) {
      KILN_ASSIGN_OR_RETURN(in[i], to_float32(ctx.input(i)));
    } else {
      in[i] = ctx.input(i);
    }
  }
  const DType ct = half ? DType::kFloat32 : dt;
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(ct, out_shape));
  KILN_RETURN_IF_ERROR(visit_numeric(ct, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    std::vector<int64_t> idx(nl, 0), off(nops + 1, 0);
    std::vector<const T*> src(nops);
    for (size_t i = 0; i < nops; ++i) src[i] = in[i].data<T>();
    T* yd = y.data<T>();
    for (int64_t t = 0; t < total; ++t) {
      T prod = T(1);
      for (size_t i = 0; i < nops; ++i) prod = static_cast<T>(prod * src[i][off[i]]);
      yd[off[nops]] = static_cast<T>(yd[off[nops]] + prod);
      for (size_t j = nl; j-- > 0;) {
        if (++idx[j] < dims[j]) {
          for (size_t i = 0; i <= nops; ++i) off[i] += strides[i][j];
          break;
        }
        for (size_t i = 0; i <= nops; ++i) off[i] -= strides[i][j] * (dims[j] - 1);
        idx[j] = 0;
      }
    }
    return Status::ok();
  }));
  KILN_ASSIGN_OR_RETURN(Tensor out, cast_float_to(y, dt));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Einsum", einsum);

}  // namespace kiln
