"""gradeq_export — write a gradeq window set from your own training loop.

A window set (docs/VERIFY.md) is a directory with manifest.json and NumPy
.npy files: the scenario (model, loss, split, optimizer and every
hyper-parameter, as gradeq's config keys), each window's inputs and
targets, the initial parameters, and per window the run's gradients as the
optimizer used them, its parameters after the step and its optimizer
state. `gradeq verify DIR` then computes gradeq's float64 reference from
the same inputs and judges the run with the same verdicts and bounds as
`gradeq check`.

NumPy only: WindowSetWriter. With PyTorch: TorchRecorder wraps a loop
over an nn.Sequential of Linear, ReLU, GELU(approximate="tanh"),
LayerNorm, BatchNorm1d and GroupNorm layers; layers_of() derives gradeq's
layer list from such a model.

    rec = TorchRecorder("out", model, optimizer, scenario)
    for w, window in enumerate(windows):
        optimizer.zero_grad()
        for x, y in window:                       # the micro-batches
            rec.micro_batch(x, y)
            loss_fn(model(x), y).backward()
        clip_grad_norm_(model.parameters(), max_norm)
        rec.before_step()                         # the gradients the step uses
        optimizer.step(); scheduler.step()
        rec.after_step()                          # weights and optimizer state
    rec.close()                                   # manifest.json
"""

import json
import os

import numpy as np

FORMAT = "gradeq-window-set"
SCHEMA_VERSION = 2
IGNORE_CLASS = -100  # padding tokens, PyTorch's ignore_index


def _file(run, window, tensor):
    name = "%s_w%d_%s" % (run, window, tensor)
    for c in "/: ":
        name = name.replace(c, "_")
    return name + ".npy"


def _as_matrix(a, dtype):
    a = np.asarray(a, dtype=dtype)
    if a.ndim == 0:
        return a.reshape(1, 1)
    if a.ndim == 1:
        return a.reshape(1, -1)  # vectors are [1, n] in gradeq
    if a.ndim != 2:
        raise ValueError("gradeq tensors are matrices; got shape %s" % (a.shape,))
    return np.ascontiguousarray(a)


class WindowSetWriter:
    """The format itself, from NumPy arrays.

    scenario: gradeq config keys (harness/config.h), at least name,
    input_features, layers, split; positions, loss, optimizer,
    learning_rate, ... as the run had them. Parameter names are gradeq's:
    "layer<l>.weight" / "layer<l>.bias" for the l-th layer of `layers`.
    """

    def __init__(self, directory, scenario):
        self.directory = directory
        self.scenario = dict(scenario)
        os.makedirs(directory, exist_ok=True)
        for f in os.listdir(directory):  # a set is written whole: no stale files
            if f.endswith(".npy") or f == "manifest.json":
                os.remove(os.path.join(directory, f))
        self.windows = []
        self.initial = {}
        self.initial_state = {}
        self.runs = {}

    def _save(self, file, array):
        np.save(os.path.join(self.directory, file), array)
        return file

    def set_initial(self, name, value):
        self.initial[name] = self._save("initial_%s.npy" % name, _as_matrix(value, np.float32))

    def set_initial_state(self, entry, value):
        """The state the first window starts from, where it is not fresh:
        "state/layer0.weight.exp_avg", "stats/layer1.running_mean", "state/step", ..."""
        self.initial_state[entry] = self._save(_file("initial", 0, entry), _as_matrix(value, np.float32))

    def add_window(self, inputs, targets=None, classes=None, split=None):
        w = len(self.windows)
        entry = {"inputs": self._save("window%d_inputs.npy" % w, _as_matrix(inputs, np.float32))}
        if split is not None:
            entry["split"] = [int(s) for s in split]
        if targets is not None:
            entry["targets"] = self._save("window%d_targets.npy" % w, _as_matrix(targets, np.float32))
        if classes is not None:
            entry["classes"] = self._save("window%d_classes.npy" % w,
                                          np.asarray(classes, dtype=np.int64).reshape(-1))
        self.windows.append(entry)

    def add_result(self, run, window, tensors, skipped=False, loss=None):
        """tensors: {"grad/layer0.weight": array, "param/...", "state/...", "stats/..."}."""
        windows = self.runs.setdefault(run, [])
        while len(windows) <= window:
            windows.append({"skipped": False, "tensors": {}})
        entry = windows[window]
        entry["skipped"] = bool(skipped)
        if loss is not None:
            entry["loss"] = float(loss)
        for name, value in tensors.items():
            entry["tensors"][name] = self._save(_file(run, window, name), _as_matrix(value, np.float32))

    def close(self):
        runs = {name: {"role": "kernel", "split": "accumulated" if name == "K_acc" else "full", "windows": ws}
                for name, ws in self.runs.items()}
        initial = {"parameters": self.initial}
        if self.initial_state:
            initial["state"] = self.initial_state
        manifest = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "scenario": self.scenario,
                    "windows": self.windows, "initial": initial, "runs": runs}
        with open(os.path.join(self.directory, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)


# ------------------------------------------------------------------ PyTorch


def layers_of(model):
    """gradeq's layer list for an nn.Sequential (raises on what gradeq does not model)."""
    import torch.nn as nn

    layers = []
    for i, m in enumerate(model):
        if isinstance(m, nn.Linear):
            if m.bias is None:
                raise ValueError("layer %d: gradeq's linear layers have a bias" % i)
            layers.append("linear:%d" % m.out_features)
        elif isinstance(m, nn.ReLU):
            layers.append("relu")
        elif isinstance(m, nn.GELU):
            if m.approximate != "tanh":
                raise ValueError("layer %d: gradeq models GELU(approximate='tanh')" % i)
            layers.append("gelu")
        elif isinstance(m, nn.LayerNorm):
            if len(m.normalized_shape) != 1 or not m.elementwise_affine:
                raise ValueError("layer %d: LayerNorm over the last dimension, with weight and bias" % i)
            layers.append("layernorm")
        elif isinstance(m, nn.BatchNorm1d):
            if not m.affine or not m.track_running_stats:
                raise ValueError("layer %d: BatchNorm1d with weight, bias and running statistics" % i)
            layers.append("batchnorm")
        elif isinstance(m, nn.GroupNorm):
            layers.append("groupnorm:%d" % m.num_groups)
        else:
            raise ValueError("layer %d: %s is not a layer gradeq models" % (i, type(m).__name__))
    return layers


def parameter_names(model):
    """{torch name: gradeq name}: "3.weight" -> "layer3.weight" (nn.Sequential)."""
    return {name: "layer" + name for name, _ in model.named_parameters()}


class TorchRecorder:
    """Records a PyTorch accumulation loop as a window set (run K_acc, or
    K_full for its full-batch counterpart). See the module docstring."""

    _STATE = {"momentum_buffer": "momentum_buffer", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}

    def __init__(self, directory, model, optimizer, scenario, run="K_acc", writer=None, steps_taken=0):
        self.model = model
        self.optimizer = optimizer
        self.run = run
        self.names = parameter_names(model)
        scenario = dict(scenario)
        scenario.setdefault("layers", layers_of(model))
        self.writer = writer or WindowSetWriter(directory, scenario)
        self.window = 0
        self.steps = steps_taken  # optimizer steps before the first recorded window
        self._inputs, self._targets, self._sizes = [], [], []
        self.positions = int(scenario.get("positions", 1))
        self.cross_entropy = scenario.get("loss", "mse") == "cross_entropy"
        self._grads = None
        if not self.writer.initial:
            for name, p in model.named_parameters():
                self.writer.set_initial(self.names[name], p.detach().cpu().numpy())
            # A loop recorded mid-training starts from its optimizer's state.
            state = self._state_tensors()
            if state or steps_taken:
                for entry, value in state.items():
                    self.writer.set_initial_state(entry, value)
                self.writer.set_initial_state("state/step", np.array([[steps_taken]], dtype=np.float32))

    def micro_batch(self, inputs, targets):
        """inputs [rows, features]; targets [rows, outputs] (mse) or classes [rows] (-100 = padding)."""
        x = inputs.detach().cpu().numpy()
        self._inputs.append(x)
        self._targets.append(targets.detach().cpu().numpy())
        self._sizes.append(x.shape[0] // self.positions)

    def before_step(self):
        """After the last micro-batch (and the clip), before optimizer.step()."""
        self._grads = {"grad/" + self.names[n]: p.grad.detach().cpu().numpy()
                       for n, p in self.model.named_parameters()}

    def after_step(self, skipped=False):
        if self._grads is None and not skipped:
            raise RuntimeError("call before_step() before optimizer.step()")
        tensors = dict(self._grads or {}) if not skipped else {}
        if not skipped:
            self.steps += 1
        for n, p in self.model.named_parameters():
            tensors["param/" + self.names[n]] = p.detach().cpu().numpy()
        tensors.update(self._state_tensors())
        tensors["state/step"] = np.array([[self.steps]], dtype=np.float32)
        if self.run == "K_acc" or len(self.writer.windows) <= self.window:
            y = np.concatenate(self._targets)
            if len(self.writer.windows) <= self.window:
                if self.cross_entropy:
                    self.writer.add_window(np.concatenate(self._inputs), classes=y, split=self._sizes)
                else:
                    self.writer.add_window(np.concatenate(self._inputs), targets=y, split=self._sizes)
        self.writer.add_result(self.run, self.window, tensors, skipped=skipped)
        self.window += 1
        self._inputs, self._targets, self._sizes, self._grads = [], [], [], None

    def _state_tensors(self):
        """Optimizer state and BatchNorm running statistics, by gradeq entry name."""
        out = {}
        for n, p in self.model.named_parameters():
            state = self.optimizer.state.get(p, {})
            for key, suffix in self._STATE.items():
                if key in state and state[key] is not None:
                    out["state/%s.%s" % (self.names[n], suffix)] = state[key].detach().cpu().numpy()
        for n, b in self.model.named_buffers():
            if n.endswith("running_mean") or n.endswith("running_var"):
                out["stats/layer" + n] = b.detach().cpu().numpy()
        return out

    def close(self):
        self.writer.close()
