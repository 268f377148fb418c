// optimizers.cpp — names of optimizer configurations, for reports.
#include "reference/optimizers.h"

#include <sstream>

namespace gradeq::ref {

std::string optimizer_name(const OptimizerSpec& o) {
  std::ostringstream os;
  switch (o.kind) {
    case OptimizerKind::sgd:
      os << "SGD";
      if (o.momentum != 0.0) os << (o.nesterov ? " (Nesterov " : " (momentum ") << o.momentum << ")";
      break;
    case OptimizerKind::adam: os << "Adam (betas " << o.beta1 << ", " << o.beta2 << ", eps " << o.eps << ")"; break;
    case OptimizerKind::adamw: os << "AdamW (betas " << o.beta1 << ", " << o.beta2 << ", eps " << o.eps << ")"; break;
  }
  os << ", lr " << o.lr;
  if (o.weight_decay != 0.0) os << ", weight decay " << o.weight_decay;
  return os.str();
}

}  // namespace gradeq::ref
