"""Start-up checks for GPU and Ascend: the reasons a first run on those devices would fail, or silently run
somewhere else, said in one line before any time is spent.

Facts they rest on (MindSpore 2.10.0's wheel, read from its files and source):
- The GPU plugins are `lib/plugin/libmindspore_gpu.so.11.1` and `.11.6`: CUDA 11 builds only. MindSpore picks one
  from the version `$CUDA_HOME/bin/nvcc --version` reports and loads nothing when CUDA_HOME is unset, so a
  CUDA-12-only host has no GPU backend. Hopper GPUs (compute capability 9.0) need CUDA >= 11.8.
- The GPU plugins hold no bfloat16 CUDA kernels (no `__nv_bfloat16` symbol); first-generation Atlas training
  chips (Ascend 910A) have no bfloat16 either.
- Ascend 910A (and 910B when MS_ASCEND_CHECK_OVERFLOW_MODE=SATURATION_MODE) saturates instead of producing
  inf/nan: an fp16 overflow is only visible in the chip's float-status register (mindspore.amp.all_finite reads it).
"""
import os
import re
import shutil
import subprocess
from typing import Tuple

import mindspore as ms

GPU_PLUGIN_CUDA = ("11.1", "11.6")
HOPPER_CUDA = (11, 8)


def run_quietly(command, timeout: float = 10) -> str:
    """stdout of `command`, or '' when it is missing, fails or hangs (a broken driver must not stop the check)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def nvidia_gpu() -> Tuple[str, float]:
    """(name, compute capability) of the first NVIDIA GPU nvidia-smi lists; ('', 0.0) when there is none."""
    if not shutil.which("nvidia-smi"):
        return "", 0.0
    line = run_quietly(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]).strip()
    if not line:
        return "", 0.0
    name, _, capability = line.splitlines()[0].rpartition(",")
    try:
        return name.strip(), float(capability)
    except ValueError:
        return line.splitlines()[0].strip(), 0.0


def cuda_toolkit_version(cuda_home: str) -> str:
    """The 'X.Y' release of `cuda_home/bin/nvcc` ('' when there is none): what MindSpore picks its plugin by."""
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if not cuda_home or not os.access(nvcc, os.X_OK):
        return ""
    found = re.search(r"release (\d+\.\d+)", run_quietly([nvcc, "--version"]))
    return found.group(1) if found else ""


def _plugin_error(target: str) -> str:
    """The first line of MindSpore's own error from loading `target`'s plugin ('' when it did not try)."""
    from mindspore._c_expression import MSContext  # the same call mindspore.hal uses for its warnings

    key = {"GPU": "gpu", "Ascend": "ascend"}[target]
    lines = [line.strip() for line in MSContext.get_instance().load_plugin_error().splitlines()]
    return next((line for line in lines if f"libmindspore_{key}" in line), "")


def gpu_unavailable_reason() -> str:
    """Why MindSpore cannot use the NVIDIA GPU this host has ('' when there is no NVIDIA GPU)."""
    name, capability = nvidia_gpu()
    if not name:
        return ""
    cuda_home = os.environ.get("CUDA_HOME", "")
    version = cuda_toolkit_version(cuda_home)
    gpu = f"GPU {name} found but not usable: "
    if not cuda_home:
        return gpu + (f"CUDA_HOME is not set; MindSpore {ms.__version__} needs a CUDA {' or '.join(GPU_PLUGIN_CUDA)} "
                      f"toolkit (with cuDNN 8) and CUDA_HOME pointing at it")
    if not version:
        return gpu + f"no nvcc in CUDA_HOME={cuda_home}/bin (MindSpore picks its GPU plugin by nvcc's version)"
    if not version.startswith("11."):
        return gpu + (f"CUDA_HOME={cuda_home} is CUDA {version}, but MindSpore {ms.__version__}'s GPU plugins are "
                      f"CUDA {' and '.join(GPU_PLUGIN_CUDA)} builds: install CUDA 11.x (11.8 for Hopper) with cuDNN 8 "
                      f"and point CUDA_HOME at it")
    if capability >= 9.0 and tuple(int(part) for part in version.split(".")) < HOPPER_CUDA:
        return gpu + f"a compute capability {capability:g} GPU needs CUDA >= 11.8, CUDA_HOME={cuda_home} is {version}"
    error = _plugin_error("GPU")
    return gpu + (f"MindSpore could not load its GPU plugin ({error})" if error else
                  "MindSpore's GPU plugin did not load (run python -c \"import mindspore as ms; ms.set_device('GPU'); "
                  "ms.run_check()\" for its messages)")


def ascend_unavailable_reason() -> str:
    """MindSpore's own error from loading the Ascend plugin, when this host has an Ascend driver."""
    if not os.path.exists("/usr/local/Ascend/driver") and not os.path.exists("/dev/davinci0"):
        return ""
    error = _plugin_error("Ascend")
    return f"an Ascend driver is installed but MindSpore's Ascend plugin did not load ({error or 'no message'}): " \
           f"install the CANN toolkit matching MindSpore {ms.__version__} and source its set_env.sh"


def _ascend_soc_has(feature: str) -> bool:
    """Whether the current Ascend SoC has `feature` (the names mindspore.amp asks about)."""
    from mindspore._c_expression import MSContext

    return bool(MSContext.get_instance().ascend_soc_supports_feature(feature))


def is_ascend_910a() -> bool:
    """First-generation Atlas training chip (saturation mode, no bfloat16), as mindspore.amp detects it."""
    return ms.get_context("device_target") == "Ascend" and _ascend_soc_has("amp_loss_scale_train_classic_target")


def overflow_needs_float_status(target: str) -> bool:
    """True where fp16 overflow saturates instead of producing inf/nan, so only the float-status register shows it."""
    if target != "Ascend":
        return False
    saturation = os.environ.get("MS_ASCEND_CHECK_OVERFLOW_MODE") == "SATURATION_MODE"
    return is_ascend_910a() or (saturation and _ascend_soc_has("train_hq_dtype_line"))


def compute_type_problem(target: str, compute_type: str) -> str:
    """Why `compute_type` cannot run on GPU or Ascend `target` ('' when it can); CPU: see
    src.devices.device_setup.cpu_compute_type_problem."""
    if compute_type != "bfloat16":
        return ""
    if target == "GPU":
        return (f"compute_type bfloat16 is not available on GPU: MindSpore {ms.__version__}'s CUDA 11 GPU plugins have "
                f"no bfloat16 kernels; use float16 (with enable_lossscale true) or float32")
    if is_ascend_910a():
        return "compute_type bfloat16 is not available on Ascend 910A (no bfloat16 on that chip); use float16"
    return ""
