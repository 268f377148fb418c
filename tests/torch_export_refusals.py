"""Every input python/gradeq_export cannot record faithfully is refused
with a ValueError naming the module, tensor or setting: never another
exception, never a silent record (ctest label torch).

    torch_export_refusals.py

Exits 1 if a case raises anything else or nothing, 77 (skipped) without
torch.
"""

import math
import sys
import tempfile

from torch_support import torch, nn, F, gradeq_export  # exits 77 without torch

OUT = tempfile.mkdtemp(prefix="gradeq_refusals_")


def mlp(*extra):
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 8), *extra, nn.Linear(8, 3))


def recorder(model=None, opt=None, scenario=None, **kw):
    model = model or mlp(nn.ReLU())
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.1)
    return gradeq_export.TorchRecorder(OUT, model, opt, scenario or {"name": "x"}, **kw)


def one_window(rec, x=None, y=None, micro=None, clip=None):
    x = torch.randn(4, 4) if x is None else x
    y = torch.randn(4, 3) if y is None else y
    rec.begin_window(x, y)
    rec.optimizer.zero_grad()
    for xb, yb in micro or [(x[:2], y[:2]), (x[2:], y[2:])]:
        rec.micro_batch(xb, yb)
        F.mse_loss(rec.model(xb), yb, reduction="sum").backward()
    if clip is not None:
        rec.clip_grad_norm_(rec.model.parameters(), clip)
    rec.before_step()
    rec.optimizer.step()
    rec.after_step()


class TwoBranches(nn.Module):
    """a(x) + c(x): neither operand is the value both branches start from."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 3), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x) + self.c(x))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
            return self.a(x)
        return -self.a(x)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        return self.a(self.a(x))


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.spare = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x):
        return self.a(x)


def two_groups():
    m = mlp(nn.ReLU())
    return recorder(m, torch.optim.SGD([{"params": m[0].parameters(), "lr": 0.1},
                                        {"params": m[2].parameters(), "lr": 0.1, "momentum": 0.9}]))


def half_optimizer():
    m = mlp(nn.ReLU())
    return recorder(m, torch.optim.SGD(m[0].parameters(), lr=0.1))


def contradicting_weight_decay():
    m = mlp(nn.ReLU())
    return recorder(m, torch.optim.AdamW(m.parameters(), lr=1e-3), {"name": "x", "weight_decay": 0.0})


def contradicting_split():
    rec = recorder(scenario={"name": "x", "layers": ["linear:8", "gelu", "linear:3"]})
    return rec


def clip_after_one_micro_batch(parameters_of, **kw):
    rec = recorder()
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    rec.begin_window(x, y)
    rec.micro_batch(x, y)
    F.mse_loss(rec.model(x), y).backward()
    rec.clip_grad_norm_(parameters_of(rec.model), 1.0, **kw)


def clip_subset():
    clip_after_one_micro_batch(lambda m: m[0].parameters())


def clip_inf_norm():
    clip_after_one_micro_batch(lambda m: m.parameters(), norm_type=math.inf)


def micro_batch_first():
    rec = recorder()
    rec.micro_batch(torch.randn(2, 4), torch.randn(2, 3))


def step_without_before():
    rec = recorder()
    rec.begin_window(torch.randn(2, 4), torch.randn(2, 3))
    rec.after_step()


def close_empty():
    recorder().close()


def k_full_other_start():
    acc = recorder()
    one_window(acc)
    other = mlp(nn.ReLU())
    with torch.no_grad():
        other[0].weight.add_(1.0)
    gradeq_export.TorchRecorder(OUT, other, torch.optim.SGD(other.parameters(), lr=0.1), {"name": "x"},
                                run="K_full", writer=acc.writer)


def k_full_other_batch():
    acc = recorder()
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    one_window(acc, x, y)
    m = mlp(nn.ReLU())
    full = gradeq_export.TorchRecorder(OUT, m, torch.optim.SGD(m.parameters(), lr=0.1), {"name": "x"},
                                       run="K_full", writer=acc.writer)
    one_window(full, x + 1.0, y, micro=[(x + 1.0, y)])


def clip_two_norms():
    rec = recorder()
    one_window(rec, clip=1.0)
    one_window(rec, clip=2.0)
    rec.close()


def batchnorm_in_eval_mode():
    rec = recorder(mlp(nn.BatchNorm1d(8)))
    rec.model.eval()
    one_window(rec)


def dropout_put_in_training_mode():
    m = mlp(nn.Dropout(0.5)).eval()
    rec = recorder(m)
    m.train()
    one_window(rec)


class TokenModel(nn.Module):
    """A language model's ends: token and position embeddings, a head."""

    def __init__(self, tied=True, position_padding=None):
        super().__init__()
        self.wte = nn.Embedding(7, 4)
        self.wpe = nn.Embedding(3, 4, padding_idx=position_padding)
        self.head = nn.Linear(4, 7, bias=False)
        if tied:
            self.head.weight = self.wte.weight

    def forward(self, idx):
        return self.head(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))


class TwoTokenEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Embedding(7, 4), nn.Embedding(7, 4)

    def forward(self, idx):
        return self.b(self.a(idx))


def tied_weights():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    m[2].weight = m[0].weight
    recorder(m)


def an_adapted_linear():
    m = mlp(nn.ReLU())
    m[0].register_parameter("lora_a", nn.Parameter(torch.zeros(2, 4)))
    recorder(m)


def an_outside_parameter_stepped():
    m = mlp(nn.ReLU())
    scale = nn.Parameter(torch.ones(()))
    recorder(m, torch.optim.SGD(list(m.parameters()) + [scale], lr=0.1))


def indices_that_lie():
    rec = recorder()
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    rec.begin_window(x, y)
    rec.micro_batch(x[1:3], y[1:3], indices=[2, 3])


def float64_targets():
    recorder().begin_window(torch.randn(2, 4), torch.full((2, 3), 0.1, dtype=torch.float64))


def a_class_past_the_outputs():
    rec = recorder(nn.Sequential(nn.Linear(4, 3)))
    rec.begin_window(torch.randn(2, 4), torch.tensor([1, 3]))


def k_full_other_optimizer():
    acc = recorder()
    one_window(acc)
    m = mlp(nn.ReLU())
    gradeq_export.TorchRecorder(OUT, m, torch.optim.SGD(m.parameters(), lr=0.5), {"name": "x"}, run="K_full",
                                writer=acc.writer)


def k_full_without_writer():
    acc = recorder()
    one_window(acc)
    m = mlp(nn.ReLU())
    gradeq_export.TorchRecorder(OUT, m, torch.optim.SGD(m.parameters(), lr=0.1), {"name": "x"}, run="K_full")


def close_twice():
    rec = recorder()
    one_window(rec)
    rec.close()
    rec.close()


CASES = [
    ("not a module", lambda: recorder(model="model", opt=torch.optim.SGD(mlp().parameters(), lr=0.1)),
     "torch.nn.Module"),
    ("an unknown layer", lambda: recorder(mlp(nn.Tanh())), "module '1' (Tanh) is not a layer gradeq models"),
    ("a softmax layer", lambda: recorder(nn.Sequential(nn.Linear(4, 3), nn.Softmax(dim=-1))), "Softmax"),
    ("a linear layer without bias", lambda: recorder(nn.Sequential(nn.Linear(4, 3, bias=False))), "bias=False"),
    ("Dropout in training mode", lambda: recorder(mlp(nn.Dropout(0.1))), "p=0.1 in training mode"),
    ("LayerNorm without affine", lambda: recorder(mlp(nn.LayerNorm(8, elementwise_affine=False))), "with weight and bias"),
    ("BatchNorm with momentum None", lambda: recorder(mlp(nn.BatchNorm1d(8, momentum=None))), "momentum=None"),
    ("two eps", lambda: recorder(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8, eps=1e-5), nn.Linear(8, 8),
                                               nn.LayerNorm(8, eps=1e-6), nn.Linear(8, 3))), "different eps"),
    ("two branches summed", lambda: recorder(TwoBranches()), "node 'x' (placeholder x) is read by 'a' and 'c'"),
    ("data-dependent control flow", lambda: recorder(Branchy()), "cannot be traced by torch.fx"),
    ("a tied layer", lambda: recorder(Tied()), "used twice"),
    ("an unused parameter", lambda: recorder(Unused()), "'spare.weight' belongs to no layer"),
    ("float64 weights", lambda: recorder(mlp(nn.ReLU()).double()), "gradeq models float32 weights"),
    ("an unknown optimizer", lambda: recorder(opt=torch.optim.Adagrad(mlp().parameters())), "Adagrad"),
    ("amsgrad", lambda: (lambda m: recorder(m, torch.optim.Adam(m.parameters(), amsgrad=True)))(mlp(nn.ReLU())),
     "amsgrad=True"),
    ("param groups with different settings", two_groups, "param_groups[1] has settings"),
    ("a trained parameter outside the optimizer", half_optimizer, "'2.weight' requires a gradient but is in none"),
    ("a contradicting weight decay", contradicting_weight_decay, "weight_decay = 0.0 contradicts what the run has: 0.01"),
    ("contradicting layers", contradicting_split, "layers = ['linear:8', 'gelu', 'linear:3'] contradicts"),
    ("a scenario that is not a dict", lambda: recorder(scenario=["name"]), "scenario must be a dict"),
    ("an unknown run", lambda: recorder(run="K_half"), "run must be 'K_acc' or 'K_full'"),
    ("a micro-batch before the window", micro_batch_first, "before begin_window()"),
    ("after_step before before_step", step_without_before, "after_step() before before_step()"),
    ("close before any window", close_empty, "before any window was recorded"),
    ("4-D inputs", lambda: recorder().begin_window(torch.randn(2, 2, 2, 4), torch.randn(2, 3)), "inputs of shape"),
    ("string-like targets", lambda: recorder().begin_window(torch.randn(2, 4), torch.zeros(2, 3, dtype=torch.bool)),
     "targets of dtype torch.bool"),
    ("targets of the wrong size", lambda: recorder().begin_window(torch.randn(2, 4), torch.randn(3, 3)),
     "do not match 2 rows"),
    ("inputs that are not float32 values", lambda: recorder().begin_window(
        torch.full((2, 4), 0.1, dtype=torch.float64), torch.randn(2, 3)), "not float32 values"),
    ("NaN inputs", lambda: recorder().begin_window(torch.full((2, 4), math.nan), torch.randn(2, 3)), "NaN or Inf"),
    ("inputs that are not tensors", lambda: recorder().begin_window([[1.0] * 4], torch.randn(1, 3)), "torch tensors"),
    ("clipping a subset of the parameters", clip_subset, "other parameters than the model's trained ones"),
    ("clipping by another norm", clip_inf_norm, "norm_type=inf"),
    ("two clip thresholds", clip_two_norms, "different max_norm"),
    ("K_full from other weights", k_full_other_start, "does not start where the accumulated run's did"),
    ("K_full over another batch", k_full_other_batch, "is not the accumulated run's window 0"),
    ("GroupNorm over positions", lambda: one_window(recorder(mlp(nn.GroupNorm(2, 8))), torch.randn(2, 3, 4),
                                                    torch.randn(2, 3, 3), micro=[(torch.randn(2, 3, 4),
                                                                                  torch.randn(2, 3, 3))]),
     "module '1' (GroupNorm) normalizes each row alone"),
    ("BatchNorm1d over [samples, positions, features]", lambda: recorder(mlp(nn.BatchNorm1d(8))).begin_window(
        torch.randn(2, 3, 4), torch.randn(2, 3, 3)), "module '1' (BatchNorm1d) normalizes dimension 1"),
    ("BatchNorm in eval mode", batchnorm_in_eval_mode, "module '1' (BatchNorm1d) is in eval mode"),
    ("Dropout put back in training mode", dropout_put_in_training_mode, "module '1' (Dropout, p=0.5) is in training"),
    ("tied weights", tied_weights, "parameters '0.weight' and '2.weight' are one tensor"),
    ("an untied head without bias", lambda: gradeq_export.layers_of(TokenModel(tied=False)),
     "bias=False is not modelled, but for a head tied to the token embedding"),
    ("an embedding of what is not the ids", lambda: gradeq_export.layers_of(
        nn.Sequential(nn.Linear(4, 4), nn.Embedding(5, 4))), "an embedding reads the model's token ids"),
    ("an embedding of an embedding", lambda: gradeq_export.layers_of(TwoTokenEmbeddings()),
     "module 'b' (Embedding) reads 'a': an embedding reads the model's token ids"),
    ("a position embedding with padding_idx", lambda: gradeq_export.layers_of(TokenModel(position_padding=0)),
     "a position embedding with padding_idx"),
    ("a linear layer with an adapter's parameters", an_adapted_linear, "has the parameters ['bias', 'lora_a', 'weight']"),
    ("a stepped tensor outside the model", an_outside_parameter_stepped, "not a parameter of the model's layers"),
    ("indices that name other samples", indices_that_lie, "its sample 0 is not the window's sample 2"),
    ("float64 targets", float64_targets, "targets are not float32 values"),
    ("a class past the outputs", a_class_past_the_outputs, "class 3 is outside [0, 3)"),
    ("a misspelt scenario key", lambda: recorder(scenario={"name": "x", "warmup_step": 1}),
     "['warmup_step'] are not gradeq config keys"),
    ("K_full with another optimizer", k_full_other_optimizer, "the full-batch run has learning_rate = 0.5"),
    ("K_full without the writer", k_full_without_writer, "writer=<the K_acc recorder>.writer"),
    ("close twice", close_twice, "close() twice"),
    ("the writer rounding a float64 result", lambda: gradeq_export.WindowSetWriter(OUT + "_w", {}).set_initial(
        "layer0.weight", [[0.1]]), "values that are not float32 numbers"),
]


def main():
    wrong = 0
    for what, case, expect in CASES:
        try:
            case()
            print("FAIL  %-45s accepted" % what)
            wrong += 1
        except ValueError as e:
            ok = expect in str(e)
            wrong += not ok
            print("%-5s %-45s %s" % ("ok" if ok else "FAIL", what, e))
        except Exception as e:  # anything but a ValueError is a defect of the exporter
            print("FAIL  %-45s raised %s: %s" % (what, type(e).__name__, e))
            wrong += 1
    print("%d of %d refusals as expected" % (len(CASES) - wrong, len(CASES)))
    sys.exit(1 if wrong else 0)


main()
