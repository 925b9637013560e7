#include "engine/dot.hpp"

#include <string>
#include <unordered_map>

#include "engine/fusion.hpp"
#include "engine/graph.hpp"
#include "engine/graph_walk.hpp"
#include "engine/plan.hpp"

namespace ktape {

namespace {

// A DOT string literal's contents: quotes and backslashes escaped, newlines as \n.
std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

bool is_source(Op op) { return op == Op::Placeholder || op == Op::Variable || op == Op::Constant; }

std::string node_label(const Node& n) {
  return escape(std::string(op_name(n.op)) + "\n" + n.shape.str() + " " +
                std::string(dtype_name(n.dtype)) + "\n" + n.name);
}

}  // namespace

std::string graph_dot(const std::vector<Tensor>& roots) {
  std::vector<Node*> r;
  for (const auto& t : roots) r.push_back(&t.node());
  std::string out =
      "digraph ktape {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (Node* n : reachable_in_tape_order(r)) {
    out += "  n" + std::to_string(n->id) + " [label=\"" + node_label(*n) +
           "\", shape=" + (is_source(n->op) ? "ellipse" : "box") + "];\n";
    for (const auto& in : n->inputs)
      out += "  n" + std::to_string(in.id()) + " -> n" + std::to_string(n->id) + ";\n";
  }
  return out + "}\n";
}

std::string plan_dot(const Plan& p) {
  std::string out =
      "digraph plan {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  // The step that writes each value's buffer, or -1 for values from outside the arena.
  std::unordered_map<int, int> writer;
  for (std::size_t si = 0; si < p.steps.size(); ++si) {
    const Step& s = p.steps[si];
    writer[p.values[static_cast<std::size_t>(s.out)].root] = static_cast<int>(si);
    for (int v : s.extra_outs)
      writer[p.values[static_cast<std::size_t>(v)].root] = static_cast<int>(si);
  }
  auto source_id = [&](int v) {
    const Value& val =
        p.values[static_cast<std::size_t>(p.values[static_cast<std::size_t>(v)].root)];
    std::string id = "v";  // (appended, not "v" + ...: GCC 12 warns falsely, -Wrestrict)
    id += std::to_string(val.node ? val.node->id : v);
    return id;
  };
  std::unordered_map<std::string, bool> drawn;
  for (std::size_t si = 0; si < p.steps.size(); ++si) {
    const Step& s = p.steps[si];
    const Value& o = p.values[static_cast<std::size_t>(s.out)];
    std::string label = std::to_string(si) + ": " + op_name(s.node->op);
    if (s.fused)
      label += " [fused, " + std::to_string(s.fused->instrs.size()) + " kernels" +
               (s.fused->sources.empty()
                    ? std::string()
                    : ", " + std::to_string(s.fused->sources.size()) + " computed inputs") +
               "]";
    if (s.epilogue)
      label += " [epilogue]";  // engine/fusion.hpp MatMulEpilogue
    else if (!s.fused && !s.extra_outs.empty())
      label += " [joint]";  // OpDef::pair
    label += '\n';
    label += o.shape.str() + " " + std::string(dtype_name(o.dtype)) + "\n" + s.node->name;
    out += "  s" + std::to_string(si) + " [label=\"" + escape(label) + "\", shape=box];\n";
    for (std::size_t k = 0; k < s.in_values.size(); ++k) {
      // A block the pass computes from a source (FusedSource) reads no input of its own.
      if (s.fused && k < s.fused->block_source.size() && s.fused->block_source[k] >= 0) continue;
      const int in = s.in_values[k];
      const int root = p.values[static_cast<std::size_t>(in)].root;
      auto w = writer.find(root);
      if (w != writer.end() && w->second == static_cast<int>(si)) continue;  // its own output
      if (w != writer.end() && w->second < static_cast<int>(si)) {
        out += "  s" + std::to_string(w->second) + " -> s" + std::to_string(si) + ";\n";
        continue;
      }
      const std::string id = source_id(in);
      if (!drawn[id]) {
        const Value& src = p.values[static_cast<std::size_t>(root)];
        const std::string kind = src.kind == Kind::kFed ? "fed" : "external";
        out += "  " + id + " [label=\"" +
               escape(kind + "\n" + (src.node ? src.node->name : std::string("?")) + "\n" +
                      src.shape.str()) +
               "\", shape=ellipse];\n";
        drawn[id] = true;
      }
      out += "  " + id + " -> s" + std::to_string(si) + ";\n";
    }
  }
  for (std::size_t ci = 0; ci < p.commits.size(); ++ci) {
    const int root = p.values[static_cast<std::size_t>(p.commits[ci].value)].root;
    auto w = writer.find(root);
    if (w == writer.end()) continue;
    out += "  c" + std::to_string(ci) + " [label=\"commit\", shape=note];\n  s" +
           std::to_string(w->second) + " -> c" + std::to_string(ci) + " [style=dashed];\n";
  }
  return out + "}\n";
}

}  // namespace ktape
