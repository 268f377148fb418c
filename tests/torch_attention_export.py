"""A GPT whose attention is written by hand, as nanoGPT writes it, declared
to be gradeq's attention op (gradeq_export.declare_attention), recorded and
verified (ctest label torch).

    torch_attention_export.py GRADEQ

- The declared module reads as linear:3D, attention:H, linear:C, its two
  projections under gradeq's names.
- Declarations that do not hold are refused before anything is recorded,
  each with a ValueError naming the module and the probe: 1/sqrt(d) applied
  twice, the causal mask missing (a causal module declared bidirectional
  and the other way round), the heads miscounted, a third Linear. A
  hand-written core that is not declared is refused as before.
- `gradeq verify` passes the correct GPT loop over right-padded sequences
  (a causal query never reaches a right-padded key: no key mask is needed).
  A bidirectional module with no key-padding mask fails verify where the
  windows hold padding (its real tokens attend to the padding, which the
  op masks: BUGS.md B40) and passes where they hold none.
Exits 1 if a check fails, 77 (skipped) without torch.
"""

import math
import os
import subprocess
import sys
import tempfile

from torch_support import torch, nn, F, gradeq_export  # exits 77 without torch

GRADEQ = sys.argv[1]
V, D, H, T = 97, 32, 4, 16
failures = []


def check(ok, what):
    print("%-4s %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


class CausalSelfAttention(nn.Module):
    """nanoGPT's, by hand; `bug` makes it compute something else."""

    def __init__(self, causal=True, bug=None, heads=H):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        if bug == "third linear":
            self.extra = nn.Linear(D, D)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
        self.causal, self.bug, self.heads = causal, bug, heads

    def forward(self, x):
        B, Tn, C = x.size()
        q, k, v = self.c_attn(x).split(D, dim=2)
        k = k.view(B, Tn, self.heads, C // self.heads).transpose(1, 2)
        q = q.view(B, Tn, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, Tn, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.bug == "scale twice":
            att = att * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(self.bias[:, :, :Tn, :Tn] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, Tn, C)
        return self.c_proj(y)


class GPT(nn.Module):
    """Token and position embeddings, one pre-LN attention block, the final
    LayerNorm and a tied head: the default suite's gpt_attention_block."""

    def __init__(self, attn, declare=True, heads=H, causal=True):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D, padding_idx=0), nn.Embedding(T, D)
        self.ln_1 = nn.LayerNorm(D)
        self.attn = gradeq_export.declare_attention(attn, heads=heads, causal=causal) if declare else attn
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        x = x + self.attn(self.ln_1(x))
        return self.lm_head(self.ln_f(x))


def read():
    torch.manual_seed(0)
    s = gradeq_export.ModelLayers(GPT(CausalSelfAttention()))
    check(s.layers == ["embedding:32", "position_embedding:16",
                       {"residual": ["layernorm", "linear:96", "attention:4", "linear:32"]}, "layernorm", "tied_head"],
          "the declared module reads as linear:96, attention:4, linear:32: %s" % s.layers)
    check(s.names.get("attn.c_attn.weight") == "layer2.1.weight" and s.names.get("attn.c_attn.bias") == "layer2.1.bias"
          and s.names.get("attn.c_proj.weight") == "layer2.3.weight" and s.names.get("attn.c_proj.bias") ==
          "layer2.3.bias", "its projections under gradeq's names (c_attn -> layer2.1, c_proj -> layer2.3)")
    s = gradeq_export.ModelLayers(GPT(CausalSelfAttention(causal=False), causal=False))
    check(s.layers[2] == {"residual": ["layernorm", "linear:96", "bidirectional_attention:4", "linear:32"]},
          "a module without the causal mask, declared so, reads as bidirectional_attention:4")


def refused(what, model, expected):
    try:
        gradeq_export.ModelLayers(model)
    except ValueError as e:
        check(all(x in str(e) for x in expected), "%s: refused: %s" % (what, e))
        return
    check(False, "%s: accepted" % what)


def refusals():
    torch.manual_seed(0)
    probe = "does not compute it: on a float64 probe of"
    refused("1/sqrt(d) applied twice (B37's math)", GPT(CausalSelfAttention(bug="scale twice")),
            ["'attn'", "declared attention:4", probe])
    refused("the causal mask missing, declared causal (B36's math)", GPT(CausalSelfAttention(causal=False)),
            ["declared attention:4", probe])
    refused("a causal module declared bidirectional", GPT(CausalSelfAttention(), causal=False),
            ["declared bidirectional_attention:4", probe])
    refused("8 heads computed, 4 declared", GPT(CausalSelfAttention(heads=8)), ["declared attention:4", probe])
    refused("a third Linear in the declared module", GPT(CausalSelfAttention(bug="third linear")),
            ["must hold two nn.Linear children", "extra.weight"])
    refused("a hand-written core, not declared", GPT(CausalSelfAttention(), declare=False),
            ["cannot be traced by torch.fx", "declare_attention"])
    try:
        gradeq_export.declare_attention(CausalSelfAttention(), heads=0)
        check(False, "declare_attention(heads=0): accepted")
    except ValueError as e:
        check("heads must be a whole number >= 1" in str(e), "declare_attention(heads=0): refused: %s" % e)


def record(directory, causal, padded):
    """docs/VERIFY.md's language-model loop over this GPT: 2 windows, split
    [1, 2, 1, 2, 1, 2, 1, 2] and [2, 2, 2, 2], AdamW, a clip; sequences of 2-16
    tokens padded with id 0 (or all of 16)."""
    torch.manual_seed(0)
    model = GPT(CausalSelfAttention(causal=causal), causal=causal)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    rec = gradeq_export.TorchRecorder(directory, model, opt, {"name": "gpt_declared", "loss": "causal_lm"})
    for sizes in ([1, 2, 1, 2, 1, 2, 1, 2], [2, 2, 2, 2]):
        ids = torch.randint(1, V, (sum(sizes), T))
        labels = ids.clone()
        for s in range(sum(sizes)):
            n = int(torch.randint(2, T + 1, ())) if padded else T
            ids[s, n:], labels[s, n:] = 0, -100
        rec.begin_window(ids, labels)
        opt.zero_grad()
        tokens = int((labels[:, 1:] != -100).sum())
        first = 0
        for n in sizes:
            x, y = ids[first:first + n], labels[first:first + n]
            first += n
            rec.micro_batch(x, y)
            logits = model(x)[:, :-1]
            ce = F.cross_entropy(logits.reshape(-1, V), y[:, 1:].reshape(-1), ignore_index=-100, reduction="sum")
            (ce / tokens).backward()
        rec.clip_grad_norm_(model.parameters(), 1.0)
        rec.before_step()
        opt.step()
        rec.after_step()
    rec.close()


def verified():
    for causal, padded, passes, what in (
            (True, True, True, "the correct GPT loop, right-padded sequences"),
            (False, True, False, "bidirectional, no key-padding mask, padded sequences (B40's math)"),
            (False, False, True, "bidirectional, no key-padding mask, no padding")):
        with tempfile.TemporaryDirectory(prefix="gradeq_attention_") as directory:
            record(directory, causal, padded)
            p = subprocess.run([GRADEQ, "verify", directory], capture_output=True, text=True)
        print(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr)
        if passes:
            check(p.returncode == 0, "%s: gradeq verify exits 0 (got %d)" % (what, p.returncode))
        else:
            check(p.returncode == 1 and "exceeds its bound" in p.stdout,
                  "%s: gradeq verify exits 1 on a value beyond its bound (got %d)" % (what, p.returncode))


read()
refusals()
verified()
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
