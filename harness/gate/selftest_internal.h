// selftest_internal.h — the pieces of the self-test (selftest.h), each in its
// own file: the kill matrix (selftest.cpp), the number of micro-batches from
// which a low-precision accumulation buffer (B16) is caught
// (low_precision_buffer_threshold.cpp) and the calibration campaign
// (campaign.cpp). Private to harness/gate.
#pragma once

#include <vector>

#include "harness/gate/selftest.h"

namespace gradeq::selftest_internal {

// The properties that run the backend: only they can catch a mutant.
std::vector<const Property*> backend_properties();

B16Threshold low_precision_buffer_threshold(DType compute, Backend& base, const ErrorModel& model);

Campaign run_campaign(const SelfTestOptions& o, Backend& base, const ProgressSink& progress);

}  // namespace gradeq::selftest_internal
