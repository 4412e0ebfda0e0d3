// Reference TfIdfVectorizer: counts the pool's n-grams (with skips) in each row of X, in TF, IDF
// or TFIDF mode. Strings are mapped to ids through the pool so both kinds share one counter.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

Status tfidf_vectorizer(KernelContext& ctx) {
  const ir::Node& node = ctx.node;
  if (!ctx.has_input(0)) return ctx.error("X is required");
  const Tensor& x = ctx.input(0);
  const std::string mode = node.attr_string("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF")
    return ctx.error("mode must be TF, IDF or TFIDF, got '" + mode + "'");
  const int64_t min_n = node.attr_int("min_gram_length", 0);
  const int64_t max_n = node.attr_int("max_gram_length", 0);
  const int64_t max_skip = node.attr_int("max_skip_count", 0);
  if (min_n < 1 || max_n < min_n)
    return ctx.error("need 1 <= min_gram_length <= max_gram_length, got " + std::to_string(min_n) + ", " +
                     std::to_string(max_n));
  if (max_skip < 0) return ctx.error("max_skip_count must be non-negative");
  const std::vector<int64_t> counts = node.attr_ints("ngram_counts");
  const std::vector<int64_t> indexes = node.attr_ints("ngram_indexes");
  const std::vector<float> weights = node.attr_floats("weights");
  const bool strings = node.has_attr("pool_strings");
  if (strings == node.has_attr("pool_int64s")) return ctx.error("exactly one of pool_strings and pool_int64s must be set");

  // Tokens as ids: int pools use the values, string pools the position of a string's first use.
  std::vector<int64_t> pool;
  std::map<std::string, int64_t> string_ids;
  if (strings) {
    if (x.dtype() != DType::kString) return ctx.error("pool_strings needs a string X");
    for (const std::string& s : node.attr_strings("pool_strings")) {
      auto it = string_ids.emplace(s, static_cast<int64_t>(string_ids.size())).first;
      pool.push_back(it->second);
    }
  } else {
    if (x.dtype() != DType::kInt32 && x.dtype() != DType::kInt64)
      return ctx.error(std::string("pool_int64s needs an int32/int64 X, got ") + dtype_name(x.dtype()));
    pool = node.attr_ints("pool_int64s");
  }
  const int64_t pool_size = static_cast<int64_t>(pool.size());

  // Pool n-grams: counts[k] is where the (k+1)-grams start; their number is their position.
  std::map<std::vector<int64_t>, int64_t> gram_ids;
  int64_t gram_id = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t n = static_cast<int64_t>(k) + 1;
    const int64_t begin = counts[k];
    const int64_t end = k + 1 < counts.size() ? counts[k + 1] : pool_size;
    if (begin < 0 || end > pool_size || begin > end || (end - begin) % n != 0)
      return ctx.error("ngram_counts do not split the pool into whole " + std::to_string(n) + "-grams");
    for (int64_t p = begin; p < end; p += n) {
      gram_ids.emplace(std::vector<int64_t>(pool.begin() + p, pool.begin() + p + n), gram_id);
      ++gram_id;
    }
  }
  if (static_cast<int64_t>(indexes.size()) < gram_id)
    return ctx.error("ngram_indexes has " + std::to_string(indexes.size()) + " entries for " + std::to_string(gram_id) +
                     " n-grams");
  int64_t out_dim = 0;
  for (int64_t i : indexes) {
    if (i < 0) return ctx.error("ngram_indexes must be non-negative");
    out_dim = std::max(out_dim, i + 1);
  }

  int64_t rows = 1, cols = 0;
  Shape out_shape;
  if (x.rank() == 1) {
    cols = x.dim(0);
    out_shape = {out_dim};
  } else if (x.rank() == 2) {
    rows = x.dim(0);
    cols = x.dim(1);
    out_shape = {rows, out_dim};
  } else {
    return ctx.error("X must be 1-D or 2-D, got " + shape_str(x.shape()));
  }
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kFloat32, out_shape));
  float* out = y->data<float>();

  std::vector<int64_t> tokens(static_cast<size_t>(cols));
  std::vector<int64_t> count(static_cast<size_t>(gram_id));
  std::vector<int64_t> gram;
  std::vector<int64_t> freq(static_cast<size_t>(out_dim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      if (strings) {
        auto it = string_ids.find(x.data<std::string>()[i]);
        tokens[c] = it == string_ids.end() ? -1 : it->second;
      } else {
        tokens[c] = x.dtype() == DType::kInt32 ? x.data<int32_t>()[i] : x.data<int64_t>()[i];
      }
    }
    std::fill(count.begin(), count.end(), 0);
    for (int64_t n = min_n; n <= max_n; ++n) {
      // Unigrams have no gaps, so they are counted once, not once per skip.
      const int64_t skips = n == 1 ? 0 : max_skip;
      for (int64_t s = 0; s <= skips; ++s) {
        const int64_t stride = s + 1;
        for (int64_t start = 0; start + (n - 1) * stride < cols; ++start) {
          gram.clear();
          for (int64_t k = 0; k < n; ++k) gram.push_back(tokens[start + k * stride]);
          if (strings && std::find(gram.begin(), gram.end(), -1) != gram.end()) continue;
          auto it = gram_ids.find(gram);
          if (it != gram_ids.end()) ++count[it->second];
        }
      }
    }
    // Counts add up per output coordinate; weights are indexed by output coordinate too, as
    // ONNX Runtime and the ONNX reference do (the same thing when ngram_indexes is 0..n-1).
    std::fill(freq.begin(), freq.end(), 0);
    for (int64_t g = 0; g < gram_id; ++g) freq[indexes[g]] += count[g];
    for (int64_t o = 0; o < out_dim; ++o) {
      const double w = o < static_cast<int64_t>(weights.size()) ? weights[o] : 1.0;
      double v = static_cast<double>(freq[o]);
      if (mode == "IDF") v = freq[o] > 0 ? w : 0.0;
      else if (mode == "TFIDF") v *= w;
      out[r * out_dim + o] = static_cast<float>(v);
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "TfIdfVectorizer", tfidf_vectorizer);

}  // namespace kiln
