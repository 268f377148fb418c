// op_table.cpp — looking up an entry of the op table (its entries and the
// table itself are in op_table_entries.cpp), and the size a benchmark
// validates an op at.
#include "harness/core/op_table.h"

#include <stdexcept>

namespace gradeq {

const OpSpec& find_op(const std::string& name) {
  for (const OpSpec& op : op_table())
    if (op.name == name) return op;
  throw std::invalid_argument("no op '" + name + "' in the op table");
}

OpSize validation_size(const OpSize& s, double max_work) {
  OpSize v = s;
  const auto work = [&] { return static_cast<double>(v.rows) * static_cast<double>(v.in) * static_cast<double>(v.out); };
  while (work() > max_work) {
    long* largest = &v.rows;
    for (long* d : {&v.in, &v.out})
      if (*d > *largest) largest = d;
    *largest = (*largest + 1) / 2;
  }
  return v;
}

}  // namespace gradeq
