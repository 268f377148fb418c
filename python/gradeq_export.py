"""gradeq_export — write a gradeq window set from your own training loop.

A window set (docs/VERIFY.md) is a directory with manifest.json and NumPy
.npy files: the scenario (model, loss, split, optimizer and every
hyper-parameter, as gradeq's config keys), each window's batch, the
initial parameters, and per window what the run fed and recorded: the
gradient as accumulation made it (before the clip), the clip, the learning
rate, the weights after the step and the optimizer state. `gradeq verify
DIR` then computes gradeq's float64 reference from the same inputs and
judges the run with the same verdicts and bounds as `gradeq check`.

NumPy only: WindowSetWriter, the format itself. With PyTorch: TorchRecorder
records a loop over a model of Linear, ReLU, GELU (either form), LayerNorm,
BatchNorm1d, GroupNorm and Dropout (p = 0, or in eval mode) layers, in a
chain (an nn.Sequential) or joined by residuals, x + f(x), and concats,
torch.cat([x, f(x)], dim=-1), nested as deep as they come: any module
torch.fx traces into that form (ModelLayers). It reads what it can from
the objects themselves (the optimizer and its hyper-parameters, the split,
the clip, the layers and their eps, the frozen parameters, the dtypes, the
loss scaler) and refuses a scenario key that contradicts them.

    rec = TorchRecorder("out", model, optimizer, {"name": "my_loop"})
    for x, y in windows:                          # one optimizer step each
        rec.begin_window(x, y)                    # the window's batch
        optimizer.zero_grad()
        for xb, yb in micro_batches(x, y):
            rec.micro_batch(xb, yb)               # what is fed
            loss_fn(model(xb), yb).backward()
        rec.clip_grad_norm_(model.parameters(), 1.0)   # torch's, recorded
        rec.before_step()
        optimizer.step(); scheduler.step()
        rec.after_step()
    rec.close()                                   # manifest.json

Every refusal is a ValueError that names the module, tensor or setting.
"""

import json
import math
import operator
import os

import numpy as np

FORMAT = "gradeq-window-set"
SCHEMA_VERSION = 4
IGNORE_CLASS = -100  # padding tokens, PyTorch's ignore_index
CLIP_EPSILON = 1e-6  # clip_grad_norm_'s, part of its definition


# The config keys a scenario may hold (harness/core/config.h, README "A config
# file"): a misspelt key is refused here, where the loop is, not by verify.
CONFIG_KEYS = {
    "name", "input_features", "positions", "layers", "loss", "data", "split", "learning_rate", "seed",
    "normalization", "compute_dtype", "accumulate_dtype", "optimizer", "momentum", "dampening", "nesterov",
    "weight_decay", "betas", "eps", "clip_max_norm", "warmup_steps", "total_steps", "loss_scale",
    "dynamic_loss_scale", "growth_interval", "compensated", "norm_eps", "batchnorm_momentum", "tf32",
    "reduced_precision_reduction", "checkpoint_every", "growth_factor", "backoff_factor", "batchnorm_mode", "frozen"}


def _file(run, window, tensor):
    name = "%s_w%d_%s" % (run, window, tensor)
    for c in "/: ":
        name = name.replace(c, "_")
    return name + ".npy"


def _as_matrix(a, dtype, what):
    """a as a C-ordered matrix of `dtype`; a value that dtype does not hold
    exactly (a float64 result, 0.1) is refused, never rounded in silence."""
    try:
        a = np.asarray(a)
    except Exception as e:  # ragged lists and the like
        raise ValueError("%s: not an array (%s)" % (what, e)) from None
    if a.dtype.kind not in "fiub":
        raise ValueError("%s: values of dtype %s are not numbers" % (what, a.dtype))
    converted = a.astype(dtype)
    finite = np.isfinite(a) if a.dtype.kind == "f" else np.ones(a.shape, bool)
    if not np.array_equal(converted[finite].astype(a.dtype), a[finite]):
        raise ValueError("%s: values that are not %s numbers (gradeq records %s; round them where the run does)"
                         % (what, np.dtype(dtype).name, np.dtype(dtype).name))
    if a.ndim == 0:
        return converted.reshape(1, 1)
    if a.ndim == 1:
        return converted.reshape(1, -1)  # vectors are [1, n] in gradeq
    if a.ndim != 2:
        raise ValueError("%s: gradeq tensors are matrices; got shape %s" % (what, a.shape))
    return np.ascontiguousarray(converted)


def _name(text, what):
    if not isinstance(text, str) or not text or any(c in text for c in "/\\") or text in (".", ".."):
        raise ValueError("%s %r is not a name gradeq can file" % (what, text))
    return text


class WindowSetWriter:
    """The format itself, from NumPy arrays.

    scenario: gradeq config keys (harness/core/config.h): at least name,
    input_features, layers, split. Parameter names are gradeq's:
    "layer<l>.weight" / "layer<l>.bias" for the l-th element of `layers`,
    "layer<l>.<j>.weight" for the j-th of a residual's or concat's branch
    there, and so on down (ModelLayers).
    Every array is checked to be what it says: float32 values (the learning
    rate float64), integer classes.
    """

    def __init__(self, directory, scenario):
        if not isinstance(scenario, dict):
            raise ValueError("scenario must be a dict of gradeq config keys, got %s" % type(scenario).__name__)
        unknown = sorted(set(scenario) - CONFIG_KEYS)
        if unknown:
            raise ValueError("scenario keys %s are not gradeq config keys (README \"A config file\")" % unknown)
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise ValueError("%s exists and is not a directory" % directory)
        self.directory = directory
        self.scenario = dict(scenario)
        os.makedirs(directory, exist_ok=True)
        for f in os.listdir(directory):  # a set is written whole: no stale files
            if f.endswith(".npy") or f == "manifest.json":
                os.remove(os.path.join(directory, f))
        self.windows = []
        self.window_data = []  # (inputs, targets or classes) as written, for a second run to match
        self.initial = {}
        self.initial_values = {}  # as given, for a second run to match
        self.parameters = []  # {"name", "shape", "torch"} where the torch name is known
        self.initial_state = {}
        self.runs = {}
        self.read = None  # what the accumulated run's recorder read, for a full-batch run's to match

    def _save(self, file, array):
        np.save(os.path.join(self.directory, file), array)
        return file

    def set_initial(self, name, value, torch=None):
        """The parameter's value before the first window; torch: its name in
        the model that trains it (the manifest's "parameters" list)."""
        _name(name, "parameter")
        self.initial_values[name] = np.array(value, copy=True)  # not a view of a tensor that trains on
        matrix = _as_matrix(value, np.float32, name)
        self.initial[name] = self._save("initial_%s.npy" % name, matrix)
        if torch is not None:
            if not isinstance(torch, str) or not torch or any(e["torch"] == torch for e in self.parameters):
                raise ValueError("parameter %s: torch name %r is empty or not unique" % (name, torch))
            self.parameters.append({"name": name, "shape": list(matrix.shape), "torch": torch})

    def set_initial_state(self, entry, value):
        """The state the first window starts from, where it is not fresh:
        "state/layer0.weight.exp_avg", "stats/layer1.running_mean", "state/step", ..."""
        if not isinstance(entry, str):
            raise ValueError("initial state entry %r is not a name" % (entry,))
        self.initial_state[entry] = self._save(_file("initial", 0, entry), _as_matrix(value, np.float32, entry))

    def add_window(self, inputs, targets=None, classes=None, split=None):
        """The window's batch: inputs [rows, features]; targets [rows, outputs]
        (mse) or classes [rows] (cross-entropy, -100 = padding); the declared
        split in samples."""
        w = len(self.windows)
        if (targets is None) == (classes is None):
            raise ValueError("window %d: give targets (mse) or classes (cross-entropy), one of them" % w)
        x = _as_matrix(inputs, np.float32, "window %d inputs" % w)
        entry = {"inputs": self._save("window%d_inputs.npy" % w, x)}
        if split is not None:
            try:
                entry["split"] = [int(s) for s in split]
            except (TypeError, ValueError):
                raise ValueError("window %d: split %r is not a list of micro-batch sizes" % (w, split)) from None
        if targets is not None:
            y = _as_matrix(targets, np.float32, "window %d targets" % w)
            entry["targets"] = self._save("window%d_targets.npy" % w, y)
        else:
            y = _as_matrix(classes, np.int64, "window %d classes" % w).reshape(-1)
            entry["classes"] = self._save("window%d_classes.npy" % w, y)
        self.windows.append(entry)
        self.window_data.append((x, y))

    def add_result(self, run, window, tensors, fed, skipped=False, loss=None, missing_gradients=()):
        """tensors: {"grad/layer0.weight": array, "clip/norm", "step/lr", "param/...",
        "state/...", "stats/..."}; fed: per micro-batch, the indices of the
        window's samples it fed (-1: a sample not in the window)."""
        if run not in ("K_acc", "K_full"):
            raise ValueError("run must be 'K_acc' or 'K_full', got %r" % (run,))
        if not isinstance(window, int) or window < 0:
            raise ValueError("window must be a whole number >= 0, got %r" % (window,))
        try:
            fed = [[int(i) for i in mb] for mb in fed]
        except (TypeError, ValueError):
            raise ValueError("fed must list, per micro-batch, the window's sample indices it fed (e.g. [[0, 1], "
                             "[2, 3]]); got %r" % (fed,)) from None
        if not isinstance(tensors, dict):
            raise ValueError("tensors must map entry names to arrays")
        windows = self.runs.setdefault(run, [])
        while len(windows) <= window:
            windows.append({"skipped": False, "fed": [], "tensors": {}})
        entry = windows[window]
        entry["skipped"] = bool(skipped)
        entry["fed"] = fed
        if missing_gradients:
            entry["missing_gradients"] = [_name(p, "parameter") for p in missing_gradients]
        if loss is not None:
            entry["loss"] = float(loss)
        for name, value in tensors.items():
            dtype = np.float64 if name == "step/lr" else np.float32  # the learning rate is a float64 setting
            entry["tensors"][name] = self._save(_file(run, window, name), _as_matrix(value, dtype, name))

    def close(self):
        runs = {name: {"role": "kernel", "split": "accumulated" if name == "K_acc" else "full", "windows": ws}
                for name, ws in self.runs.items()}
        initial = {"parameters": self.initial}
        if self.initial_state:
            initial["state"] = self.initial_state
        manifest = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "scenario": self.scenario,
                    "windows": self.windows, "initial": initial, "runs": runs}
        if self.parameters:
            manifest["parameters"] = self.parameters
        with open(os.path.join(self.directory, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)


# ------------------------------------------------------------------ PyTorch


def _torch():
    import torch
    return torch


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


# ---------------------------------------------------------------- the model
#
# gradeq's model (README "A config file") is a list of elements, each an op
# ("linear:64", "gelu", ...) or a block that starts at a value x and runs a
# branch f, itself such a list: {"residual": f} is x + f(x), {"concat": f}
# is cat([x, f(x)], dim=-1). Element i of the model has the prefix
# "layer<i>", element j of a branch at prefix P the prefix "P.<j>"; its
# parameters are "<prefix>.weight" and "<prefix>.bias". A chain of ops is
# the list of them: "layer0.weight", ... as in an nn.Sequential.
#
# What torch.fx traces is read into that form and nothing else: every value
# is read by one node, or starts blocks, each ended by the node that
# combines the value with its branch. Ops go through the tables below (a
# module's class, or a function's target, to its converter); a converter
# refuses what gradeq's op does not compute.

MODELLED = "Linear, ReLU, GELU, LayerNorm, BatchNorm1d, GroupNorm, Dropout(p=0)"


def _where(name, m):
    return "module '%s' (%s)" % (name, type(m).__name__)


def _node(node):
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
    return "node '%s' (%s %s)" % (node.name, node.op, target)


def _quoted(nodes):
    return " and ".join("'%s'" % n.name for n in nodes)


# Module converters: (ModelLayers, module name, module) -> (gradeq's op, or
# None for the identity; the parameters gradeq's op has).

def _linear(net, name, m):
    if m.bias is None:
        raise ValueError("%s: gradeq's linear layers have a bias (bias=False is not modelled)" % _where(name, m))
    net.width = (0, m.out_features)
    return "linear:%d" % m.out_features, ("weight", "bias")


def _relu(net, name, m):
    return "relu", ()


def _gelu_op(approximate, where):
    ops = {"none": "gelu_erf", "tanh": "gelu"}
    if approximate not in ops:
        raise ValueError("%s: approximate=%r" % (where, approximate))
    return ops[approximate]


def _gelu(net, name, m):
    return _gelu_op(m.approximate, _where(name, m)), ()


def _layernorm(net, name, m):
    if len(m.normalized_shape) != 1 or not m.elementwise_affine:
        raise ValueError("%s: gradeq models LayerNorm over the last dimension, with weight and bias" % _where(name, m))
    net.eps.add(float(m.eps))
    return "layernorm", ("weight", "bias")


def _rmsnorm(net, name, m):
    if len(m.normalized_shape) != 1 or not m.elementwise_affine or m.eps is None:
        raise ValueError("%s: gradeq models RMSNorm over the last dimension, with a weight and a given eps"
                         % _where(name, m))
    net.eps.add(float(m.eps))
    return "rmsnorm", ("weight",)


def _batchnorm(net, name, m):
    where = _where(name, m)
    if not m.affine or not m.track_running_stats:
        raise ValueError("%s: gradeq models BatchNorm1d with weight, bias and running statistics" % where)
    if m.momentum is None:
        raise ValueError("%s: momentum=None (a cumulative average) is not modelled" % where)
    net.eps.add(float(m.eps))
    net.momentum.add(float(m.momentum))
    net.must_train.append((name, m))  # gradeq's batchnorm normalizes by the batch's statistics

    def inputs(positions, sequences, features):
        if sequences:
            raise ValueError("module '%s' (BatchNorm1d) normalizes dimension 1, the positions of [samples, positions, "
                             "features] inputs; gradeq's batchnorm is per feature over every row" % name)

    net.input_checks.append(inputs)
    return "batchnorm", ("weight", "bias")


def _groupnorm(net, name, m):
    if not m.affine:
        raise ValueError("%s: gradeq models GroupNorm with weight and bias" % _where(name, m))
    net.eps.add(float(m.eps))

    def inputs(positions, sequences, features):
        if positions > 1:
            raise ValueError("module '%s' (GroupNorm) normalizes each row alone when it gets [rows, channels]; "
                             "gradeq's groupnorm spans a sample's %d positions: not the same layer" % (name, positions))

    net.input_checks.append(inputs)
    return "groupnorm:%d" % m.num_groups, ("weight", "bias")


def _dropout(net, name, m):
    if m.p != 0.0:
        if m.training:
            raise ValueError("%s: p=%g in training mode draws a random mask no reference can repeat; export with p=0 "
                             "or the model in eval mode" % (_where(name, m), m.p))
        net.must_not_train.append((name, m))  # the identity only while it stays in eval mode
    return None, ()


def _identity(net, name, m):
    return None, ()


def _module_ops(nn):
    ops = {nn.Linear: _linear, nn.ReLU: _relu, nn.GELU: _gelu, nn.LayerNorm: _layernorm, nn.BatchNorm1d: _batchnorm,
           nn.GroupNorm: _groupnorm, nn.Dropout: _dropout, nn.Identity: _identity}
    if getattr(nn, "RMSNorm", None) is not None:
        ops[nn.RMSNorm] = _rmsnorm
    return ops


# Function converters: (ModelLayers, fx node) -> gradeq's op.

def _relu_call(net, node):
    return "relu"


def _gelu_call(net, node):
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return _gelu_op(approximate, _node(node))


def _function_ops(torch, F):
    return {("call_function", F.relu): _relu_call, ("call_function", torch.relu): _relu_call,
            ("call_method", "relu"): _relu_call, ("call_function", F.gelu): _gelu_call}


# Nodes that end a block: the block's kind, its two operands (None: not a
# block's end, a number added), whether the input must come first, and the
# width after it from the input's and the branch's. A width is (a, b):
# a * input_features + b, as it is known before the inputs are.

def _tensor_operands(values):
    from torch.fx import Node

    return list(values) if len(values) == 2 and all(isinstance(v, Node) for v in values) else None


def _add_operands(node):
    unknown = sorted(set(node.kwargs) - {"input", "other", "alpha"})
    if unknown:
        raise ValueError("%s: %s= is not modelled" % (_node(node), unknown[0]))
    if node.kwargs.get("alpha", 1) != 1:
        raise ValueError("%s: alpha=%r scales the branch; gradeq's residual adds it as it is"
                         % (_node(node), node.kwargs["alpha"]))
    return _tensor_operands(list(node.args) + [node.kwargs[k] for k in ("input", "other") if k in node.kwargs])


def _cat_dim(node):
    return node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)


def _cat_operands(node):
    tensors = node.args[0] if node.args else node.kwargs.get("tensors")
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 2:
        raise ValueError("%s concatenates %s tensors: gradeq's concat joins two, a block's input and its branch's "
                         "output, [x, f(x)]" % (_node(node), len(tensors) if isinstance(tensors, (list, tuple)) else
                                                "a sequence of"))
    dim = _cat_dim(node)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim == 0 or dim < -1:
        raise ValueError("%s concatenates on dim %r: gradeq's concat joins features, the last dimension (dim=-1)"
                         % (_node(node), dim))
    operands = _tensor_operands(tensors)
    if operands is None:
        raise ValueError("%s concatenates what is not two computed tensors: gradeq's concat is [x, f(x)]" % _node(node))
    return operands


def _residual_width(net, node, x, f):
    def inputs(positions, sequences, features):
        wx, wf = x[0] * features + x[1], f[0] * features + f[1]
        if wx != wf:
            raise ValueError("%s adds a branch of %d features to its input of %d: a sum that broadcasts is not a "
                             "residual" % (_node(node), wf, wx))

    if x != f:
        if x[0] == f[0]:
            inputs(1, False, 0)  # they differ for every input width
        net.input_checks.append(inputs)
    return x


def _concat_width(net, node, x, f):
    dim = _cat_dim(node)
    if dim != -1:  # the last dimension only for inputs of dim + 1 dimensions
        def inputs(positions, sequences, features):
            dims = 3 if sequences else 2
            if dim != dims - 1:
                raise ValueError("%s concatenates on dim %d of %d-D inputs: gradeq's concat joins features, the last "
                                 "dimension (dim=-1)" % (_node(node), dim, dims))

        net.input_checks.append(inputs)
    return (x[0] + f[0], x[1] + f[1])


class _Block:
    """What a node that ends a block is (see above)."""

    def __init__(self, kind, operands, ordered, width):
        self.kind, self.operands, self.ordered, self.width = kind, operands, ordered, width


def _block_ends(torch):
    residual = _Block("residual", _add_operands, False, _residual_width)  # x + f(x) and f(x) + x are one sum
    concat = _Block("concat", _cat_operands, True, _concat_width)
    ends = {("call_function", operator.add): residual, ("call_function", torch.add): residual,
            ("call_method", "add"): residual, ("call_function", torch.cat): concat}
    for alias in ("concat", "concatenate"):
        if getattr(torch, alias, None) is not None:
            ends[("call_function", getattr(torch, alias))] = concat
    return ends


class ModelLayers:
    """A model as gradeq's layers: `layers` (config syntax, blocks nested),
    the gradeq name of each trained torch parameter (`names`, and the other
    way `torch_of`, in gradeq's order), norm_eps and batchnorm_momentum
    where the model has normalizers, and the frozen parameters. Raises
    ValueError naming the module or fx node gradeq does not model."""

    def __init__(self, model):
        torch = _torch()
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.fx as fx

        if not isinstance(model, nn.Module):
            raise ValueError("the model must be a torch.nn.Module, got %s" % type(model).__name__)
        self._module_ops = _module_ops(nn)
        self._function_ops = _function_ops(torch, F)
        self._block_ends = _block_ends(torch)
        leaves = tuple(self._module_ops)

        class Tracer(fx.Tracer):
            # A subclass of a layer gradeq models (a Linear whose forward is a
            # kernel under test) is that layer: verify judges its numbers.
            def is_leaf_module(self, m, qualified_name):
                return isinstance(m, leaves) or super().is_leaf_module(m, qualified_name)

        try:
            graph = Tracer().trace(model)
        except Exception as e:  # data-dependent control flow and the like
            raise ValueError("the model cannot be traced by torch.fx into gradeq's layers: %s" % e) from None
        self._named_modules = dict(model.named_modules())
        self.names, self.torch_of = {}, {}
        # Per op, depth-first: the module's name (or the function's node) and gradeq's op.
        self.modules, self.kinds = [], []
        # Modules whose training mode decides what they compute: BatchNorm
        # must train (gradeq's is training mode), Dropout with p > 0 must not.
        self.must_train, self.must_not_train = [], []
        # What the inputs' shape decides, per op or block: each called with
        # (positions, sequences, features) and raising ValueError.
        self.input_checks = []
        self.width = (1, 0)  # the width so far, as (a, b): a * input_features + b
        self.eps, self.momentum = set(), set()
        self._used, self._visited = set(), set()
        self._order = {node: i for i, node in enumerate(graph.nodes)}
        seen = {}
        for mname, m in model.named_modules():
            for pname, p in m._parameters.items():  # each module's own, duplicates kept
                if p is None:
                    continue
                name = "%s.%s" % (mname, pname) if mname else pname
                if id(p) in seen:
                    raise ValueError("parameters '%s' and '%s' are one tensor: shared (tied) weights are not modelled "
                                     "yet" % (seen[id(p)], name))
                seen[id(p)] = name
        inputs = [node for node in graph.nodes if node.op == "placeholder"]
        if len(inputs) != 1:
            raise ValueError("the model takes %s: gradeq models one input" % (
                "more than one input (%s)" % inputs[1].target if inputs else "no input"))
        output = next(node for node in graph.nodes if node.op == "output")
        self.layers, last = self._series(inputs[0], output, (), "layer%d")
        if output.args[0] is not last:
            raise ValueError("the model returns %r, not one tensor: gradeq's model has one output" % (output.args[0],))
        for node in graph.nodes:
            if node.op not in ("placeholder", "output") and node not in self._visited:
                raise ValueError("%s is not computed from the model's input: not a layer gradeq models" % _node(node))
        for name, p in model.named_parameters():
            if name not in self.names:
                raise ValueError("parameter '%s' belongs to no layer gradeq models (unused by forward?)" % name)
        self.frozen = [self.names[n] for n, p in model.named_parameters() if not p.requires_grad]
        if len(self.eps) > 1:
            raise ValueError("the normalizers have different eps %s: gradeq's norm_eps is one value" % sorted(self.eps))
        self.norm_eps = next(iter(self.eps)) if self.eps else None
        if len(self.momentum) > 1:
            raise ValueError("the BatchNorm layers have different momentum %s: gradeq's batchnorm_momentum is one value"
                             % sorted(self.momentum))
        self.batchnorm_momentum = next(iter(self.momentum)) if self.momentum else None

    def output_width(self, input_features):
        return self.width[0] * input_features + self.width[1]

    def _series(self, start, until, excluded, at):
        """The elements computed from `start` up to the value that `until`
        reads (the output node, or the node that ends a block), and that
        value. excluded: the ends of the blocks that start at `start` and
        hold this series; at: the prefix of element j ("layer%d", or the
        block's prefix + ".%d")."""
        elements, value = [], start
        while True:
            users = [u for u in value.users if u not in excluded]
            if users == [until]:
                return elements, value
            if until in users:
                raise ValueError("%s is read by %s besides %s, which ends its block or the model: gradeq's layers read "
                                 "a value once" % (_node(value), _quoted(u for u in users if u is not until),
                                                   _node(until)))
            if not users or (len(users) == 1 and users[0].op == "output"):  # a branch that does not end
                raise self._outside(start, until, value)
            ends = [u for u in users if self._ends_block(u, value)]
            if ends:
                end = max(ends, key=self._order.get)  # the outermost block: its end is computed last
                elements.append(self._block(value, end, excluded + (end,), at % len(elements)))
                value = end
            elif len(users) == 1:
                op = self._op(users[0], value, at % len(elements))
                if op is not None:
                    elements.append(op)
                value = users[0]
            else:
                raise ValueError("%s is read by %s: gradeq's layers read a value once, or where it starts blocks, by "
                                 "the branch and the node that ends each, x + f(x) or cat([x, f(x)], dim=-1)"
                                 % (_node(value), _quoted(users)))
            excluded = ()

    def _outside(self, start, until, value):
        if until.op == "output":
            return ValueError("%s leads nowhere: the model's output is not computed from it" % _node(value))
        foreign = [o for o in self._block_ends[(until.op, until.target)].operands(until) if o is not start]
        return ValueError("%s reads '%s', a value from outside its block: a block combines a value with a branch "
                          "computed from it alone" % (_node(until), (foreign or [start])[0].name))

    def _ends_block(self, node, value):
        block = self._block_ends.get((node.op, node.target))
        operands = None if block is None else block.operands(node)
        return operands is not None and any(o is value for o in operands)

    def _block(self, value, end, excluded, prefix):
        """The block that starts at `value` and that `end` ends."""
        block = self._block_ends[(end.op, end.target)]
        operands = block.operands(end)
        if all(o is value for o in operands):
            raise ValueError("%s combines '%s' with itself: a block with an empty branch is not modelled"
                             % (_node(end), value.name))
        width = self.width
        branch, _ = self._series(value, end, excluded, prefix + ".%d")
        if block.ordered and operands[0] is not value:
            raise ValueError("%s puts its branch before its input '%s': gradeq's %s is [x, f(x)], the input first"
                             % (_node(end), value.name, block.kind))
        if not branch:
            raise ValueError("%s: its branch from '%s' holds no layer (identities only): a block with an empty branch "
                             "is not modelled" % (_node(end), value.name))
        self._visited.add(end)
        self.width = block.width(self, end, width, self.width)
        return {block.kind: branch}

    def _op(self, node, value, prefix):
        """The op `node` computes from `value` alone (None: the identity);
        a module's parameters take gradeq's names under `prefix`."""
        if node.all_input_nodes != [value]:
            raise ValueError("%s reads %s, not '%s' alone: a layer gradeq models reads one value" % (
                _node(node), _quoted(node.all_input_nodes), value.name))
        if node.op == "call_module":
            m = self._named_modules[node.target]
            convert = next((self._module_ops[c] for c in type(m).__mro__ if c in self._module_ops), None)
            if convert is None:
                raise ValueError("%s is not a layer gradeq models (%s)" % (_where(node.target, m), MODELLED))
            op, expected = convert(self, node.target, m)
            inplace = getattr(m, "inplace", False)
        else:
            convert = self._function_ops.get((node.op, node.target))
            if convert is None:
                raise ValueError("%s is not a layer gradeq models (%s; a residual x + f(x), a concat cat([x, f(x)], "
                                 "dim=-1))" % (_node(node), MODELLED))
            m, op, expected = None, convert(self, node), ()
            inplace = node.kwargs.get("inplace", False)
        if inplace and len(value.users) > 1:
            raise ValueError("%s changes '%s' in place, which %s also read: the sum or concat would see the changed "
                             "value" % (_node(node), value.name, _quoted(u for u in value.users if u is not node)))
        self._visited.add(node)
        if op is None:
            return None
        if m is not None:
            self._parameters(node.target, m, op, expected, prefix)
        self.modules.append(node.target if m is not None else node.name)
        self.kinds.append(op)
        return op

    def _parameters(self, name, m, op, expected, prefix):
        owned = [pname for pname, _ in m.named_parameters(recurse=False)] + \
                [bname for bname, _ in m.named_buffers(recurse=False)]
        if name in self._used and owned:
            raise ValueError("module '%s' is used twice: shared (tied) layers are not modelled yet" % name)
        self._used.add(name)
        names = sorted(pname for pname, _ in m.named_parameters())
        if names != sorted(expected):
            raise ValueError("module '%s' (%s) has the parameters %s; gradeq's %s has %s (a reparametrized or adapted "
                             "layer is not modelled)" % (name, type(m).__name__, names, op.split(":")[0],
                                                         sorted(expected)))
        for pname, _ in m.named_parameters(recurse=False):
            self.names["%s.%s" % (name, pname)] = "%s.%s" % (prefix, pname)
            self.torch_of["%s.%s" % (prefix, pname)] = "%s.%s" % (name, pname)

    def check_modes(self):
        """The modules' training modes as gradeq models them, now."""
        for name, m in self.must_train:
            if not m.training:
                raise ValueError("module '%s' (BatchNorm1d) is in eval mode: it normalizes by its running statistics, "
                                 "gradeq's batchnorm by the batch's (training mode)" % name)
        for name, m in self.must_not_train:
            if m.training:
                raise ValueError("module '%s' (Dropout, p=%g) is in training mode: its random mask no reference can "
                                 "repeat; feed with p=0 or the module in eval mode" % (name, m.p))

    def check_inputs(self, positions, sequences, features):
        """What the inputs' shape decides: [samples, positions, features]
        (sequences) or [rows, features] with `positions` rows a sample."""
        for check in self.input_checks:
            check(positions, sequences, features)


def layers_of(model):
    """gradeq's layer list for a model (raises ValueError on what gradeq does not model)."""
    return ModelLayers(model).layers


def optimizer_settings(optimizer, trained, model=None):
    """gradeq's optimizer keys, read from a torch optimizer's class and
    param_groups. `trained`: the parameters that require a gradient; every
    one must be stepped, and (with `model`) nothing else may be."""
    torch = _torch()
    kinds = [(torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"), (torch.optim.SGD, "sgd")]
    kind = next((name for cls, name in kinds if type(optimizer) is cls), None)
    if kind is None:
        raise ValueError("optimizer %s is not one gradeq models (torch.optim.SGD, Adam, AdamW)"
                         % type(optimizer).__name__)
    groups = optimizer.param_groups
    stepped = {id(p) for g in groups for p in g["params"]}
    for name, p in trained:
        if id(p) not in stepped:
            raise ValueError("parameter '%s' requires a gradient but is in none of the optimizer's param_groups: "
                             "freeze it (requires_grad_(False)) or give it to the optimizer" % name)
    if model is not None:
        ours = {id(p) for p in model.parameters()}
        for i, g in enumerate(groups):
            for p in g["params"]:
                if id(p) not in ours and p.requires_grad:
                    raise ValueError("optimizer param_groups[%d] steps a tensor of shape %s that is not a parameter of "
                                     "the model's layers: gradeq's reference would not step it" % (i, tuple(p.shape)))
    keys = ["momentum", "dampening", "nesterov", "weight_decay"] if kind == "sgd" else ["betas", "eps", "weight_decay"]
    out = None
    for i, g in enumerate(groups):
        for flag in ("maximize", "amsgrad", "capturable", "differentiable"):
            if g.get(flag):
                raise ValueError("optimizer param_groups[%d]: %s=True is not modelled" % (i, flag))
        if kind == "adam" and g.get("decoupled_weight_decay"):
            kind = "adamw"  # Adam(decoupled_weight_decay=True) is AdamW
        s = {"optimizer": kind, "learning_rate": float(g.get("initial_lr", g["lr"]))}
        for k in keys:
            v = g[k]
            s[k] = [float(b) for b in v] if k == "betas" else (bool(v) if k == "nesterov" else float(v))
        if out is not None and not _same(out, s):
            raise ValueError("optimizer param_groups[%d] has settings %s, param_groups[0] %s: gradeq steps every "
                             "parameter with one set" % (i, s, out))
        out = s
    return out


class TorchRecorder:
    """Records a PyTorch accumulation loop as a window set (run K_acc, or
    K_full for its full-batch counterpart with writer=the K_acc recorder's
    writer). See the module docstring and docs/VERIFY.md.

    scenario: gradeq config keys the recorder cannot read from the objects
    (name, normalization, warmup_steps and total_steps of the schedule,
    compute_dtype where no autocast shows it, positions for 2-D inputs);
    any key it can read and contradicts is refused. scaler: a
    torch.cuda.amp.GradScaler (or torch.amp.GradScaler) the loop uses.
    steps_taken: optimizer steps before the first recorded window.
    """

    _STATE = {"momentum_buffer": "momentum_buffer", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}

    def __init__(self, directory, model, optimizer, scenario=None, run="K_acc", writer=None, steps_taken=0,
                 scaler=None):
        torch = _torch()
        if run not in ("K_acc", "K_full"):
            raise ValueError("run must be 'K_acc' or 'K_full', got %r" % (run,))
        if scenario is not None and not isinstance(scenario, dict):
            raise ValueError("scenario must be a dict of gradeq config keys, got %s" % type(scenario).__name__)
        unknown = sorted(set(scenario or {}) - CONFIG_KEYS)
        if unknown:
            raise ValueError("scenario keys %s are not gradeq config keys (README \"A config file\")" % unknown)
        if (run == "K_full") != (writer is not None) or (writer is not None and not isinstance(writer, WindowSetWriter)):
            raise ValueError("a K_full recorder writes beside the accumulated run: writer=<the K_acc recorder>.writer; "
                             "a K_acc recorder makes its own")
        if run == "K_full" and "K_acc" not in writer.runs:
            raise ValueError("writer=...: the accumulated run has recorded no window yet")
        if scaler is not None and not all(hasattr(scaler, a) for a in ("is_enabled", "get_scale", "state_dict")):
            raise ValueError("scaler=%r is not a torch GradScaler" % (scaler,))
        if not isinstance(steps_taken, int) or isinstance(steps_taken, bool) or steps_taken < 0:
            raise ValueError("steps_taken must be a whole number >= 0, got %r" % (steps_taken,))
        self.model, self.optimizer, self.run, self.scaler = model, optimizer, run, scaler
        self.declared = dict(scenario or {})
        if "positions" in self.declared and (not isinstance(self.declared["positions"], int) or
                                             self.declared["positions"] < 1):
            raise ValueError("scenario key positions must be a whole number >= 1, got %r" % (self.declared["positions"],))
        self.structure = ModelLayers(model)
        self.trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.trained:
            raise ValueError("every parameter of the model is frozen: there is no gradient to accumulate")
        for n, p in model.named_parameters():
            if p.dtype != torch.float32:
                raise ValueError("parameter '%s' is %s: gradeq models float32 weights (master weights; the compute "
                                 "dtype is declared with compute_dtype or shown by autocast)" % (n, p.dtype))
        self.read = {"layers": self.structure.layers, "frozen": self.structure.frozen}
        self.read.update(optimizer_settings(optimizer, self.trained, model))
        if self.structure.norm_eps is not None:
            self.read["norm_eps"] = self.structure.norm_eps
        if self.structure.batchnorm_momentum is not None:
            self.read["batchnorm_momentum"] = self.structure.batchnorm_momentum
        self.read.update(self._scaler_settings())
        self.cuda = any(p.is_cuda for p in model.parameters())
        if self.cuda:
            self.read["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        self._refuse_contradictions(self.read)
        # A run that does not start fresh: the optimizer's own step count.
        counted = {int(st["step"]) for st in optimizer.state.values() if "step" in st}
        if len(counted) > 1:
            raise ValueError("the optimizer's parameters have taken different numbers of steps %s" % sorted(counted))
        if counted and steps_taken == 0:
            steps_taken = counted.pop()
        elif counted and counted != {steps_taken}:
            raise ValueError("steps_taken=%d, but the optimizer has taken %d steps" % (steps_taken, counted.pop()))
        if run == "K_full":
            self.writer = writer
            for key in sorted(set(self.read) | set(writer.read)):
                if not _same(self.read.get(key), writer.read.get(key)):
                    raise ValueError("the full-batch run has %s = %r where the accumulated run has %r"
                                     % (key, self.read.get(key), writer.read.get(key)))
        else:
            self.writer = WindowSetWriter(directory, {})
            self.writer.read = self.read
        self.window = 0
        self.steps = steps_taken
        self.positions = None
        self.fed_sizes = []  # per window, the micro-batch sizes fed (samples)
        self.clip_norms = set()
        self.closed = False
        self._reset_window()
        if run == "K_full":  # the same start as K_acc's
            for name, p in model.named_parameters():
                start = self.writer.initial_values.get(self.structure.names[name])
                if start is None or not np.array_equal(start, p.detach().cpu().numpy()):
                    raise ValueError("parameter '%s' does not start where the accumulated run's did" % name)
        else:
            parameters = dict(model.named_parameters())
            for name, torch_name in self.structure.torch_of.items():  # in gradeq's order
                self.writer.set_initial(name, parameters[torch_name].detach().cpu().numpy(), torch=torch_name)
            state = self._state_tensors(zeros_for_missing=False)
            if self._scaler_enabled():
                state["state/good_steps"] = np.array([[self.scaler._get_growth_tracker()]], dtype=np.float32)
            if state or steps_taken:
                for entry, value in state.items():
                    self.writer.set_initial_state(entry, value)
                self.writer.set_initial_state("state/step", np.array([[steps_taken]], dtype=np.float32))

    # ---- what the loop calls

    def begin_window(self, inputs=None, targets=None):
        """The window's batch, every sample of the optimizer step: inputs
        [samples, features] (with `positions` rows per sample) or [samples,
        positions, features]; targets the classes (integers, -100 =
        padding: cross-entropy) or the regression targets (floats: mse).
        Without them the window is the micro-batches fed, as a trainer drew
        them from its sampler (gradeq_trainers)."""
        if self._window_x is not None:
            raise ValueError("begin_window() twice: window %d has not been stepped (after_step())" % self.window)
        if (inputs is None) != (targets is None):
            raise ValueError("begin_window(): give both the inputs and the targets of the window, or neither")
        if inputs is None:
            self._window_x = self._window_y = ()  # filled by the micro-batches
        else:
            self._window_x, self._window_y = self._rows(inputs, targets, "the window's batch")
        self._fed = []

    def micro_batch(self, inputs, targets, indices=None):
        """A micro-batch as it is fed: the same shapes as begin_window's.
        indices: which of the window's samples these are, where the loop
        knows; otherwise they are found by content."""
        torch = _torch()
        if self._window_x is None:
            raise ValueError("micro_batch() before begin_window(): give the recorder the window's batch first")
        self.structure.check_modes()
        b = len(self._fed)
        x, y = self._rows(inputs, targets, "micro-batch %d" % b)
        declared = not isinstance(self._window_x, tuple)
        if not declared:  # the window is what is fed
            self._window_x += (x,)
            self._window_y += (y,)
        if indices is not None:
            if not declared:
                raise ValueError("micro_batch(indices=...) in a window the micro-batches make up: there is nothing "
                                 "to point into")
            try:
                indices = [int(i) for i in (indices.tolist() if hasattr(indices, "tolist") else indices)]
            except (TypeError, ValueError):
                raise ValueError("micro-batch %d: indices=%r is not a list of sample indices" % (b, indices)) from None
            samples = self._window_x.shape[0] // self.positions
            keys = self._sample_keys(self._window_x, self._window_y)
            if len(indices) != x.shape[0] // self.positions:
                raise ValueError("micro-batch %d: %d indices for %d samples" % (b, len(indices),
                                                                               x.shape[0] // self.positions))
            for i, (index, key) in enumerate(zip(indices, self._sample_keys(x, y))):
                if not 0 <= index < samples:
                    raise ValueError("micro-batch %d: index %d is not a sample of the window (0 to %d)"
                                     % (b, index, samples - 1))
                if keys[index] != key:
                    raise ValueError("micro-batch %d: its sample %d is not the window's sample %d that indices= "
                                     "names" % (b, i, index))
        self._fed.append((x, y, indices))
        if torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled():
            dtype = torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else torch.get_autocast_cpu_dtype()
            self._autocast.add({torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, str(dtype)))
        else:
            self._autocast.add("float32")

    def clip_grad_norm_(self, parameters, max_norm, norm_type=2.0, **kwargs):
        """torch.nn.utils.clip_grad_norm_, recording the gradient before the
        clip, the norm it returns and the coefficient it applies."""
        torch = _torch()
        parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if float(norm_type) != 2.0:
            raise ValueError("clip_grad_norm_(norm_type=%s): gradeq models the 2-norm" % norm_type)
        if {id(p) for p in parameters if p.requires_grad} != {id(p) for _, p in self.trained}:
            raise ValueError("clip_grad_norm_ over other parameters than the model's trained ones: gradeq clips "
                             "by the global norm of every trained parameter")
        if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm > 0:
            raise ValueError("clip_grad_norm_(max_norm=%r): a number > 0" % (max_norm,))
        unclipped = self._gradients()
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type, **kwargs)
        self._record_clip(unclipped, max_norm, norm)
        return norm

    def record_clip(self, unclipped, max_norm):
        """For a loop that clips by other means (a trainer): the gradient
        before the clip, {gradeq name: array}; the norm and coefficient are
        computed from it as clip_grad_norm_ computes them."""
        torch = _torch()
        grads = [torch.as_tensor(g, dtype=torch.float32) for g in unclipped.values() if g is not None]
        if not grads:
            raise ValueError("the clip of window %d saw no gradient: no backward reached the model's layers"
                             % self.window)
        if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm > 0:
            raise ValueError("the clip's max_norm=%r: a number > 0" % (max_norm,))
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2.0) for g in grads]), 2.0)
        self._record_clip(unclipped, max_norm, norm)

    def _record_clip(self, unclipped, max_norm, norm):
        torch = _torch()
        norm32 = torch.as_tensor(norm, dtype=torch.float32).detach().cpu()
        coefficient = torch.clamp(float(max_norm) / (norm32 + CLIP_EPSILON), max=1.0)  # clip_grad_norm_'s, in float32
        self._unclipped = unclipped
        self._clip = (float(norm32), float(coefficient))
        self.clip_norms.add(float(max_norm))

    def gradients(self):
        """The trained parameters' .grad now, by gradeq name (None: no gradient)."""
        return self._gradients()

    def learning_rate(self):
        """The rate the optimizer steps with now (param_groups' lr)."""
        rates = {float(g["lr"]) for g in self.optimizer.param_groups}
        if len(rates) > 1:
            raise ValueError("the param_groups step with different learning rates %s" % sorted(rates))
        return rates.pop()

    def before_step(self, learning_rate=None):
        """After the last micro-batch (and the clip), before optimizer.step().
        learning_rate: the step's, where it was read earlier (a trainer whose
        scheduler has moved on by now)."""
        if self._window_x is None:
            raise ValueError("before_step() before begin_window()")
        if not self._fed:
            raise ValueError("before_step(): no micro-batch was fed in window %d" % self.window)
        if self._scaler_enabled():
            # The gradient the step uses is unscaled: GradScaler.step unscales
            # it where the loop has not (no clip, say). Unscaling it here is
            # what step would do, and records what the step uses.
            states = getattr(self.scaler, "_per_optimizer_states", None)
            stage = states[id(self.optimizer)].get("stage") if states is not None else None
            if stage is None:
                raise ValueError("cannot tell whether the GradScaler has unscaled this optimizer's gradients: call "
                                 "scaler.unscale_(optimizer) before rec.before_step()")
            if getattr(stage, "name", str(stage)) == "READY":
                self.scaler.unscale_(self.optimizer)
        self._grads = self._gradients()
        self._lr = self.learning_rate() if learning_rate is None else float(learning_rate)
        self._scale_before = self._scale()

    def after_step(self):
        if self._grads is None:
            raise ValueError("after_step() before before_step(): call before_step() before optimizer.step()")
        w = self.window
        skipped = self._scaler_enabled() and self._scale() < self._scale_before
        tensors = {}
        missing = [g for g in self._gradeq_trained() if self._grads.get(g) is None]
        if not skipped:
            self.steps += 1
            clipping = self._clip is not None
            for name, g in (self._unclipped if clipping else self._grads).items():
                if g is not None:
                    tensors["grad/" + name] = g
            if clipping:
                for name, g in self._grads.items():
                    if g is not None:
                        tensors["clipped_grad/" + name] = g
                tensors["clip/norm"] = np.array([[self._clip[0]]], dtype=np.float32)
                tensors["clip/coefficient"] = np.array([[self._clip[1]]], dtype=np.float32)
            tensors["step/lr"] = np.array([[self._lr]], dtype=np.float64)
        for n, p in self.model.named_parameters():
            tensors["param/" + self.structure.names[n]] = p.detach().cpu().numpy()
        tensors.update(self._state_tensors(zeros_for_missing=True))
        tensors["state/step"] = np.array([[self.steps]], dtype=np.float32)
        if self._scaler_enabled():
            tensors["state/loss_scale"] = np.array([[self._scale()]], dtype=np.float32)
            tensors["state/good_steps"] = np.array([[self.scaler._get_growth_tracker()]], dtype=np.float32)
            tensors["state/skipped"] = np.array([[1.0 if skipped else 0.0]], dtype=np.float32)
        fed = self._write_window(w)
        self.writer.add_result(self.run, w, tensors, fed, skipped=skipped, missing_gradients=missing)
        self.window += 1
        self._reset_window()

    def close(self):
        """Writes manifest.json (the K_acc recorder's; a K_full recorder,
        closed first, leaves what it recorded for the K_acc one to check)."""
        if self.closed:
            raise ValueError("close() twice: the window set is written")
        if self._window_x is not None:
            raise ValueError("close() inside window %d: after_step() was not called" % self.window)
        if self._autocast and len(self._autocast) > 1:
            raise ValueError("micro-batches were fed under different autocast settings: %s" % sorted(self._autocast))
        if self.run == "K_full":
            self.closed = True
            self.writer.full = (self.window, sorted(self.clip_norms), sorted(self._autocast))
            return
        if not self.fed_sizes:
            raise ValueError("close() before any window was recorded (begin_window ... after_step)")
        full = getattr(self.writer, "full", None)
        if full is not None and full != (self.window, sorted(self.clip_norms), sorted(self._autocast)):
            raise ValueError("the full-batch run recorded %d windows, clip %s, autocast %s; the accumulated run %d, %s, "
                             "%s" % (full[0], full[1], full[2], self.window, sorted(self.clip_norms),
                                     sorted(self._autocast)))
        self.closed = True
        read = dict(self.read)
        read["input_features"] = self.input_features
        read["positions"] = self.positions
        read["loss"] = self.loss
        if len(self.clip_norms) > 1:
            raise ValueError("clip_grad_norm_ was called with different max_norm %s" % sorted(self.clip_norms))
        if self.clip_norms:
            read["clip_max_norm"] = next(iter(self.clip_norms))
        autocast = next(iter(self._autocast)) if self._autocast else "float32"
        if autocast != "float32":
            read["compute_dtype"] = autocast
            if self.cuda:  # cuBLAS may reduce in the compute dtype where torch allows it
                torch = _torch()
                flag = "allow_bf16_reduced_precision_reduction" if autocast == "bfloat16" else \
                    "allow_fp16_reduced_precision_reduction"
                read["reduced_precision_reduction"] = bool(getattr(torch.backends.cuda.matmul, flag, False))
        # What the run had that gradeq would otherwise take as a default: said
        # outright, so that the manifest carries every setting.
        read["accumulate_dtype"] = "float32"  # .grad has the float32 weights' dtype
        read["compensated"] = False
        if not self._scaler_enabled():
            read["loss_scale"] = 1.0
            read["dynamic_loss_scale"] = False
        if "batchnorm" in self.structure.kinds:
            read["batchnorm_mode"] = "per_micro_batch"  # statistics over each micro-batch, as torch computes them
        self._refuse_contradictions(read)
        scenario = dict(read)
        scenario.update(self.declared)
        scenario.setdefault("name", "torch_loop")
        scenario.setdefault("normalization", "global_count")
        scenario.setdefault("compute_dtype", "float32")
        scenario.setdefault("tf32", False)
        scenario.setdefault("reduced_precision_reduction", False)
        scenario.setdefault("split", self.fed_sizes)  # the split as fed, where none was declared
        if "clip_max_norm" in self.declared and not self.clip_norms and "clip_max_norm" not in read:
            raise ValueError("the scenario declares clip_max_norm = %s, but the loop never called "
                             "rec.clip_grad_norm_" % self.declared["clip_max_norm"])
        split = scenario["split"]
        for w, entry in enumerate(self.writer.windows):
            if w < len(split):
                entry["split"] = [int(s) for s in split[w]]
        self.writer.scenario = scenario
        self.writer.close()

    # ---- reading what the loop holds

    def _reset_window(self):
        self._window_x = self._window_y = None
        self._fed, self._grads, self._unclipped, self._clip, self._lr = [], None, None, None, None
        if not hasattr(self, "_autocast"):
            self._autocast = set()

    def _refuse_contradictions(self, read):
        for key, value in read.items():
            if key in self.declared and not _same(self.declared[key], value):
                raise ValueError("scenario key %s = %r contradicts what the run has: %r (read from the %s)"
                                 % (key, self.declared[key], value, self._source(key)))

    @staticmethod
    def _source(key):
        if key in ("layers", "norm_eps", "batchnorm_momentum", "frozen"):
            return "model"
        if key in ("loss_scale", "dynamic_loss_scale", "growth_factor", "backoff_factor", "growth_interval"):
            return "GradScaler"
        if key in ("input_features", "positions", "loss"):
            return "window's batch"
        if key == "clip_max_norm":
            return "clip_grad_norm_ calls"
        if key == "compute_dtype":
            return "autocast around the micro-batches"
        if key == "tf32":
            return "torch.backends.cuda.matmul.allow_tf32"
        return "optimizer"

    def _rows(self, inputs, targets, what):
        """inputs and targets as gradeq's rows: x [rows, features] float32,
        y [rows] int64 classes or [rows, outputs] float32."""
        torch = _torch()
        if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
            raise ValueError("%s: inputs and targets must be torch tensors" % what)
        x = inputs.detach().cpu()
        sequences = x.dim() == 3
        if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            raise ValueError("%s: inputs of dtype %s (floating point expected)" % (what, x.dtype))
        if x.numel() == 0:
            raise ValueError("%s: inputs of shape %s hold no sample" % (what, tuple(inputs.shape)))
        if x.dim() == 3:
            positions = x.shape[1]
            if self.positions is not None and positions != self.positions:
                raise ValueError("%s: %d positions per sample, earlier %d" % (what, positions, self.positions))
            x = x.reshape(-1, x.shape[2])
        elif x.dim() == 2:
            positions = int(self.declared.get("positions", 1)) if self.positions is None else self.positions
        else:
            raise ValueError("%s: inputs of shape %s ([samples, features] or [samples, positions, features] "
                             "expected)" % (what, tuple(inputs.shape)))
        self.positions = positions
        self.structure.check_inputs(positions, sequences, int(x.shape[1]))
        if not torch.isfinite(x).all():
            raise ValueError("%s: inputs hold NaN or Inf" % what)
        xf = x.to(torch.float32)
        if not torch.equal(xf.to(x.dtype), x):
            raise ValueError("%s: inputs are not float32 values (gradeq's data is float32)" % what)
        if xf.shape[0] % positions != 0:
            raise ValueError("%s: %d rows are not whole samples of %d positions" % (what, xf.shape[0], positions))
        if hasattr(self, "input_features") and xf.shape[1] != self.input_features:
            raise ValueError("%s: %d input features, earlier %d" % (what, xf.shape[1], self.input_features))
        self.input_features = int(xf.shape[1])
        y = targets.detach().cpu()
        outputs = self.structure.output_width(int(xf.shape[1]))
        if y.dtype.is_floating_point:
            loss = "mse"
            fits = y.numel() == xf.shape[0] * outputs
            y = y.reshape(xf.shape[0], -1) if fits else None
            if y is not None:
                if not torch.isfinite(y).all():
                    raise ValueError("%s: targets hold NaN or Inf" % what)
                if not torch.equal(y.to(torch.float32).to(y.dtype), y):
                    raise ValueError("%s: targets are not float32 values (gradeq's data is float32)" % what)
                y = y.to(torch.float32)
        elif y.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
            loss = "cross_entropy"
            y = y.reshape(-1).to(torch.int64) if y.numel() == xf.shape[0] else None
            if y is not None:
                bad = (y != IGNORE_CLASS) & ((y < 0) | (y >= outputs))
                if bad.any():
                    raise ValueError("%s: class %d is outside [0, %d) and is not the padding class -100"
                                     % (what, int(y[bad][0]), outputs))
        else:
            raise ValueError("%s: targets of dtype %s (integer classes or floating-point targets expected)"
                             % (what, y.dtype))
        if y is None:
            raise ValueError("%s: targets of shape %s do not match %d rows of %d outputs" % (
                what, tuple(targets.shape), xf.shape[0], outputs))
        if getattr(self, "loss", loss) != loss:
            raise ValueError("%s: %s targets, earlier %s" % (what, loss, self.loss))
        self.loss = loss
        return xf.numpy(), y.numpy()

    def _sample_keys(self, x, y):
        p = self.positions
        return [x[s * p:(s + 1) * p].tobytes() + y[s * p:(s + 1) * p].tobytes() for s in range(x.shape[0] // p)]

    def _indices_in(self, window_x, window_y):
        """What each fed micro-batch holds, as indices of the window's
        samples: as the loop said, or found by content (a sample whose
        every copy in the window was fed already counts as the first copy
        again: fed twice; one not in the window is -1)."""
        where = {}
        for i, k in enumerate(self._sample_keys(window_x, window_y)):
            where.setdefault(k, []).append(i)
        # Indices the loop gave are taken first; the rest are matched to the
        # samples left.
        taken = {i for _, _, indices in self._fed if indices is not None for i in indices}
        out = []
        for x, y, indices in self._fed:
            if indices is None:
                indices = []
                for k in self._sample_keys(x, y):
                    candidates = where.get(k, [])
                    free = [i for i in candidates if i not in taken]
                    indices.append(free[0] if free else (candidates[0] if candidates else -1))
                    taken.add(indices[-1])
            out.append(indices)
        return out

    def _write_window(self, w):
        """The window into the set, and what was fed as indices into it.
        Where the micro-batches cover the window exactly, its samples are
        written in the order fed, so that the reference's micro-batches are
        the loop's."""
        p = self.positions
        if isinstance(self._window_x, tuple):  # the micro-batches were the window
            self._window_x, self._window_y = np.concatenate(self._window_x), np.concatenate(self._window_y)
        if self.run == "K_full":
            # Its batch must be the accumulated run's window, in any order.
            if w >= len(self.writer.window_data):
                raise ValueError("K_full window %d: the accumulated run recorded only %d windows"
                                 % (w, len(self.writer.window_data)))
            ax, ay = self.writer.window_data[w]
            if sorted(self._sample_keys(self._window_x, self._window_y)) != sorted(self._sample_keys(ax, ay)):
                raise ValueError("K_full window %d: its batch is not the accumulated run's window %d" % (w, w))
            return self._indices_in(ax, ay)
        fed = self._indices_in(self._window_x, self._window_y)
        sizes = [len(mb) for mb in fed]
        order = [i for mb in fed for i in mb]
        x, y = self._window_x, self._window_y
        if sorted(order) == list(range(x.shape[0] // p)):
            rows = [r for s in order for r in range(s * p, (s + 1) * p)]
            x, y = x[rows], y[rows]
            first, fed = 0, []
            for n in sizes:
                fed.append(list(range(first, first + n)))
                first += n
        self.fed_sizes.append(sizes)
        if self.loss == "cross_entropy":
            self.writer.add_window(x, classes=y)
        else:
            self.writer.add_window(x, targets=y)
        return fed

    def _gradeq_trained(self):
        return [self.structure.names[n] for n, _ in self.trained]

    def _gradients(self):
        out = {}
        for n, p in self.trained:
            g = p.grad
            out[self.structure.names[n]] = None if g is None else g.detach().to("cpu").numpy().copy()
        return out

    def _state_tensors(self, zeros_for_missing):
        """Optimizer state and BatchNorm running statistics, by gradeq entry name."""
        out = {}
        kind = self.read["optimizer"]
        keys = [] if kind == "sgd" and self.read["momentum"] == 0.0 else (
            ["momentum_buffer"] if kind == "sgd" else ["exp_avg", "exp_avg_sq"])
        for n, p in self.trained:
            state = self.optimizer.state.get(p, {})
            for key in keys:
                value = state.get(key)
                if value is not None:
                    out["state/%s.%s" % (self.structure.names[n], key)] = value.detach().cpu().numpy()
                elif zeros_for_missing:  # never stepped (no gradient yet): a fresh optimizer's zeros
                    out["state/%s.%s" % (self.structure.names[n], key)] = np.zeros(tuple(p.shape), np.float32)
        for n, b in self.model.named_buffers():
            module, _, buffer = n.rpartition(".")
            if buffer in ("running_mean", "running_var"):
                weight = self.structure.names.get(module + ".weight")
                if weight is None:
                    raise ValueError("buffer '%s' belongs to no layer gradeq models" % n)
                out["stats/" + weight.rsplit(".", 1)[0] + "." + buffer] = b.detach().cpu().numpy()
        return out

    def _scaler_enabled(self):
        return self.scaler is not None and self.scaler.is_enabled()

    def _scale(self):
        return float(self.scaler.get_scale()) if self._scaler_enabled() else 1.0

    def _scaler_settings(self):
        if not self._scaler_enabled():
            return {}
        s = self.scaler
        scale = float(s.get_scale())
        if scale <= 0 or math.frexp(scale)[0] != 0.5:
            raise ValueError("GradScaler scale %g is not a power of two" % scale)
        return {"loss_scale": scale, "dynamic_loss_scale": True, "growth_factor": float(s.get_growth_factor()),
                "backoff_factor": float(s.get_backoff_factor()), "growth_interval": int(s.get_growth_interval())}
