"""Writes golden cases from PyTorch in float64 (tests/golden/README.md).

    /usr/bin/python3 tests/golden/make_goldens.py [OP ...]

One JSON file per op into this directory: the inputs, the upstream gradient
`dy` and what PyTorch returned (layer files: loss = sum(y * dy), so `dx` is
the gradient of that loss). Seeded: the same torch gives the same files.
Without OP, every op this script knows. The older files of this directory
were made the same way before the script was kept here; an op added to the
reference gets its entry in OPS.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def activation(name, fn, rows=4, cols=6, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(rows, cols, generator=g, dtype=torch.float64) * 6.0 - 3.0).requires_grad_()
    dy = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    y = fn(x)
    (y * dy).sum().backward()
    return {"op": name, "torch": torch.__version__, "dtype": "float64", "x": x.detach().tolist(), "dy": dy.tolist(),
            "y": y.detach().tolist(), "dx": x.grad.tolist()}


OPS = {
    # nn.GELU()'s default: x Phi(x), exact through erf.
    "gelu_erf": lambda: activation("gelu_erf", lambda x: F.gelu(x)),
}


def main(names):
    for name in names or list(OPS):
        if name not in OPS:
            sys.exit("unknown op %s (known: %s)" % (name, ", ".join(OPS)))
        path = os.path.join(HERE, name + ".json")
        with open(path, "w") as f:
            json.dump(OPS[name](), f, indent=1)
        print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1:])
