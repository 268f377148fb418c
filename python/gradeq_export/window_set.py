"""The window-set format (docs/VERIFY.md) and its writer, from NumPy arrays:
manifest.json and one .npy file a tensor. NumPy only."""

import json
import os

import numpy as np

FORMAT = "gradeq-window-set"
SCHEMA_VERSION = 4
IGNORE_CLASS = -100  # padding tokens, PyTorch's ignore_index


# The config keys a scenario may hold (harness/core/config.h, README "A config
# file"): a misspelt key is refused here, where the loop is, not by verify.
CONFIG_KEYS = {
    "name", "input_features", "positions", "layers", "loss", "data", "split", "learning_rate", "seed",
    "normalization", "compute_dtype", "accumulate_dtype", "optimizer", "momentum", "dampening", "nesterov",
    "weight_decay", "betas", "eps", "clip_max_norm", "warmup_steps", "total_steps", "loss_scale",
    "dynamic_loss_scale", "growth_interval", "compensated", "norm_eps", "batchnorm_momentum", "tf32",
    "reduced_precision_reduction", "checkpoint_every", "growth_factor", "backoff_factor", "batchnorm_mode", "frozen",
    "accumulation", "vocabulary", "padding_token", "image"}


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
        """The window's batch: inputs [rows, features] (an image a row of its
        C*H*W values, NCHW, with the scenario's image = [C, H, W]); targets [rows, outputs]
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
        # Autograd sums a tied weight's two uses before AccumulateGrad adds
        # them into .grad: one add per micro-batch, not one per use.
        manifest = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "scenario": self.scenario,
                    "windows": self.windows, "initial": initial, "runs": runs, "tied_gradient": "summed_first"}
        if self.parameters:
            manifest["parameters"] = self.parameters
        with open(os.path.join(self.directory, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)

