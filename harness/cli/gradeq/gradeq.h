// gradeq/gradeq.h — gradeq for your own kernels: the one header a program
// that tests its own backend includes.
//
//   #include <gradeq/gradeq.h>
//
//   class MyBackend : public gradeq::ForwardingBackend {   // forwards every op ...
//    public:
//     MyBackend() : ForwardingBackend(host_) {}
//     std::string name() const override { return "mine"; }
//     void linear_backward_weight(...) override;           // ... except the ones you own
//    private:
//     gradeq::CpuBackend host_;
//   };
//
//   int main(int argc, char** argv) {
//     gradeq::register_backend("mine", "my fused weight-gradient kernel",
//                              [] { return std::make_unique<MyBackend>(); });
//     return gradeq::run_cli(argc, argv);   // check, report, sweep, selftest, list
//   }
//
// `./my_gate check --backend mine` is then the gate on your kernels, with
// every option of `gradeq check` (--config, --dump, --scenario, --property,
// --junit, --report), and `selftest --backend mine` shows the properties
// catch the catalogued bugs when they are planted into your backend.
// For GoogleTest, gradeq/testing.h registers one test per scenario and
// per property. Programs that drive the gate themselves call run_gate().
#pragma once

#include "harness/core/backends.h"           // register_backend, make_backend, EnvironmentError
#include "harness/cli/cli.h"            // run_cli
#include "harness/gate/gate.h"          // run_gate, GateOptions, CheckReport
#include "kernels/backend.h"            // Backend, Tensor, DType and the op arguments
#include "kernels/cpu/cpu_backend.h"    // CpuBackend: the host backend, to forward to
#include "kernels/forwarding_backend.h" // ForwardingBackend: replace the ops you own
#include "reports/report.h"             // check_summary, write_reports, report_junit
