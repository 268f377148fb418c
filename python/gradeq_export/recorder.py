"""TorchRecorder: a PyTorch accumulation loop recorded as a window set."""

import math

import numpy as np

from .model_layers import ModelLayers
from .settings import _same, _torch, optimizer_settings
from .window_set import CONFIG_KEYS, IGNORE_CLASS, WindowSetWriter

CLIP_EPSILON = 1e-6  # clip_grad_norm_'s, part of its definition


class TorchRecorder:
    """Records a PyTorch accumulation loop as a window set (run K_acc, or
    K_full for its full-batch counterpart with writer=the K_acc recorder's
    writer). See the package's docstring (gradeq_export) and docs/VERIFY.md.

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
            # cuDNN's convolutions read TF32 operands where allow_tf32 (on by
            # default), cuBLAS's GEMMs where matmul.allow_tf32: gradeq's tf32
            # is one setting, and covers both where either reads TF32.
            convs = any(k.startswith("conv2d") for k in self.structure.kinds)
            self.read["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32) or (
                convs and bool(torch.backends.cudnn.allow_tf32))
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
        self.image = None  # (C, H, W) where the inputs are images
        self.fed_sizes = []  # per window, the micro-batch sizes fed (samples)
        self.clip_norms = set()
        self.closed = False
        self._reset_window()
        if run == "K_full":  # the same start as K_acc's
            for name, p in model.named_parameters():
                gradeq_name = self.structure.names[name]
                start = self.writer.initial_values.get(gradeq_name)
                if start is None or not np.array_equal(start, self.structure.matrix(gradeq_name,
                                                                                    p.detach().cpu().numpy())):
                    raise ValueError("parameter '%s' does not start where the accumulated run's did" % name)
        else:
            parameters = dict(model.named_parameters())
            for name, torch_name in self.structure.torch_of.items():  # in gradeq's order
                value = parameters[torch_name].detach().cpu().numpy()
                self.writer.set_initial(name, self.structure.matrix(name, value), torch=torch_name)
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
            tensors["param/" + self.structure.names[n]] = self.structure.matrix(self.structure.names[n],
                                                                                 p.detach().cpu().numpy())
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
        if self.structure.vocabulary is not None:
            read["vocabulary"] = self.structure.vocabulary
            if self.structure.padding_token is not None:
                read["padding_token"] = self.structure.padding_token
        else:
            read["input_features"] = self.input_features
            if self.image is not None:
                read["image"] = list(self.image)
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
        if key in ("input_features", "positions", "loss", "image"):
            return "window's batch"
        if key == "clip_max_norm":
            return "clip_grad_norm_ calls"
        if key == "compute_dtype":
            return "autocast around the micro-batches"
        if key == "tf32":
            return "torch.backends.cuda.matmul.allow_tf32, and cudnn.allow_tf32 where the model has convolutions"
        return "optimizer"

    def _rows(self, inputs, targets, what):
        """inputs and targets as gradeq's rows: x [rows, features] float32,
        y [rows] int64 classes or [rows, outputs] float32."""
        torch = _torch()
        if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
            raise ValueError("%s: inputs and targets must be torch tensors" % what)
        x = inputs.detach().cpu()
        if self.structure.vocabulary is not None:
            return self._token_rows(x, targets.detach().cpu(), what)
        sequences = x.dim() == 3
        if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            raise ValueError("%s: inputs of dtype %s (floating point expected)" % (what, x.dtype))
        if x.numel() == 0:
            raise ValueError("%s: inputs of shape %s hold no sample" % (what, tuple(inputs.shape)))
        image = None
        if x.dim() == 4:  # images, [samples, C, H, W]: a sample is one row of C*H*W values (NCHW)
            if not self.structure.reads_images:
                raise ValueError("%s: inputs of shape %s are images, [samples, C, H, W], and no layer of the model "
                                 "reads an image (Conv2d, a pool, BatchNorm2d, Flatten, ...): [samples, features] or "
                                 "[samples, positions, features] expected" % (what, tuple(inputs.shape)))
            image = tuple(int(d) for d in x.shape[1:])
            if self.image is not None and image != self.image:
                raise ValueError("%s: images of %s, earlier %s" % (what, "x".join(map(str, image)),
                                                                  "x".join(map(str, self.image))))
            if int(self.declared.get("positions", 1)) != 1:
                raise ValueError("%s: an image is one row; scenario key positions = %r" % (
                    what, self.declared["positions"]))
            positions = 1
            x = x.reshape(x.shape[0], -1)
        elif self.image is not None:
            raise ValueError("%s: inputs of shape %s, earlier images (%s)" % (what, tuple(inputs.shape),
                                                                             "x".join(map(str, self.image))))
        elif x.dim() == 3:
            positions = x.shape[1]
            if self.positions is not None and positions != self.positions:
                raise ValueError("%s: %d positions per sample, earlier %d" % (what, positions, self.positions))
            x = x.reshape(-1, x.shape[2])
        elif x.dim() == 2:
            positions = int(self.declared.get("positions", 1)) if self.positions is None else self.positions
        else:
            raise ValueError("%s: inputs of shape %s ([samples, features], [samples, positions, features] or "
                             "[samples, C, H, W] expected)" % (what, tuple(inputs.shape)))
        self.positions = positions
        self.structure.check_inputs(positions, sequences, int(x.shape[1]), image=image)
        self.image = image
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

    def _token_rows(self, ids, labels, what):
        """A language model's batch: ids [samples, positions] (integers in
        [0, vocabulary)), labels of the same shape as the loop has them,
        unshifted (integers, -100 = padding). The loss is cross-entropy on
        each position's label, or with scenario loss = "causal_lm" on the
        next position's (the loop's loss shifts them)."""
        torch = _torch()
        vocabulary = self.structure.vocabulary
        if ids.dtype not in (torch.int64, torch.int32) or ids.dim() != 2:
            raise ValueError("%s: a language model's inputs are token ids, integers of shape [samples, positions]; "
                             "got %s of shape %s" % (what, ids.dtype, tuple(ids.shape)))
        if ids.numel() == 0:
            raise ValueError("%s: inputs of shape %s hold no sample" % (what, tuple(ids.shape)))
        bad = (ids < 0) | (ids >= vocabulary)
        if bad.any():
            raise ValueError("%s: token id %d is outside [0, %d)" % (what, int(ids[bad][0]), vocabulary))
        positions = int(ids.shape[1])
        if self.positions is not None and positions != self.positions:
            raise ValueError("%s: %d positions per sample, earlier %d" % (what, positions, self.positions))
        self.positions = positions
        self.structure.check_inputs(positions, True, vocabulary)
        self.input_features = vocabulary
        if labels.dtype not in (torch.int64, torch.int32) or tuple(labels.shape) != tuple(ids.shape):
            raise ValueError("%s: a language model's targets are its labels, integers of the ids' shape %s; got %s of "
                             "shape %s" % (what, tuple(ids.shape), labels.dtype, tuple(labels.shape)))
        y = labels.reshape(-1).to(torch.int64)
        outputs = self.structure.output_width(vocabulary)
        bad = (y != IGNORE_CLASS) & ((y < 0) | (y >= outputs))
        if bad.any():
            raise ValueError("%s: label %d is outside [0, %d) and is not the padding label -100"
                             % (what, int(y[bad][0]), outputs))
        loss = "causal_lm" if self.declared.get("loss") == "causal_lm" else "cross_entropy"
        self.loss = loss
        return ids.reshape(-1, 1).to(torch.float32).numpy(), y.numpy()

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
        if self.loss in ("cross_entropy", "causal_lm"):
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
            name = self.structure.names[n]
            out[name] = None if g is None else self.structure.matrix(name, g.detach().to("cpu").numpy().copy())
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
                name = self.structure.names[n]
                if value is not None:
                    out["state/%s.%s" % (name, key)] = self.structure.matrix(name, value.detach().cpu().numpy())
                elif zeros_for_missing:  # never stepped (no gradient yet): a fresh optimizer's zeros
                    zeros = np.zeros(tuple(p.shape), np.float32)
                    out["state/%s.%s" % (name, key)] = self.structure.matrix(name, zeros)
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
