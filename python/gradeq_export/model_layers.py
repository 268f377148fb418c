"""A torch model as gradeq's layers, read through torch.fx: ModelLayers
and its tables of modules, functions and block ends."""

import operator

from .attention import check_declared, declared, op_name, projections

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

MODELLED = ("Linear, ReLU, GELU, LayerNorm, BatchNorm1d, GroupNorm, Dropout(p=0); Embedding of the token ids, "
            "x + Embedding(torch.arange(T)) as a position embedding, a bias-free Linear tied to the token embedding, "
            "a hand-written attention module declared with gradeq_export.declare_attention")


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
    if net.token_weight is not None and m.weight is net.token_weight:
        if m.bias is not None:
            raise ValueError("%s: a head tied to the token embedding has no bias in gradeq (tied_head)"
                             % _where(name, m))
        net.width = (0, net.vocabulary)
        net.tied[name + ".weight"] = net.token_name
        return "tied_head", None
    if m.bias is None:
        raise ValueError("%s: gradeq's linear layers have a bias (bias=False is not modelled, but for a head tied to "
                         "the token embedding)" % _where(name, m))
    net.width = (0, m.out_features)
    return "linear:%d" % m.out_features, ("weight", "bias")


def _embedding(net, name, m):
    where = _where(name, m)
    if m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
        raise ValueError("%s: max_norm, scale_grad_by_freq and sparse are not modelled" % where)
    net.token_weight, net.token_name, net.vocabulary = m.weight, name + ".weight", int(m.num_embeddings)
    net.padding_token = None if m.padding_idx is None else int(m.padding_idx) % int(m.num_embeddings)
    net.width = (0, int(m.embedding_dim))
    return "embedding:%d" % m.embedding_dim, ("weight",)


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
           nn.GroupNorm: _groupnorm, nn.Dropout: _dropout, nn.Identity: _identity, nn.Embedding: _embedding}
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


def _trace_with_arange(tracer, model, torch, fx):
    """tracer.trace(model), with torch.arange of a traced length (the
    position ids, torch.arange(idx.shape[1])) recorded as a call in the
    graph: torch.fx cannot pass a traced value to the builtin. The builtin
    is put back afterwards."""
    builtin = torch.arange

    def arange(*args, **kwargs):
        traced = [a for a in list(args) + list(kwargs.values()) if isinstance(a, fx.Proxy)]
        if traced:
            return traced[0].tracer.create_proxy("call_function", builtin, args, kwargs)
        return builtin(*args, **kwargs)

    torch.arange = arange
    try:
        return tracer.trace(model)
    finally:
        torch.arange = builtin


def _reads_shape(node):
    """x.shape or x.size(...): what the position ids are computed from."""
    return (node.op == "call_function" and node.target is getattr and len(node.args) > 1 and
            node.args[1] == "shape") or (node.op == "call_method" and node.target == "size")


def _ancestry(node):
    """The nodes `node` is computed from, if the model's input reaches it
    only through its shape (position ids); None otherwise."""
    seen, todo = [], [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.append(n)
        if n.op == "call_module":
            return None
        for i in n.all_input_nodes:
            if i.op == "placeholder" and not _reads_shape(n):
                return None
            if i.op != "placeholder":
                todo.append(i)
            elif i not in seen:
                seen.append(i)
    return seen


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
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.fx as fx

        if not isinstance(model, nn.Module):
            raise ValueError("the model must be a torch.nn.Module, got %s" % type(model).__name__)
        self._module_ops = _module_ops(nn)
        self._embedding_class = nn.Embedding
        self._function_ops = _function_ops(torch, F)
        self._block_ends = _block_ends(torch)
        leaves = tuple(self._module_ops)

        class Tracer(fx.Tracer):
            # A subclass of a layer gradeq models (a Linear whose forward is a
            # kernel under test) is that layer: verify judges its numbers.
            # A module declared to be the attention op is one node, checked
            # against the op as a whole (attention.py).
            def is_leaf_module(self, m, qualified_name):
                return isinstance(m, leaves) or declared(m) is not None or super().is_leaf_module(m, qualified_name)

        try:
            graph = _trace_with_arange(Tracer(), model, torch, fx)
        except Exception as e:  # data-dependent control flow and the like
            raise ValueError("the model cannot be traced by torch.fx into gradeq's layers (a hand-written attention "
                             "module is one gradeq_export.declare_attention declares): %s" % e) from None
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
        # A language model: the token embedding's weight (its torch name),
        # the vocabulary and padding_idx; a head tied to it by torch name.
        self.token_weight, self.token_name, self.vocabulary, self.padding_token = None, None, None, None
        self.tied = {}
        self._used, self._visited = set(), set()
        self._order = {node: i for i, node in enumerate(graph.nodes)}
        seen, shared = {}, []
        for mname, m in model.named_modules():
            for pname, p in m._parameters.items():  # each module's own, duplicates kept
                if p is None:
                    continue
                name = "%s.%s" % (mname, pname) if mname else pname
                if id(p) in seen:
                    shared.append((seen[id(p)], name))
                    continue
                seen[id(p)] = name
        inputs = [node for node in graph.nodes if node.op == "placeholder"]
        if len(inputs) != 1:
            raise ValueError("the model takes %s: gradeq models one input" % (
                "more than one input (%s)" % inputs[1].target if inputs else "no input"))
        output = next(node for node in graph.nodes if node.op == "output")
        self.layers, last = self._series(inputs[0], output, (), "layer%d")
        if output.args[0] is not last:
            raise ValueError("the model returns %r, not one tensor: gradeq's model has one output" % (output.args[0],))
        for first, second in shared:  # only a head tied to the token embedding shares a tensor
            if self.tied.get(second) != first:
                raise ValueError("parameters '%s' and '%s' are one tensor: gradeq models one shared weight, the token "
                                 "embedding's with a bias-free Linear head (lm_head.weight = wte.weight)"
                                 % (first, second))
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
            if value.op == "placeholder":  # its shape, read for the position ids, is not a layer's input
                users = [u for u in users if not _reads_shape(u)]
            if users == [until]:
                return elements, value
            position = self._position_embedding(users[0], value) if len(users) == 1 else None
            if position is not None:
                elements.append(self._position_element(users[0], position, at % len(elements)))
                value, excluded = users[0], ()
                continue
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
            elif len(users) == 1 and self._declared_attention(users[0]):
                elements.extend(self._attention(users[0], value, at, len(elements)))
                value = users[0]
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

    def _position_embedding(self, node, value):
        """Whether `node` adds a position embedding to `value`: value +
        Embedding(ids) with ids computed from the input's shape alone
        (torch.arange(T)); the Embedding's module, or None."""
        block = self._block_ends.get((node.op, node.target))
        if block is None or block.kind != "residual":
            return None
        operands = block.operands(node)
        if operands is None or sum(o is value for o in operands) != 1:
            return None
        other = next(o for o in operands if o is not value)
        if other.op != "call_module":
            return None
        import torch.nn as nn

        m = self._named_modules[other.target]
        if not isinstance(m, nn.Embedding) or len(other.all_input_nodes) != 1:
            return None
        ancestry = _ancestry(other.all_input_nodes[0])
        if ancestry is None or not any(n.op == "call_function" and getattr(n.target, "__name__", "") == "arange"
                                       for n in ancestry):
            return None
        return other, m, ancestry

    def _position_element(self, add, position, prefix):
        other, m, ancestry = position
        where = _where(other.target, m)
        if m.padding_idx is not None or m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
            raise ValueError("%s: a position embedding with padding_idx, max_norm, scale_grad_by_freq or sparse is not "
                             "modelled" % where)
        if self.width[0] != 0 or self.width[1] != m.embedding_dim:
            raise ValueError("%s: its width %d is not the width it is added to" % (where, m.embedding_dim))
        table = int(m.num_embeddings)

        def inputs(positions, sequences, features):
            if positions > table:
                raise ValueError("%s: its table of %d rows is shorter than the %d positions per sample"
                                 % (where, table, positions))

        self.input_checks.append(inputs)
        op = "position_embedding:%d" % table
        self._visited.update([add, other] + [n for n in ancestry if n.op != "placeholder"])
        self._parameters(other.target, m, op, ("weight",), prefix)
        self.modules.append(other.target)
        self.kinds.append(op)
        return op

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

    def _declared_attention(self, node):
        return node.op == "call_module" and declared(self._named_modules[node.target]) is not None

    def _attention(self, node, value, at, first):
        """A module declared to be attention (attention.py): its QKV
        projection, the op, its output projection, as elements first,
        first + 1 and first + 2 under `at`; the declaration checked on
        probe inputs first."""
        name, m = node.target, self._named_modules[node.target]
        decl = declared(m)
        if node.all_input_nodes != [value]:
            raise ValueError("%s reads %s, not '%s' alone: a declared attention module reads one value" % (
                _node(node), _quoted(node.all_input_nodes), value.name))
        (qkv_name, qkv), (out_name, out) = projections(name, m)
        if self.width[0] == 0 and self.width[1] != qkv.in_features:
            raise ValueError("%s: its QKV projection '%s' takes %d features, the value it reads has %d"
                             % (_where(name, m), qkv_name, qkv.in_features, self.width[1]))
        check_declared(name, m)
        if name in self._used:
            raise ValueError("module '%s' is used twice: shared (tied) layers are not modelled yet" % name)
        self._used.add(name)
        ops = ["linear:%d" % qkv.out_features, op_name(decl), "linear:%d" % out.out_features]
        for index, child in ((first, qkv_name), (first + 2, out_name)):
            for pname in ("weight", "bias"):
                torch_name, gradeq_name = "%s.%s.%s" % (name, child, pname), "%s.%s" % (at % index, pname)
                self.names[torch_name] = gradeq_name
                self.torch_of[gradeq_name] = torch_name
        self.modules += ["%s.%s" % (name, qkv_name), name, "%s.%s" % (name, out_name)]
        self.kinds += ops
        self.width = (0, out.out_features)
        self._visited.add(node)
        return ops

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
            if isinstance(m, self._embedding_class) and value.op != "placeholder":
                raise ValueError("%s reads '%s': an embedding reads the model's token ids, or is a position embedding "
                                 "added to the token embedding (x + wpe(torch.arange(T)))" % (_where(node.target, m),
                                                                                              value.name))
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
        if m is not None and expected is not None:  # None: a tied head, whose weight is the embedding's
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

