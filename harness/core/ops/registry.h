// registry.h — every op kind gradeq models, by name. The records are the
// files of this folder (one op each); the build lists them
// (harness/core/CMakeLists.txt generates the list from the folder).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/core/ops/op_record.h"

namespace gradeq {

// Every record, in the order of their names.
const std::vector<const OpRecord*>& all_ops();
// The record named `name`, or nullptr.
const OpRecord* op_named(std::string_view name);
// The loop's half of a node's op (every op of a model comes from here).
const OpRecord& record_of(const ref::Op& op);

// An op as the config writes it: "linear:8", "relu", "groupnorm:4". Throws
// std::invalid_argument naming the text and the ops there are.
ref::LayerSpec parse_layer(std::string_view text);
// The options after an op's argument ("3:stride=2", the text after
// "conv2d:16:"), each at its default where not given, in the op's order.
// Throws std::invalid_argument with a message starting ": ".
std::vector<long> parse_options(const OpRecord& op, long argument, std::string_view rest);
// An op by name and argument, or a combinator and its branch: the layers
// code builds (layer_of("linear", 16), combinator_of("residual", {...})).
ref::LayerSpec layer_of(std::string_view name, long argument = 0);
ref::LayerSpec combinator_of(std::string_view name, std::vector<ref::LayerSpec> body);
// The inverse of parse_layer: "linear:8"; a combinator's name alone ("residual").
std::string layer_text(const ref::LayerSpec& layer);
// The config syntax of every op, for messages: "linear:<output features>, relu, ...".
std::string op_syntax();

}  // namespace gradeq
