"""gradeq's attention op as a specification in torch, and the declaration
that a hand-written attention module computes it.

`attention_spec` is what the ops `attention:<heads>` and
`bidirectional_attention:<heads>` compute (README "attention"), written as
nanoGPT writes its CausalSelfAttention after c_attn: the QKV projection
split into heads, the scores scaled by 1/sqrt(d), masked where a key is not
seen (above the diagonal when causal; a padding key), a row softmax, P V,
the heads merged. tests/golden/make_goldens.py makes the goldens that the
float64 reference is tested against from this same function, so a module
that matches it matches the reference.

A hand-written attention module is torch code gradeq cannot read op by
op (views, transposes, a masked_fill and a softmax). `declare_attention`
states that it is the registry's op between its two linear layers; the
exporter believes no claim: it checks it (`check_declared`) before it
records anything, in float64 on probe inputs, and refuses a module whose
outputs or input gradients differ from the op's by more than 1e-12.
"""

import copy

# The declared module's outputs and input gradients must match the op's
# to this, relative to the largest magnitude of each: float64's rounding of
# the same math in another order is ~1e-15 at these sizes, and a module
# that computes something else (another scale, a mask missing or shifted,
# heads split another way) differs by far more than 1e-12.
DECLARED_TOLERANCE = 1e-12

# The probe: two samples at each of these lengths (one position, where a
# query sees one key; a few; and more than a tile of most kernels).
PROBE_POSITIONS = (1, 3, 8)


def attention_spec(qkv, heads, causal, ids=None, padding_token=None):
    """o [samples, positions, D] from qkv [samples, positions, 3 D]: heads
    of d = D / heads columns. With ids [samples, positions] and a
    padding_token, keys whose id is the padding token are not seen; a
    query that sees no key gets o = 0."""
    import torch
    import torch.nn.functional as F

    samples, positions, three_width = qkv.shape
    width = three_width // 3
    d = width // heads
    q, k, v = qkv.split(width, dim=2)
    q = q.view(samples, positions, heads, d).transpose(1, 2)
    k = k.view(samples, positions, heads, d).transpose(1, 2)
    v = v.view(samples, positions, heads, d).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / d ** 0.5)
    seen = torch.ones(samples, 1, positions, positions, dtype=torch.bool)
    if ids is not None and padding_token is not None:
        seen = seen & (ids != padding_token).view(samples, 1, 1, positions)
    if causal:
        seen = seen & torch.tril(torch.ones(positions, positions, dtype=torch.bool)).view(1, 1, positions, positions)
    att = att.masked_fill(~seen, float("-inf"))
    att = F.softmax(att, dim=-1).nan_to_num(0.0)  # a row with no key seen: all -inf, o = 0
    y = att @ v
    return y.transpose(1, 2).contiguous().view(samples, positions, width)


def declare_attention(module, heads, causal=True):
    """Declares that `module`, a hand-written attention block x -> y of
    [samples, positions, C], is gradeq's linear:3D, attention:<heads> (or
    bidirectional_attention:<heads> with causal=False), linear:C: its two
    nn.Linear children are the QKV projection (C -> 3 D) and the output
    projection (D -> C), and between them it computes attention_spec. The
    exporter checks the claim numerically before it records (refusing it
    with a ValueError if it does not hold). Returns the module."""
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError("declare_attention: heads must be a whole number >= 1, got %r" % (heads,))
    if not isinstance(causal, bool):
        raise ValueError("declare_attention: causal must be True or False, got %r" % (causal,))
    module._gradeq_attention = {"heads": heads, "causal": causal}
    return module


def declared(module):
    """The declaration on `module` ({"heads", "causal"}), or None."""
    return getattr(module, "_gradeq_attention", None)


def projections(name, module):
    """The declared module's QKV and output projections: (name, Linear)
    each. Raises ValueError where the module is not two Linear layers
    around the core."""
    import torch.nn as nn

    where = "module '%s' (%s), declared attention" % (name, type(module).__name__)
    linears = [(n, m) for n, m in module.named_children() if isinstance(m, nn.Linear)]
    others = [n for n, m in module.named_modules() if m is not module and not isinstance(m, nn.Linear)
              and any(True for _ in m.parameters(recurse=False))]
    own = [n for n, _ in module.named_parameters(recurse=False)]
    if len(linears) != 2 or others or own:
        raise ValueError("%s: it must hold two nn.Linear children (the QKV projection and the output projection) and "
                         "no other parameter; it holds %s" % (
                             where, ", ".join(n for n, _ in module.named_parameters()) or "none"))
    heads = declared(module)["heads"]
    for qkv, out in (linears, linears[::-1]):
        if qkv[1].out_features == 3 * out[1].in_features:
            width = out[1].in_features
            if width % heads != 0:
                raise ValueError("%s: %d heads do not divide its width %d" % (where, heads, width))
            if qkv[1].bias is None or out[1].bias is None:
                raise ValueError("%s: gradeq's linear layers have a bias; '%s' or '%s' has none"
                                 % (where, qkv[0], out[0]))
            return qkv, out
    raise ValueError("%s: neither Linear maps C to 3 D for the other's D inputs (%s: %d -> %d, %s: %d -> %d)" % (
        where, linears[0][0], linears[0][1].in_features, linears[0][1].out_features, linears[1][0],
        linears[1][1].in_features, linears[1][1].out_features))


def check_declared(name, module, seed=0):
    """Whether `module` computes what it is declared to: in float64, on
    random probe inputs of PROBE_POSITIONS lengths, its outputs and the
    gradients of its input against out_proj(attention_spec(qkv_proj(x))),
    within DECLARED_TOLERANCE of the largest magnitude. Raises ValueError
    naming the module, the probe and the difference. The module itself is
    not changed (a float64 copy is probed)."""
    import torch

    decl = declared(module)
    (qkv_name, _), (out_name, _) = projections(name, module)
    probe = copy.deepcopy(module).double()
    qkv, out = getattr(probe, qkv_name), getattr(probe, out_name)
    g = torch.Generator().manual_seed(seed)
    for positions in PROBE_POSITIONS:
        x = torch.randn(2, positions, qkv.in_features, generator=g, dtype=torch.float64)
        dy = torch.randn(2, positions, out.out_features, generator=g, dtype=torch.float64)
        results = []
        for compute in (lambda t: probe(t), lambda t: out(attention_spec(qkv(t), decl["heads"], decl["causal"]))):
            xi = x.clone().requires_grad_()
            try:
                y = compute(xi)
            except Exception as e:
                raise ValueError("module '%s' (%s), declared %s: it fails on a probe of %d positions: %s"
                                 % (name, type(module).__name__, op_name(decl), positions, e)) from None
            if not isinstance(y, torch.Tensor) or y.shape != (2, positions, out.out_features):
                raise ValueError("module '%s' (%s), declared %s: it returns %s for an input of shape %s, not one tensor "
                                 "of shape %s" % (name, type(module).__name__, op_name(decl),
                                                  getattr(y, "shape", type(y).__name__), tuple(x.shape),
                                                  (2, positions, out.out_features)))
            (y * dy).sum().backward()
            results.append((y.detach(), xi.grad))
        for what, a, b in (("output", results[0][0], results[1][0]), ("input gradient", results[0][1], results[1][1])):
            scale = max(float(b.abs().max()), 1e-300)
            difference = float((a - b).abs().max()) if bool(torch.isfinite(a).all()) else float("inf")
            if not difference <= DECLARED_TOLERANCE * scale:
                raise ValueError("module '%s' (%s) is declared %s but does not compute it: on a float64 probe of %d "
                                 "positions its %s differs from the op's by %.3g (relative %.3g; at most %g)"
                                 % (name, type(module).__name__, op_name(decl), positions, what, difference,
                                    difference / scale, DECLARED_TOLERANCE))


def op_name(decl):
    return "%s:%d" % ("attention" if decl["causal"] else "bidirectional_attention", decl["heads"])
