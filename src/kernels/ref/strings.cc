// Reference string ops: StringConcat, StringNormalizer, StringSplit, RegexFullMatch.
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (UTF-8 in and out);
// RegexFullMatch uses std::regex ECMAScript, which accepts the RE2 subset the tests use.
#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

// ---- UTF-8 case mapping ----

// Decodes one code point at s[*i], advancing *i; invalid bytes decode as themselves.
uint32_t decode_utf8(const std::string& s, size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  const int extra = b0 >= 0xF8 ? -1 : b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC0 ? 1 : b0 >= 0x80 ? -1 : 0;
  if (extra < 0 || *i + extra >= s.size()) {
    ++*i;
    return extra == 0 ? b0 : (0x80000000u | b0);
  }
  uint32_t cp = extra == 0 ? b0 : (b0 & (0x3F >> extra));
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[*i + k]);
    if ((b & 0xC0) != 0x80) {  // malformed: take the lead byte alone
      ++*i;
      return 0x80000000u | b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *i += extra + 1;
  return cp;
}

void encode_utf8(uint32_t cp, std::string* out) {
  if (cp & 0x80000000u) {
    out->push_back(static_cast<char>(cp & 0xFF));
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Latin Extended-A alternates upper/lower; which parity is upper depends on the block.
bool ext_a_pair(uint32_t cp, bool* upper_is_even) {
  if ((cp >= 0x100 && cp <= 0x12F) || (cp >= 0x132 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) {
    *upper_is_even = true;
    return true;
  }
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
    *upper_is_even = false;
    return true;
  }
  return false;
}

uint32_t to_lower_cp(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  bool even_upper;
  if (ext_a_pair(cp, &even_upper)) return ((cp % 2 == 0) == even_upper) ? cp + 1 : cp;
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

uint32_t to_upper_cp(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  bool even_upper;
  if (ext_a_pair(cp, &even_upper)) return ((cp % 2 == 0) == even_upper) ? cp : cp - 1;
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;  // final sigma
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const uint32_t cp = decode_utf8(s, &i);
    encode_utf8(upper ? to_upper_cp(cp) : to_lower_cp(cp), &out);
  }
  return out;
}

Status expect_string(const KernelContext& ctx, size_t i, const char* what) {
  if (!ctx.has_input(i)) return ctx.error(std::string(what) + " is required");
  if (ctx.input(i).dtype() != DType::kString)
    return ctx.error(std::string(what) + " must be a string tensor, got " + dtype_name(ctx.input(i).dtype()));
  return Status::ok();
}

// ---- kernels ----

Status string_concat(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(expect_string(ctx, 0, "X"));
  KILN_RETURN_IF_ERROR(expect_string(ctx, 1, "Y"));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(a.shape(), b.shape()));
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kString, shape));
  const std::vector<int64_t> oa = broadcast_offsets(a.shape(), shape);
  const std::vector<int64_t> ob = broadcast_offsets(b.shape(), shape);
  std::string* out = y->data<std::string>();
  for (int64_t i = 0; i < y->numel(); ++i) out[i] = a.data<std::string>()[oa[i]] + b.data<std::string>()[ob[i]];
  return Status::ok();
}

Status string_normalizer(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(expect_string(ctx, 0, "X"));
  const Tensor& x = ctx.input(0);
  const bool two_d = x.rank() == 2;
  if (!(x.rank() == 1 || (two_d && x.dim(0) == 1)))
    return ctx.error("X must have shape [C] or [1, C], got " + shape_str(x.shape()));
  const std::string action = ctx.node.attr_string("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    return ctx.error("case_change_action must be LOWER, UPPER or NONE, got '" + action + "'");
  const bool case_sensitive = ctx.node.attr_int("is_case_sensitive", 0) != 0;
  std::vector<std::string> stops = ctx.node.attr_strings("stopwords");
  if (!case_sensitive)
    for (std::string& s : stops) s = map_case(s, false);
  std::vector<std::string> kept;
  const std::string* in = x.data<std::string>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::string key = case_sensitive ? in[i] : map_case(in[i], false);
    if (std::find(stops.begin(), stops.end(), key) != stops.end()) continue;
    if (action == "LOWER") kept.push_back(map_case(in[i], false));
    else if (action == "UPPER") kept.push_back(map_case(in[i], true));
    else kept.push_back(in[i]);
  }
  if (kept.empty()) kept.emplace_back();
  const int64_t n = static_cast<int64_t>(kept.size());
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kString, two_d ? Shape{1, n} : Shape{n}));
  std::copy(kept.begin(), kept.end(), y->data<std::string>());
  return Status::ok();
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.split(delimiter, maxsplit) (maxsplit < 0: unlimited); empty delimiter means runs of
// whitespace, with leading and trailing whitespace dropped.
std::vector<std::string> split(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (delim.empty()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i == s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.substr(i));  // the rest, trailing whitespace kept (as Python)
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    const size_t pos = s.find(delim, start);
    if (pos == std::string::npos) break;
    parts.push_back(s.substr(start, pos - start));
    start = pos + delim.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

Status string_split(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(expect_string(ctx, 0, "X"));
  const Tensor& x = ctx.input(0);
  const std::string delim = ctx.node.attr_string("delimiter", "");
  const int64_t maxsplit = ctx.node.has_attr("maxsplit") ? ctx.node.attr_int("maxsplit", -1) : -1;
  if (ctx.node.has_attr("maxsplit") && maxsplit < 0)
    return ctx.error("maxsplit must be non-negative, got " + std::to_string(maxsplit));
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
  int64_t width = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    parts[i] = split(x.data<std::string>()[i], delim, maxsplit);
    width = std::max<int64_t>(width, static_cast<int64_t>(parts[i].size()));
  }
  Shape shape = x.shape();
  shape.push_back(width);
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kString, shape));
  for (int64_t i = 0; i < x.numel(); ++i)
    for (size_t k = 0; k < parts[i].size(); ++k) y->data<std::string>()[i * width + static_cast<int64_t>(k)] = parts[i][k];
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor* len, ctx.make_output(1, DType::kInt64, x.shape()));
    for (int64_t i = 0; i < x.numel(); ++i) len->data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
  }
  return Status::ok();
}

Status regex_full_match(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(expect_string(ctx, 0, "X"));
  const Tensor& x = ctx.input(0);
  const std::string pattern = ctx.node.attr_string("pattern", "");
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return ctx.error("invalid or unsupported regex pattern '" + pattern + "': " + e.what());
  }
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kBool, x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    try {
      y->data<bool>()[i] = std::regex_match(x.data<std::string>()[i], re);
    } catch (const std::regex_error& e) {  // e.g. error_complexity on pathological input
      return ctx.error(std::string("regex match failed: ") + e.what());
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "StringConcat", string_concat);
KILN_REGISTER_KERNEL("", "StringNormalizer", string_normalizer);
KILN_REGISTER_KERNEL("", "StringSplit", string_split);
KILN_REGISTER_KERNEL("", "RegexFullMatch", regex_full_match);

}  // namespace kiln
