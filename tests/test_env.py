import os
import subprocess
import sys

from fusedrms import env


def test_interpreter_is_on_exactly_when_there_is_no_gpu():
    e = env.current()
    assert (os.environ.get("TRITON_INTERPRET") == "1") == (not e.on_gpu)
    assert e.backend in ("cuda", "rocm", "cpu")
    assert e.device.type == ("cpu" if e.backend == "cpu" else "cuda")


def test_pick_shrinks_on_cpu():
    e = env.current()
    assert e.pick(gpu=1024, cpu=8) == (1024 if e.on_gpu else 8)


def test_describe_says_what_runs_where():
    text = env.current().describe()
    if env.current().on_gpu:
        assert text.startswith("GPU: ") and "Triton compiled for the GPU" in text
    else:
        assert text.startswith("no GPU: Triton interpreter, HIP on the CPU runtime")
    assert "torch" in text and "triton" in text


def test_force_cpu_takes_the_cpu_path_in_a_fresh_process():
    code = ("import os; from fusedrms import env; e = env.current(); "
            "print(e.backend, os.environ.get('TRITON_INTERPRET'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FUSEDRMS_FORCE_CPU": "1", "TRITON_INTERPRET": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "1"]


def test_require_gpu_explains_itself():
    if env.current().on_gpu:
        env.require_gpu("timing")  # no error on a GPU
        return
    try:
        env.require_gpu("timing")
    except RuntimeError as e:
        assert "needs a CUDA or ROCm GPU" in str(e) and "recorded" in str(e)
    else:
        raise AssertionError("require_gpu did not raise without a GPU")


def test_nvidia_capability_is_asked_once_per_gpu_and_never_off_nvidia(monkeypatch):
    import torch

    asked = []

    def capability(index=None):
        asked.append(index)
        return (9, 0)

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(env, "_CAPABILITY", {})
    assert env.nvidia_capability(torch.device("cpu")) is None
    for _ in range(3):
        assert env.nvidia_capability(torch.device("cuda", 1)) == (9, 0)
    assert asked == [1]  # a launch asks on every call; the driver is asked once
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert env.nvidia_capability(torch.device("cuda", 1)) is None  # an AMD GPU
