// registered_backend.cpp — a program of the kind a user writes
// (gradeq/gradeq.h): the whole command line with two backends of its own,
// registered by name. "forwarded" is the host backend behind a
// ForwardingBackend; "overwriting" is the same with the weight-gradient
// op writing instead of accumulating (B1). registered_backend_verbs.sh
// drives every verb on both and requires that each verb ran on the backend
// it was given: the correct one passes, the buggy one fails or differs.
#include <memory>

#include "gradeq/gradeq.h"

namespace {

class Forwarded : public gradeq::ForwardingBackend {
 public:
  Forwarded() : ForwardingBackend(host_) {}
  std::string name() const override { return "forwarded"; }

 private:
  gradeq::CpuBackend host_;
};

class Overwriting : public Forwarded {
 public:
  std::string name() const override { return "overwriting"; }
  void linear_backward_weight(const gradeq::Tensor& dy, const gradeq::Tensor& x, const gradeq::Tensor& dw,
                              const gradeq::Tensor& db) override {
    const gradeq::Tensor outputs[] = {dw, db};
    zero(outputs);  // what beta = 0 does: the micro-batches before this one are lost
    Forwarded::linear_backward_weight(dy, x, dw, db);
  }
};

}  // namespace

int main(int argc, char** argv) {
  gradeq::register_backend("forwarded", "the host backend behind a ForwardingBackend",
                           [] { return std::make_unique<Forwarded>(); });
  gradeq::register_backend("overwriting", "forwarded, with dw = instead of dw +=",
                           [] { return std::make_unique<Overwriting>(); });
  return gradeq::run_cli(argc, argv);
}
