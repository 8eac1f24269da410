"""fusedrms.cli: argument types, and every command line answering a bad argument with a usage
message and exit status 2 (issue 17), never a traceback."""
import argparse

import pytest
import torch

from fusedrms import cli, traffic, verify
from fusedrms.kernels import rmsnorm, rmsnorm_fp8_cli
from fusedrms.measure import harness, plots


def test_whole_numbers():
    assert cli.whole(1)("3") == 3 and cli.whole(0, 5)(" 5 ") == 5
    for bad in ("-1", "0", "1.5", "many", "99999999999999999999999"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.whole(1, 2 ** 63)(bad)
    assert cli.seed("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="from 0 to"):
        cli.seed("99999999999999999999")
    assert cli.whole_list(1)("1024, 4096") == (1024, 4096)
    for bad in ("", ",", "1,x", "1,0"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.whole_list(1)(bad)


def test_numbers_eps_and_dtypes():
    assert cli.number(0.0, above=True)("0.5") == 0.5
    for bad in ("nan", "inf", "-1", "0", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.number(0.0, above=True)(bad)
    assert cli.eps("0") == 0.0 and cli.eps("1e-6") == 1e-6
    for bad in ("-1", "nan", "1e-45", "1e39"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.eps(bad)
    assert cli.dtype("bfloat16") is torch.bfloat16 and cli.dtype_name("FP32") == "fp32"
    assert cli.dtype_names("bf16,bfloat16,fp16") == ("bf16", "fp16")
    for bad in ("fp64", "int8", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.dtype_names(bad)


def test_selections_and_files(tmp_path):
    assert cli.names("triton.*, hip.block") == ("triton.*", "hip.block")
    assert cli.selection(" all ") == "all"
    for bad in ("", ",", " , "):
        with pytest.raises(argparse.ArgumentTypeError, match="at least one"):
            cli.names(bad)
    f = tmp_path / "r.json"
    f.write_text("{}")
    assert cli.existing_file(str(f)) == f and cli.result_file()(str(f)) == str(f)
    with pytest.raises(argparse.ArgumentTypeError, match="a directory"):
        cli.existing_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="no such file"):
        cli.result_file()("nosuchfile")


USAGE_ERRORS = [
    (verify.main, ["--kernel", ""]), (verify.main, ["--kernel", ","]),
    (verify.main, ["--seed", "99999999999999999999"]), (verify.main, ["--dtype", "fp64"]),
    (verify.main, ["--jobs", "0"]),
    (traffic.main, ["rmsnorm", "--rows", "0"]), (traffic.main, ["rmsnorm", "--cols", "-4"]),
    (traffic.main, ["rmsnorm", "--dtype", "fp64"]), (traffic.main, ["rmsnorm", "--bandwidth", "nan"]),
    (traffic.main, ["rmsnorm", "--bandwidth", "1e-320"]), (traffic.main, ["rmsnorm", "--peak", "inf"]),
    (traffic.main, ["rmsnorm", "--peak", "1e-320"]), (traffic.main, ["rmsnorm", "--bandwidth", "1e400"]),
    (traffic.main, ["rmsnorm", "--rows", str(10 ** 400)]),
    (traffic.main, ["rmsnorm", "--rows", str(2 ** 62), "--cols", "4"]),
    (verify.main, ["--kernel", "fp8.fused", "--dtype", "fp16"]),
    (rmsnorm.main, ["--rows", "0", "--cols", "8"]), (rmsnorm.main, ["--eps", "-1"]),
    (rmsnorm.main, ["--eps", "nan"]), (rmsnorm.main, ["--seed", "99999999999999999999"]),
    (rmsnorm_fp8_cli.main, ["check", "--rows", "-1"]), (rmsnorm_fp8_cli.main, ["check", "--cols", "0"]),
    (rmsnorm_fp8_cli.main, ["check", "--cols", "99999"]),
    (rmsnorm_fp8_cli.main, ["check", "--seed", "99999999999999999999"]),
    (rmsnorm_fp8_cli.main, ["check", "--rows", "65536", "--cols", "16384"]),  # issue 26: OOM
    (harness.main, ["run", "--dtypes", "fp64"]), (harness.main, ["run", "--rows", "0"]),
    (harness.main, ["run", "--impls", ","]), (harness.main, ["run", "--modes", "hot"]),
    (harness.main, ["run", "--op", "softmax"]), (harness.main, ["run", "--reps", "0"]),
    (harness.main, ["show", "nosuchfile"]), (harness.main, ["show", "--limit", "-1"]),
    (plots.main, ["nosuchfile"]),
]


@pytest.mark.parametrize("main,argv", USAGE_ERRORS,
                         ids=[f"{m.__module__.split('.')[-1]} {' '.join(a)}" for m, a in USAGE_ERRORS])
def test_every_command_line_answers_a_bad_argument_with_usage_and_exit_2(main, argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "error:" in err and "Traceback" not in err


def test_verify_lookup_refuses_an_empty_selection():
    with pytest.raises(KeyError, match="at least one"):
        verify.lookup(" , ")


def test_output_paths(tmp_path):
    assert cli.output_file(str(tmp_path / "new" / "r.json")) == tmp_path / "new" / "r.json"
    assert cli.output_dir(str(tmp_path / "made")) == tmp_path / "made"
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder"):
        cli.output_file(str(tmp_path))
    (tmp_path / "f").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="is a file"):
        cli.output_dir(str(tmp_path / "f"))
    with pytest.raises(argparse.ArgumentTypeError, match="cannot write"):
        cli.output_file(str(tmp_path / "f" / "x.json"))  # a folder that is a file
    # tried, not asked: as root os.access says yes to /proc, where no file can be made
    with pytest.raises(argparse.ArgumentTypeError, match="cannot write"):
        cli.output_file("/proc/fusedrms/r.json")
    assert not list(tmp_path.glob("tmp*"))  # the probe leaves nothing behind


@pytest.mark.parametrize("main,argv", [(verify.main, ["--json", "FILE/x.json"]),
                                       (verify.main, ["--json", "/proc/fusedrms/x.json"]),
                                       (verify.main, ["--json", "/proc/x.json"]),
                                       (plots.main, ["--out", "FILE/p"]),
                                       (plots.main, ["--op", "softmax"]),
                                       (harness.main, ["run", "--out", "FILE/r.json"])])
def test_unwritable_outputs_are_usage_errors(main, argv, capsys, tmp_path):
    (tmp_path / "FILE").write_text("")
    with pytest.raises(SystemExit) as e:
        main([a.replace("FILE", str(tmp_path / "FILE")) for a in argv])
    assert e.value.code == 2 and "error:" in capsys.readouterr().err
