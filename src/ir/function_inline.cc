// Inlining model-local functions into their call sites.
#include "ir/function_inline.h"

#include <map>

namespace kiln::ir {
namespace {

constexpr int kMaxInlineDepth = 32;

struct Inliner {
  const Model& model;
  int counter = 0;

  const Function* find(const Node& n) const {
    for (const Function& f : model.functions)
      if (f.name == n.op_type && f.domain == n.domain) return &f;
    return nullptr;
  }

  // The body of `f` for one call: formal names mapped to the call's, the rest made unique.
  Result<std::vector<Node>> expand(const Node& call, const Function& f) {
    std::map<std::string, std::string> rename;
    for (size_t i = 0; i < f.inputs.size(); ++i) rename[f.inputs[i]] = i < call.inputs.size() ? call.inputs[i] : "";
    for (size_t i = 0; i < f.outputs.size(); ++i) rename[f.outputs[i]] = i < call.outputs.size() ? call.outputs[i] : "";
    const std::string prefix = "__fn" + std::to_string(counter++) + "_" + f.name + "__";
    auto mapped = [&](const std::string& name) {
      if (name.empty()) return name;
      auto it = rename.find(name);
      return it != rename.end() ? it->second : prefix + name;
    };
    std::vector<Node> body;
    for (Node n : f.nodes) {
      for (auto& in : n.inputs) in = mapped(in);
      for (auto& out : n.outputs) out = mapped(out);
      std::vector<Attribute> attrs;
      for (Attribute& a : n.attrs) {
        if (a.ref_attr_name.empty()) {
          attrs.push_back(std::move(a));
          continue;
        }
        const Attribute* given = call.attr(a.ref_attr_name);
        if (!given) continue;  // the caller did not set it: the op's default applies
        Attribute resolved = *given;
        resolved.name = a.name;
        attrs.push_back(std::move(resolved));
      }
      n.attrs = std::move(attrs);
      if (!n.name.empty()) n.name = prefix + n.name;
      body.push_back(std::move(n));
    }
    return body;
  }

  Status inline_graph(Graph& g, int depth) {
    if (depth > kMaxInlineDepth)
      return Status::error("model-local functions call each other more than " + std::to_string(kMaxInlineDepth) +
                           " levels deep");
    std::vector<Node> out;
    bool changed = false;
    for (Node& n : g.nodes) {
      for (Attribute& a : n.attrs) {  // subgraphs are shared: copy before changing them
        if (a.g) {
          a.g = std::make_shared<Graph>(*a.g);
          KILN_RETURN_IF_ERROR(inline_graph(*a.g, depth));
        }
        for (auto& sg : a.graphs) {
          sg = std::make_shared<Graph>(*sg);
          KILN_RETURN_IF_ERROR(inline_graph(*sg, depth));
        }
      }
      const Function* f = find(n);
      if (!f) {
        out.push_back(std::move(n));
        continue;
      }
      KILN_ASSIGN_OR_RETURN(std::vector<Node> body, expand(n, *f));
      for (Node& b : body) out.push_back(std::move(b));
      changed = true;
    }
    g.nodes = std::move(out);
    // A body may itself call functions: inline again until none is left.
    if (changed) return inline_graph(g, depth + 1);
    return Status::ok();
  }
};

}  // namespace

Status inline_functions(Model& model) {
  if (model.functions.empty()) return Status::ok();
  Inliner inliner{model};
  return inliner.inline_graph(model.graph, 0);
}

}  // namespace kiln::ir
