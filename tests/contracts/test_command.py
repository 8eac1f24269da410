"""python -m fusedrms.contracts: identifies registered kernels; a bad argument is a usage message
and exit status 2."""
import pytest

from fusedrms import env
from fusedrms.contracts.command import main

BAD = [["--kernel", ""], ["--kernel", "nope"], ["--kernel", "bwd.two_stage"], [],
       ["--kernel", "triton.row", "--dtypes", "fp32"], ["--kernel", "triton.row", "--eps", "-1"],
       ["--kernel", "fp8.fused", "--dtypes", "fp16"], ["--device", "tpu"]]
if not env.current().on_gpu:
    BAD += [["--kernel", "liger.rms_norm"], ["--kernel", "hip.block", "--device", "gpu"]]


@pytest.mark.parametrize("argv", BAD, ids=" ".join)
def test_bad_arguments_get_usage_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "error:" in err and "Traceback" not in err


def test_it_lists_the_contracts(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "llama:" in out and "modeling_llama.py" in out and "fp8_transformer_engine" in out


def test_it_identifies_a_kernel(capsys):
    assert main(["--kernel", "torch.rms_norm,torch.rms_norm_add", "--dtypes", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "torch.rms_norm matches fp32_once bit for bit" in out
    assert "torch.rms_norm_add matches stored_sum_once bit for bit" in out
    assert "llama, fp16: 1 ulp" in out
