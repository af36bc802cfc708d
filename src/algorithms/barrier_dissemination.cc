// Cost: ceil(log2 n) steps, empty messages.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/pairwise.h"

namespace choir::algorithms {

Status BarrierDissemination(Context& c, const OpArgs&) {
  const patterns::Dissemination d{c.rank(), c.size()};
  for (int k = 0; k < d.Rounds(); ++k) {
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(d.SendTo(k), nullptr, 0), c.Recv(d.RecvFrom(k), nullptr, 0)}));
  }
  return Status::Ok();
}

}  // namespace choir::algorithms
