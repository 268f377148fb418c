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
torch.fx traces into that form (ModelLayers). A hand-written attention
module (nanoGPT's CausalSelfAttention) is declared to be gradeq's op with
declare_attention(module, heads), and the claim is checked numerically
before anything is recorded (attention.py). It reads what it can from
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

The parts: window_set (the format and WindowSetWriter), model_layers (the
model read through torch.fx: ModelLayers and its tables), attention (the
attention op's specification and its declaration), settings (the
optimizer's settings) and recorder (TorchRecorder). Import them from here.
"""

from .attention import attention_spec, declare_attention
from .model_layers import MODELLED, ModelLayers, layers_of
from .recorder import CLIP_EPSILON, TorchRecorder
from .settings import optimizer_settings
from .window_set import CONFIG_KEYS, FORMAT, IGNORE_CLASS, SCHEMA_VERSION, WindowSetWriter

__all__ = ["CLIP_EPSILON", "CONFIG_KEYS", "FORMAT", "IGNORE_CLASS", "MODELLED", "ModelLayers", "SCHEMA_VERSION",
           "TorchRecorder", "WindowSetWriter", "attention_spec", "declare_attention", "layers_of",
           "optimizer_settings"]
