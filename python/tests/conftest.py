"""pytest setup: makes python/ importable without pip, and says loudly when the CUDA tests are
skipped (no GPU, or an extension built without the CUDA ops)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# python/ itself, unless ci.sh tests the pip-installed package (MXMOE_TEST_INSTALLED=1).
if not os.environ.get("MXMOE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

import mxmoe.torch as mt  # noqa: E402


def cuda_skip_reason():
    if not mt.has_cuda_ops():
        return "mxmoe extension built without CUDA ops (MXMOE_TORCH_CUDA=0 or CPU torch)"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    return None


CUDA_SKIP = cuda_skip_reason()
requires_cuda = pytest.mark.skipif(CUDA_SKIP is not None, reason="CUDA: %s" % CUDA_SKIP)


def pytest_report_header(config):
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return ["mxmoe: torch %s, CUDA ops built: %s, device: %s" % (
        torch.__version__, mt.has_cuda_ops(), dev)]


def pytest_terminal_summary(terminalreporter):
    if CUDA_SKIP:
        terminalreporter.write_line(
            "!!! mxmoe CUDA tests SKIPPED: %s (run python/gpu_check.sh on the H200) !!!" % CUDA_SKIP,
            yellow=True, bold=True)
