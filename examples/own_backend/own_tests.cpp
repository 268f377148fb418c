// own_tests.cpp — the gate as GoogleTest tests: Own/Scenario.<name> and
// Own/Property.<name>, one per default scenario and property.
#include <memory>

#include <gradeq/testing.h>

#include "own_backend.h"

GRADEQ_BACKEND_TESTS(Own, [] { return std::make_unique<own::OwnBackend>(); });
