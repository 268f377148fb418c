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

MODELLED = ("Linear, ReLU, GELU, LayerNorm, BatchNorm1d, GroupNorm, Dropout(p=0); on images Conv2d, BatchNorm2d, "
            "GroupNorm, LayerNorm([C, H, W]), MaxPool2d, AvgPool2d, AdaptiveAvgPool2d(1), Upsample(scale_factor=2, "
            "mode='nearest'), Flatten; Embedding of the token ids, "
            "x + Embedding(torch.arange(T)) as a position embedding, a bias-free Linear tied to the token embedding, "
            "a hand-written attention module declared with gradeq_export.declare_attention")


def _where(name, m):
    return "module '%s' (%s)" % (name, type(m).__name__)


def _node(node):
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
    return "node '%s' (%s %s)" % (node.name, node.op, target)


def _quoted(nodes):
    return " and ".join("'%s'" % n.name for n in nodes)


# Images (README "An image model"): a value gradeq holds as one row of
# C*H*W columns in NCHW order. What an op does to an image is known only
# when the inputs' [samples, C, H, W] shape is, so each op and block also
# records a step: (gradeq's image or None, the torch value's shape per
# sample or None where untracked) -> the same after it. check_inputs runs
# them over the inputs' shape; they refuse where torch's op and gradeq's
# differ on that shape. A flat input runs them from (None, None): an image
# op then refuses.

def _needs_image(where, op):
    def step(state):
        image, shape = state
        if shape is None or len(shape) != 3:
            raise ValueError("%s reads %s: gradeq's %s reads an image, a [samples, C, H, W] value (give the recorder "
                             "[samples, C, H, W] inputs)" % (where, "rows of features" if shape is None else
                                                            "a [samples, %d] value" % shape[0], op))
        return image, shape
    return step


def _elementwise(state):
    return state


def _flat_only(where, what):
    def step(state):
        if state[1] is not None and len(state[1]) == 3:
            raise ValueError("%s on a [samples, C, H, W] image works on its last dimension (the width W); gradeq's %s "
                             "reads the whole C*H*W row: flatten first (nn.Flatten)" % (where, what))
        return state
    return step


def _to_flat(where, width):
    check = _flat_only(where, "linear")

    def step(state):
        check(state)
        return None, (None if state[1] is None else (width,))
    return step


def _per_channel(where, op):
    """BatchNorm and GroupNorm: per channel over an image's H*W, per
    feature (column) over a flat value."""
    def step(state):
        image, shape = state
        if shape is not None and len(shape) == 1 and image is not None and image[1] * image[2] > 1:
            raise ValueError("%s reads a flattened image [samples, %d]: torch takes its %d columns for channels, "
                             "gradeq's %s the image's %d channels of %dx%d pixels each: not the same layer"
                             % (where, shape[0], shape[0], op, image[0], image[1], image[2]))
        return state
    return step


def _image_op(where, op, out):
    """An op on images alone: out((C, H, W)) -> (C', H', W')."""
    needs = _needs_image(where, op)

    def step(state):
        image, shape = needs(state)
        if image != shape:
            raise ValueError("%s reads a [samples, %s] value that gradeq holds as a %s image" % (
                where, ", ".join(map(str, shape)), "x".join(map(str, image)) if image else "flat"))
        after = out(shape)
        if min(after) < 1:
            raise ValueError("%s makes nothing of a %s image (%s)" % (where, "x".join(map(str, shape)),
                                                                      "x".join(map(str, after))))
        return after, after
    return step


def _run_steps(steps, state):
    for step in steps:
        state = step(state)
    return state


# Module converters: (ModelLayers, module name, module) -> (gradeq's op, or
# None for the identity; the parameters gradeq's op has).

def _linear(net, name, m):
    if net.token_weight is not None and m.weight is net.token_weight:
        if m.bias is not None:
            raise ValueError("%s: a head tied to the token embedding has no bias in gradeq (tied_head)"
                             % _where(name, m))
        net.width = (0, net.vocabulary)
        net.tied[name + ".weight"] = net.token_name
        net.step = _to_flat(_where(name, m), net.vocabulary)
        return "tied_head", None
    if m.bias is None:
        raise ValueError("%s: gradeq's linear layers have a bias (bias=False is not modelled, but for a head tied to "
                         "the token embedding)" % _where(name, m))
    net.width = (0, m.out_features)
    net.step = _to_flat(_where(name, m), m.out_features)
    return "linear:%d" % m.out_features, ("weight", "bias")


def _embedding(net, name, m):
    where = _where(name, m)
    if m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
        raise ValueError("%s: max_norm, scale_grad_by_freq and sparse are not modelled" % where)
    net.token_weight, net.token_name, net.vocabulary = m.weight, name + ".weight", int(m.num_embeddings)
    net.padding_token = None if m.padding_idx is None else int(m.padding_idx) % int(m.num_embeddings)
    net.width = (0, int(m.embedding_dim))
    net.step = _flat_only(_where(name, m), "embedding")
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
    where = _where(name, m)
    if len(m.normalized_shape) not in (1, 3) or not m.elementwise_affine:
        raise ValueError("%s: gradeq models LayerNorm over the last dimension, or over a whole [C, H, W] image, with "
                         "weight and bias" % where)
    net.eps.add(float(m.eps))
    normalized = tuple(int(d) for d in m.normalized_shape)
    net.reads_images = net.reads_images or len(normalized) == 3

    def step(state):
        image, shape = state
        if len(normalized) == 3 and shape != normalized:
            raise ValueError("%s normalizes over %s: gradeq's layernorm over an image normalizes all of it, "
                             "LayerNorm([C, H, W]) of the [samples, C, H, W] value it reads (%s here)"
                             % (where, list(normalized), "rows of features" if shape is None else list(shape)))
        if len(normalized) == 1 and shape is not None and len(shape) == 3:
            raise ValueError("%s on a [samples, C, H, W] image normalizes its last dimension (the width W); gradeq's "
                             "layernorm normalizes the whole image: LayerNorm(%s)" % (where, list(shape)))
        return state

    net.step = step
    return "layernorm", ("weight", "bias")


def _rmsnorm(net, name, m):
    if len(m.normalized_shape) != 1 or not m.elementwise_affine or m.eps is None:
        raise ValueError("%s: gradeq models RMSNorm over the last dimension, with a weight and a given eps"
                         % _where(name, m))
    net.eps.add(float(m.eps))
    net.step = _flat_only(_where(name, m), "rmsnorm")
    return "rmsnorm", ("weight",)


def _batchnorm(net, name, m):
    where = _where(name, m)
    if not m.affine or not m.track_running_stats:
        raise ValueError("%s: gradeq models %s with weight, bias and running statistics" % (where, type(m).__name__))
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
    per_channel = _per_channel(where, "batchnorm")
    import torch.nn as nn

    if isinstance(m, nn.BatchNorm2d):  # on images alone
        needs = _needs_image(where, "batchnorm (BatchNorm2d)")
        net.step, net.reads_images = (lambda state: per_channel(needs(state))), True
    else:
        net.step = per_channel
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
    net.step = _per_channel(_where(name, m), "groupnorm")
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


def _square(value, where, what):
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(set(values)) != 1:
        raise ValueError("%s: %s=%s is not square; gradeq's image ops have square windows" % (where, what, values))
    return int(values[0])


def _conv2d(net, name, m):
    where = _where(name, m)
    k = _square(m.kernel_size, where, "kernel_size")
    stride, dilation = _square(m.stride, where, "stride"), _square(m.dilation, where, "dilation")
    if isinstance(m.padding, str):
        if m.padding == "valid":
            padding = 0
        elif dilation * (k - 1) % 2 == 0 and stride == 1:  # "same": symmetric where the halo is even
            padding = dilation * (k - 1) // 2
        else:
            raise ValueError("%s: padding='same' pads one side more than the other; gradeq's conv2d pads symmetrically"
                             % where)
    else:
        padding = _square(m.padding, where, "padding")
    if m.padding_mode != "zeros":
        raise ValueError("%s: padding_mode=%r; gradeq's conv2d pads with zeros" % (where, m.padding_mode))
    if m.bias is None:
        raise ValueError("%s: bias=False; gradeq's conv2d has a bias" % where)
    op = "conv2d:%d:%d" % (m.out_channels, k)
    for key, value, default in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1),
                                ("groups", m.groups, 1)):
        if value != default:
            op += ":%s=%d" % (key, value)
    c_in, c_out = int(m.in_channels), int(m.out_channels)

    def out(shape):
        c, h, w = shape
        if c != c_in:
            raise ValueError("%s takes %d channels, the image it reads has %d" % (where, c_in, c))
        side = lambda n: (n + 2 * padding - dilation * (k - 1) - 1) // stride + 1  # noqa: E731
        return c_out, side(h), side(w)

    net.width, net.reads_images = (None, None), True
    net.step = _image_op(where, op, out)
    net.reshape[name + ".weight"] = (c_out, -1)  # [C_out, C_in/G, k, k] is gradeq's [C_out, C_in/G * k * k]
    return op, ("weight", "bias")


def _pool(net, name, m, kind):
    where = _where(name, m)
    k = _square(m.kernel_size, where, "kernel_size")
    stride = k if m.stride is None else _square(m.stride, where, "stride")
    if _square(m.padding, where, "padding") != 0:
        raise ValueError("%s: padding=%r; gradeq's %s has no padding" % (where, m.padding, kind))
    if m.ceil_mode:
        raise ValueError("%s: ceil_mode=True; gradeq's %s keeps whole windows (floor)" % (where, kind))
    if kind == "maxpool":
        if _square(m.dilation, where, "dilation") != 1 or m.return_indices:
            raise ValueError("%s: dilation and return_indices are not modelled" % where)
    elif m.divisor_override is not None:
        raise ValueError("%s: divisor_override=%r; gradeq's avgpool divides by the window's k*k" % (
            where, m.divisor_override))
    # Without padding every window is whole: count_include_pad changes nothing.
    op = "%s:%d" % (kind, k) + ("" if stride == k else ":stride=%d" % stride)

    def out(shape):
        c, h, w = shape
        if k > h or k > w:
            raise ValueError("%s: its %dx%d window is larger than the %dx%dx%d image" % (where, k, k, c, h, w))
        return c, (h - k) // stride + 1, (w - k) // stride + 1

    net.width, net.reads_images = (None, None), True
    net.step = _image_op(where, op, out)
    return op, ()


def _maxpool(net, name, m):
    return _pool(net, name, m, "maxpool")


def _avgpool(net, name, m):
    return _pool(net, name, m, "avgpool")


def _adaptive_avgpool(net, name, m):
    where = _where(name, m)
    size = tuple(m.output_size) if isinstance(m.output_size, (tuple, list)) else (m.output_size, m.output_size)
    if size != (1, 1):
        raise ValueError("%s: output_size=%r; gradeq's global_avgpool is AdaptiveAvgPool2d(1), one mean per channel"
                         % (where, m.output_size))
    net.width, net.reads_images = (None, None), True
    net.step = _image_op(where, "global_avgpool", lambda shape: (shape[0], 1, 1))
    return "global_avgpool", ()


def _upsample(net, name, m):
    where = _where(name, m)
    scale = m.scale_factor
    scales = tuple(scale) if isinstance(scale, (tuple, list)) else (scale, scale)
    if m.size is not None or any(s is None or float(s) != 2.0 for s in scales) or m.mode != "nearest":
        raise ValueError("%s: size=%r, scale_factor=%r, mode=%r; gradeq's upsample is Upsample(scale_factor=2, "
                         "mode='nearest')" % (where, m.size, m.scale_factor, m.mode))
    net.width, net.reads_images = (None, None), True
    net.step = _image_op(where, "upsample", lambda shape: (shape[0], 2 * shape[1], 2 * shape[2]))
    return "upsample", ()


def _flatten(net, name, m):
    return _flattened(net, _where(name, m), m.start_dim, m.end_dim)


def _flattened(net, where, start_dim, end_dim):
    """nn.Flatten(), torch.flatten(x, 1), x.flatten(1): gradeq's identity
    on an image (its row is the flattened image, NCHW)."""
    if start_dim != 1 or end_dim != -1:
        raise ValueError("%s: start_dim=%r, end_dim=%r; gradeq's rows are whole samples: Flatten(1, -1) of an image "
                         "is the row it is" % (where, start_dim, end_dim))

    def step(state):
        image, shape = state
        if shape is None:
            raise ValueError("%s reads rows of features (or [samples, positions, features]): it is gradeq's identity "
                             "only on an image, [samples, C, H, W]" % where)
        if len(shape) == 3:
            return image, (shape[0] * shape[1] * shape[2],)
        return state

    net.step, net.reads_images = step, True
    return None, ()


def _module_ops(nn):
    ops = {nn.Linear: _linear, nn.ReLU: _relu, nn.GELU: _gelu, nn.LayerNorm: _layernorm, nn.BatchNorm1d: _batchnorm,
           nn.GroupNorm: _groupnorm, nn.Dropout: _dropout, nn.Identity: _identity, nn.Embedding: _embedding}
    if getattr(nn, "RMSNorm", None) is not None:
        ops[nn.RMSNorm] = _rmsnorm
    ops.update({nn.BatchNorm2d: _batchnorm, nn.Conv2d: _conv2d, nn.MaxPool2d: _maxpool, nn.AvgPool2d: _avgpool,
                nn.AdaptiveAvgPool2d: _adaptive_avgpool, nn.Upsample: _upsample, nn.Flatten: _flatten})
    return ops


# Function converters: (ModelLayers, fx node) -> gradeq's op.

def _relu_call(net, node):
    return "relu"


def _gelu_call(net, node):
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return _gelu_op(approximate, _node(node))


def _flatten_call(net, node):
    args = list(node.args[1:])
    start = node.kwargs.get("start_dim", args[0] if args else 0)
    end = node.kwargs.get("end_dim", args[1] if len(args) > 1 else -1)
    net.step = None
    _flattened(net, _node(node), start, end)
    return None


def _function_ops(torch, F):
    return {("call_function", F.relu): _relu_call, ("call_function", torch.relu): _relu_call,
            ("call_method", "relu"): _relu_call, ("call_function", F.gelu): _gelu_call,
            ("call_function", torch.flatten): _flatten_call, ("call_method", "flatten"): _flatten_call}


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
    if isinstance(dim, bool) or not isinstance(dim, int) or dim == 0 or dim < -3:
        raise ValueError("%s concatenates on dim %r: gradeq's concat joins features, the last dimension (dim=-1), "
                         "or an image's channels (dim=1 of [samples, C, H, W])" % (_node(node), dim))
    operands = _tensor_operands(tensors)
    if operands is None:
        raise ValueError("%s concatenates what is not two computed tensors: gradeq's concat is [x, f(x)]" % _node(node))
    return operands


def _residual_width(net, node, x, f):
    if None in x or None in f:  # an image's: the steps check it
        return (None, None)

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
    if dim < -1:  # an image's channels (dim=-3) or its height (-2): the steps check it
        def inputs(positions, sequences, features):
            if not net.image_input:
                raise ValueError("%s concatenates on dim %d: gradeq's concat joins features, the last dimension "
                                 "(dim=-1)" % (_node(node), dim))

        net.input_checks.append(inputs)
    elif dim != -1:  # the last dimension only for inputs of dim + 1 dimensions
        def inputs(positions, sequences, features):
            dims = 3 if sequences else 2
            if dim != dims - 1:
                raise ValueError("%s concatenates on dim %d of %d-D inputs: gradeq's concat joins features, the last "
                                 "dimension (dim=-1)" % (_node(node), dim, dims))

        net.input_checks.append(inputs)
    if None in x or None in f:
        return (None, None)
    return (x[0] + f[0], x[1] + f[1])


def _block_step(node, kind, branch):
    """A residual's or a concat's step: the branch's steps from the block's
    input, then the two combined."""
    where = _node(node)
    dim = _cat_dim(node) if kind == "concat" else None

    def step(state):
        image, shape = state
        after = _run_steps(branch, state)
        if shape is None:
            return after
        b_image, b_shape = after
        if kind == "residual":
            if b_shape != shape or b_image != image:
                raise ValueError("%s adds a [samples, %s] branch to its [samples, %s] input: a sum that broadcasts "
                                 "is not a residual" % (where, ", ".join(map(str, b_shape or ())),
                                                        ", ".join(map(str, shape))))
            return state
        if len(shape) == 3:
            if dim not in (1, -3):
                raise ValueError("%s concatenates [samples, C, H, W] images on dim %d: gradeq's concat of two images "
                                 "joins their channels (dim=1)" % (where, dim))
            if b_shape is None or len(b_shape) != 3 or b_shape[1:] != shape[1:] or b_image != b_shape:
                raise ValueError("%s joins a %s image and a branch of shape %s: gradeq's concat joins the channels "
                                 "of two images of one size" % (where, "x".join(map(str, shape)), b_shape))
            joined = (shape[0] + b_shape[0],) + shape[1:]
            return (joined if image == shape else None), joined
        if b_shape is None or len(b_shape) != 1:
            raise ValueError("%s joins [samples, %d] rows and a branch of shape %s" % (where, shape[0], b_shape))
        # Rows of two images side by side are their channels joined (NCHW), where both are images of one size.
        same = image is not None and b_image is not None and image[1:] == b_image[1:]
        return ((image[0] + b_image[0],) + image[1:] if same else None), (shape[0] + b_shape[0],)

    return step


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
        self.width = (1, 0)  # the width so far, as (a, b): a * input_features + b; (None, None) after an image op
        # What each op or block does to an image (see _run_steps), in order;
        # the step a converter sets for its op (None: elementwise).
        self._steps, self.step = [], None
        # gradeq's matrix shape of a torch parameter that is not one already
        # ([C_out, C_in/G, k, k] -> (C_out, -1), LayerNorm([C, H, W])'s (1, -1)).
        self.reshape = {}
        self.image_input, self.image_width = False, None
        self.reads_images = False  # whether a layer reads [samples, C, H, W] values (Conv2d, a pool, Flatten, ...)
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
        if self.image_width is not None:  # an image's: known from its shape (check_inputs)
            return self.image_width
        if None in self.width:
            raise ValueError("the model's output width is known from its input image's shape alone")
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
        self._steps.append(_flat_only(where, "position_embedding"))
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
        outer, self._steps = self._steps, []
        branch, _ = self._series(value, end, excluded, prefix + ".%d")
        branch_steps, self._steps = self._steps, outer
        if block.ordered and operands[0] is not value:
            raise ValueError("%s puts its branch before its input '%s': gradeq's %s is [x, f(x)], the input first"
                             % (_node(end), value.name, block.kind))
        if not branch:
            raise ValueError("%s: its branch from '%s' holds no layer (identities only): a block with an empty branch "
                             "is not modelled" % (_node(end), value.name))
        self._visited.add(end)
        self.width = block.width(self, end, width, self.width)
        self._steps.append(_block_step(end, block.kind, branch_steps))
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
        self._steps.append(_flat_only(_where(name, m), "attention"))
        self._visited.add(node)
        return ops

    def _op(self, node, value, prefix):
        """The op `node` computes from `value` alone (None: the identity);
        a module's parameters take gradeq's names under `prefix`."""
        if node.all_input_nodes != [value]:
            raise ValueError("%s reads %s, not '%s' alone: a layer gradeq models reads one value" % (
                _node(node), _quoted(node.all_input_nodes), value.name))
        self.step = None
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
        self._steps.append(self.step or _elementwise)
        self.step = None
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
        for pname, p in m.named_parameters(recurse=False):
            self.names["%s.%s" % (name, pname)] = "%s.%s" % (prefix, pname)
            self.torch_of["%s.%s" % (prefix, pname)] = "%s.%s" % (name, pname)
            torch_name = "%s.%s" % (name, pname)
            if torch_name in self.reshape:
                self.reshape["%s.%s" % (prefix, pname)] = self.reshape.pop(torch_name)
            elif p.dim() > 2:  # LayerNorm([C, H, W]): one affine per column of the row
                self.reshape["%s.%s" % (prefix, pname)] = (1, -1)

    def check_modes(self):
        """The modules' training modes as gradeq models them, now."""
        for name, m in self.must_train:
            if not m.training:
                raise ValueError("module '%s' (%s) is in eval mode: it normalizes by its running statistics, "
                                 "gradeq's batchnorm by the batch's (training mode)" % (name, type(m).__name__))
        for name, m in self.must_not_train:
            if m.training:
                raise ValueError("module '%s' (Dropout, p=%g) is in training mode: its random mask no reference can "
                                 "repeat; feed with p=0 or the module in eval mode" % (name, m.p))

    def check_inputs(self, positions, sequences, features, image=None):
        """What the inputs' shape decides: [samples, positions, features]
        (sequences) or [rows, features] with `positions` rows a sample, or
        images (C, H, W), a sample one row of C*H*W features."""
        self.image_input = image is not None
        for check in self.input_checks:
            check(positions, sequences, features)
        start = (None, None) if image is None else (tuple(image), tuple(image))
        image_after, shape = _run_steps(self._steps, start)
        if image is not None:
            self.image_width = shape[0] * shape[1] * shape[2] if len(shape) == 3 else shape[0]

    def matrix(self, name, value):
        """A parameter's value (or gradient, or optimizer state) as gradeq's
        matrix, by its gradeq name."""
        shape = self.reshape.get(name)
        return value if shape is None else value.reshape(shape)


def layers_of(model):
    """gradeq's layer list for a model (raises ValueError on what gradeq does not model)."""
    return ModelLayers(model).layers

