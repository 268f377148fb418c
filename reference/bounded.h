// bounded.h — a float64 value that carries two error bounds with it.
//
// The reference is written once, as templates over a scalar type T. With
// T = double it is plain float64 math (golden and finite-difference tests).
// With T = Bounded every operation also propagates, to first order plus the
// second-order terms that are cheap to keep, an upper bound on
//   kernel_bound: |result of a float32/bfloat16/float16 kernel − exact result|
//   reference:    |this float64 result − exact result|
// for a kernel that evaluates the same expression in float32 registers and
// stores tensors in the dtypes of the active RoundingModel. This is running
// error analysis done by operator overloading; docs/NUMERICS.md derives each
// rule. What these headers must not do: know about layers, tensors or
// kernels.
//
// The parts, in the order they build on each other:
//   rounding_model.h      the kernel's formats and rounding (RoundingModel)
//   error_parts.h         an error in parts and shared terms, and their rules
//   bounded_arithmetic.h  the Bounded value, + - * /
//   a_priori.h            shared values, exact shifts, known intervals
//   bounded_functions.h   abs, max, min, sqrt, exp, log, tanh, erf, store
//   reductions.h          sums: in any order, compensated, accumulated
#pragma once

#include "reference/a_priori.h"
#include "reference/bounded_arithmetic.h"
#include "reference/bounded_functions.h"
#include "reference/error_parts.h"
#include "reference/reductions.h"
#include "reference/rounding_model.h"
