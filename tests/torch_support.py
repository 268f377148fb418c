"""What the torch tests share: numpy, torch and python/gradeq_export
imported, on two threads; or, where torch or numpy is missing, the test
skipped (exit 77, which ctest reads as a skip) with the reason.

    from torch_support import np, torch, nn, F, gradeq_export
"""

import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # ctest shows this line with the skip
    print("SKIP: %s (install python3-torch and python3-numpy)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gradeq_export  # noqa: E402

torch.set_num_threads(2)

__all__ = ["np", "torch", "nn", "F", "gradeq_export"]
