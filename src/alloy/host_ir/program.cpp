#include "alloy/host_ir/program.h"

#include <sstream>

namespace alloy::host_ir {

Program lower_to_program(Segmentation segmentation) {
  Program program;
  for (const Segment& s : segmentation.segments) {
    // CPU reference kernels and views return their own results; GPU kernels write into buffers
    // the program allocates from the stream-ordered pool.
    bool preallocate = segmentation.target == Target::cuda && s.scheduler != "noop";
    if (preallocate)
      for (Value* out : s.outputs) program.nodes.push_back(Allocate{out});
    program.nodes.push_back(Launch{s.id});
  }
  program.segmentation = std::move(segmentation);
  return program;
}

std::string Program::str() const {
  std::ostringstream os;
  os << "program (" << (segmentation.target == Target::cpu ? "cpu" : "cuda") << "):\n";
  for (const Node& node : nodes) {
    if (auto* a = std::get_if<Allocate>(&node)) {
      os << "  Allocate " << a->value->name << ": " << a->value->type_str() << "\n";
    } else if (auto* l = std::get_if<Launch>(&node)) {
      const Segment& s = segmentation.segments.at(l->segment);
      os << "  Launch segment " << s.id << " [" << s.scheduler << "] (";
      for (size_t i = 0; i < s.inputs.size(); ++i) os << (i ? ", " : "") << s.inputs[i]->name;
      os << ") -> (";
      for (size_t i = 0; i < s.outputs.size(); ++i) os << (i ? ", " : "") << s.outputs[i]->name;
      os << ")\n";
    }
  }
  return os.str();
}

}  // namespace alloy::host_ir
