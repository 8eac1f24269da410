"""The launch a plan keeps for repeated calls: what it passes to Triton's launcher, and (on a GPU)
that it runs where and what Triton's own launch would."""
import pytest
import torch
import triton
from triton import knobs

from fusedrms import env
from fusedrms.kernels import add_rmsnorm as A
from fusedrms.kernels import direct_launch as D
from fusedrms.kernels import rmsnorm_fp8 as Q


class FakeCompiled:
    """Records what the launcher is given, as a CompiledKernel's ``run`` would receive it."""

    name, function, packed_metadata = "fake_kernel", 1234, ("warps", 4)

    def __init__(self):
        self.calls, self.metadata_asked = [], []

    def run(self, *args):
        self.calls.append(args)

    def launch_metadata(self, grid, stream, *args):
        self.metadata_asked.append((grid, stream, args))
        return {"name": self.name}


def test_arguments_after_the_pointers_follow_the_signature_with_defaults_filled():
    x, r, w, y = (torch.zeros(2, 8) for _ in range(4))
    rest = D.arguments_after(A.add_rmsnorm_kernel, 5, x, r, w, y, y, 2, 8, 8, 8, 8, 8, 1e-5,
                             BLOCK=8, ROWS_PER_PROGRAM=1, WRITE_SUM=False, SOFTWARE_BF16=False,
                             PERSISTENT=False, num_warps=4, num_stages=2)
    names = list(A.add_rmsnorm_kernel.arg_names)
    assert len(rest) == len(names) - 5  # every parameter after the pointers, launch options not
    assert rest[:7] == (2, 8, 8, 8, 8, 8, 1e-5)
    assert rest[names.index("BLOCK") - 5] == 8


def test_arguments_after_keyword_calls_match_the_positional_order():
    x, w, c, s = torch.zeros(1, 256), torch.zeros(256), torch.zeros(1, 256), torch.zeros(1, 2)
    kw = dict(cols=256, cols_f=256.0, x_row_stride=256, eps=1e-6, absmax_floor=1e-12, FP8_MAX=448.0,
              BLOCK_COLS=128, BLOCKS=2, SOFTWARE_ROUNDING=True, BLOCK_RECIPROCAL=False,
              SUM_ORDER=0, MULTIPLY=False, LEAN=False)
    rest = D.arguments_after(Q.rmsnorm_fp8_fused_kernel, 4, x_ptr=x, w_ptr=w, codes_ptr=c,
                             scales_ptr=s, **dict(reversed(kw.items())), num_warps=4)
    assert rest == tuple(kw.values())


def test_a_kernel_whose_tensors_do_not_come_first_is_refused():
    x = torch.zeros(2, 8)
    with pytest.raises(TypeError, match="must take its 6 tensors first"):
        D.arguments_after(A.add_rmsnorm_kernel, 6, x, x, x, x, x, 2, 8, 8, 8, 8, 8, 1e-5, BLOCK=8,
                          ROWS_PER_PROGRAM=1, WRITE_SUM=False, SOFTWARE_BF16=False,
                          PERSISTENT=False)
    with pytest.raises(TypeError, match="must take its 4 tensors first"):
        D.arguments_after(A.add_rmsnorm_kernel, 4, x, x, x, x, x, 2, 8, 8, 8, 8, 8, 1e-5, BLOCK=8,
                          ROWS_PER_PROGRAM=1, WRITE_SUM=False, SOFTWARE_BF16=False,
                          PERSISTENT=False)


def test_a_direct_launch_passes_addresses_the_current_stream_and_the_kept_arguments(monkeypatch):
    monkeypatch.setattr(D, "_current_stream", lambda: 77)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    fake = FakeCompiled()
    a, b = torch.zeros(4), torch.zeros(3)[1:]
    D.DirectLaunch(fake, (5, 1, 1), 2, (9, 1.5, True))(a, b)
    assert fake.calls == [(5, 1, 1, 77, 1234, ("warps", 4), None, None, None, a.data_ptr(),
                           b.data_ptr(), 9, 1.5, True)]
    assert fake.metadata_asked == []  # no profiler hook: no metadata built


def test_a_launch_at_addresses_passes_them_as_given(monkeypatch):
    """``at`` is the same launch for a caller that read the addresses already."""
    monkeypatch.setattr(D, "_current_stream", lambda: 5)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    fake = FakeCompiled()
    D.DirectLaunch(fake, (3, 1, 1), 2, (7,)).at(4096, 8192)
    assert fake.calls == [(3, 1, 1, 5, 1234, ("warps", 4), None, None, None, 4096, 8192, 7)]


def test_a_profilers_hook_still_sees_a_direct_launch(monkeypatch):
    monkeypatch.setattr(D, "_current_stream", lambda: 3)
    def hook(metadata):
        pass
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    fake = FakeCompiled()
    a = torch.zeros(2)
    D.DirectLaunch(fake, (2, 1, 1), 1, (8,))(a)
    assert fake.metadata_asked == [((2, 1, 1), 3, (a.data_ptr(), 8))]
    (call,) = fake.calls
    assert call[6] == {"name": "fake_kernel"} and call[7] is hook


def test_empty_hook_chains_cost_a_launch_nothing_and_a_hook_added_to_one_is_called(monkeypatch):
    """Triton 3.5 and later keep the hooks in chains that are never None: an empty chain passes
    as no hook (no metadata built, nothing to call), a chain with a hook passes as itself."""
    chain = pytest.importorskip("triton.knobs").HookChain
    monkeypatch.setattr(D, "_current_stream", lambda: 3)
    enter, leave = chain(), chain(reversed=True)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", enter)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", leave)
    fake, a = FakeCompiled(), torch.zeros(2)
    D.DirectLaunch(fake, (2, 1, 1), 1, (8,))(a)
    assert fake.metadata_asked == [] and fake.calls[-1][6:9] == (None, None, None)
    seen = []
    enter.add(seen.append)
    D.DirectLaunch(fake, (2, 1, 1), 1, (8,))(a)
    assert fake.calls[-1][6:9] == ({"name": "fake_kernel"}, enter, None)
    fake.calls[-1][7](fake.calls[-1][6])  # what the launcher does with them
    assert seen == [{"name": "fake_kernel"}]


def test_a_direct_launch_given_the_wrong_number_of_tensors_says_so(monkeypatch):
    monkeypatch.setattr(D, "_current_stream", lambda: 0)
    with pytest.raises(TypeError, match="fake_kernel takes 2 tensors, got 1"):
        D.DirectLaunch(FakeCompiled(), (1, 1, 1), 2, ())(torch.zeros(1))


class CudaLauncher:
    """Stands for Triton's CUDA launcher object: scratch sizes, flags and its C ``launch``."""

    __module__ = "triton.backends.nvidia.driver"

    def __init__(self, global_scratch=0, profile_scratch=0):
        self.global_scratch_size, self.profile_scratch_size = global_scratch, profile_scratch
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)


def test_the_bare_launch_is_taken_only_for_triton_3_6s_cuda_launcher_with_no_scratch(monkeypatch):
    monkeypatch.setattr(D.triton, "__version__", "3.6.0")
    plain = CudaLauncher()
    assert D.bare_launch(plain) == (plain.launch, False, True)
    assert D.bare_launch(CudaLauncher(global_scratch=64)) is None
    assert D.bare_launch(CudaLauncher(profile_scratch=8)) is None
    assert D.bare_launch(FakeCompiled().run) is None
    for version in ("3.5.1", "3.9.0", "3.60.0"):
        monkeypatch.setattr(D.triton, "__version__", version)
        assert D.bare_launch(plain) is None


def test_a_bare_launch_passes_the_c_launch_what_triton_3_6s_launcher_would(monkeypatch):
    """Triton 3.6's launcher calls ``launch(gx, gy, gz, stream, function, cooperative, pdl,
    global_scratch, profile_scratch, *args)``, its own arguments after the function as ``args``."""
    monkeypatch.setattr(D, "_current_stream", lambda: 9)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    fake, low = FakeCompiled(), CudaLauncher()
    launch = D.DirectLaunch(fake, (4, 1, 1), 2, (6, 0.5))
    launch.bare = (low.launch, False, True)
    launch.at(4096, 8192)
    assert fake.calls == []
    assert low.calls == [(4, 1, 1, 9, 1234, False, True, None, None, ("warps", 4), None, None,
                          None, 4096, 8192, 6, 0.5)]


def test_no_direct_launch_without_a_compiled_binary():
    """The interpreter returns no CompiledKernel: its plans relaunch through Triton."""
    x = torch.zeros(1, 8)
    assert D.after_first_launch(None, 1, A.add_rmsnorm_kernel, 5, x, x, x, x, x) is None


@pytest.mark.gpu
def test_gpu_a_direct_launch_runs_on_the_callers_stream_and_matches_the_full_path():
    """A plan's launch goes to the current stream, as Triton's would: on a side stream that has
    not yet written x, the kernel must see what the side stream wrote."""
    A.clear_plans()
    Q._PLANS.clear()
    x, r = (torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    A.add_rmsnorm(x, r, w)
    (plan,) = A._PLANS.values()
    assert isinstance(plan.direct, D.DirectLaunch)
    assert (plan.direct.bare is not None) == triton.__version__.startswith("3.6.")
    q_x = torch.randn(64, 7168, device="cuda", dtype=torch.bfloat16)
    q_w = torch.rand(7168, device="cuda", dtype=torch.bfloat16) + 0.5
    Q.rmsnorm_fp8_fused(q_x, q_w)
    side = torch.cuda.Stream()
    x2, q_x2 = torch.empty_like(x), torch.empty_like(q_x)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000)  # the copies below land well after a launch elsewhere would
        x2.copy_(x)
        q_x2.copy_(q_x)
        y = A.add_rmsnorm(x2, r, w)
        codes, scales = Q.rmsnorm_fp8_fused(q_x2, q_w)
    side.synchronize()
    A.FAST_PATH = False
    try:
        assert torch.equal(y, A.add_rmsnorm(x, r, w))
    finally:
        A.FAST_PATH = True
    full = Q.rmsnorm_fp8_fused(q_x, q_w, config=Q.choose_config(7168)[0])
    assert torch.equal(codes.view(torch.uint8), full[0].view(torch.uint8))
    assert torch.equal(scales, full[1])


def test_programmatic_dependent_launch_only_where_the_gpu_and_triton_have_it(monkeypatch):
    """On as FlashInfer's norms launch (compute capability 9 and later), never on the CPU, on an
    AMD GPU or with the switch off; the launch option is named only where it is on."""
    from triton.backends.nvidia.compiler import CUDAOptions

    assert not D.launches_with_pdl(torch.device("cpu"))
    has_option = "launch_pdl" in CUDAOptions.__dataclass_fields__
    for capability, pdl in (((9, 0), True), ((10, 0), True), ((8, 9), False), ((8, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        monkeypatch.setattr(env, "_CAPABILITY", {})  # a new GPU
        assert D.launches_with_pdl(torch.device("cuda", 0)) is (pdl and has_option), capability
    monkeypatch.setattr(D, "PDL", False)
    assert not D.launches_with_pdl(torch.device("cuda", 0))
    monkeypatch.setattr(D, "PDL", True)
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert not D.launches_with_pdl(torch.device("cuda", 0))
    assert D.pdl_option(True) == {"launch_pdl": True} and D.pdl_option(False) == {}
    assert "launch_pdl" in D.LAUNCH_OPTIONS  # an option of the launch, never a kernel argument


def test_the_store_of_plans_starts_afresh_at_its_bound():
    """Both ops keep their plans with ``remember``: a program calling with ever new shapes (a
    sweep) never holds more than MAX_PLANS of them."""
    plans: dict = {}
    for key in range(D.MAX_PLANS):
        D.remember(plans, key, str(key))
    assert len(plans) == D.MAX_PLANS and plans[0] == "0"
    D.remember(plans, "new", "plan")
    assert plans == {"new": "plan"}
