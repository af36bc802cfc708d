// ExplainPlan: what the selection would pick per collective and size range on
// a topology, with the cost model's predicted times. (Filled in with the
// hierarchical algorithms and the cost model.)
#include "choir/topology.h"

namespace choir {

Result<std::vector<PlanRow>> ExplainPlan(const Topology&) {
  return Status(Code::kNotSupported, "the cost model is not built yet");
}

}  // namespace choir
