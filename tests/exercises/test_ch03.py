"""Chapter 3's checkers beyond the shared contract (tests/exercises/test_every_exercise.py): code
that does not compile gets the compiler's message, and each mistake fails for its own reason."""

from fusedrms.exercises import ch03


def test_compile_errors_show_the_compilers_message():
    feedback = ch03.shuffle_finish.check(ch03.shuffle_finish.mistakes["does not compile"])
    assert "does not compile" in feedback.message and "error" in feedback.message


def test_each_shuffle_mistake_fails_for_its_own_reason():
    m = ch03.shuffle_finish.mistakes
    assert "64-lane" in ch03.shuffle_finish.check(m["32 lanes hard-coded"]).message
    assert "race" in ch03.shuffle_finish.check(m["no barrier between the warp totals and their readers"]).message
    assert "divergent" in ch03.shuffle_finish.check(m["barrier only for lane 0"]).message


def test_a_shared_memory_tree_is_not_a_shuffle_finish():
    tree = ("__device__ float block_sum_shuffle(float partial) {\n"
            "    HIP_DYNAMIC_SHARED(float, s)\n    s[threadIdx.x] = partial;\n    __syncthreads();\n"
            "    return s[0];\n}\n")
    feedback = ch03.shuffle_finish.check(tree)
    assert not feedback.ok and "shuffle" in feedback.message


def test_the_starter_is_not_accepted():
    assert not ch03.shuffle_finish.check(ch03.SHUFFLE_STARTER.replace("// TODO", "// __shfl TODO")).ok


def test_listing_numbers_the_block_kernel_without_its_tree_barrier():
    listing = ch03.numbered_listing()
    assert listing.count("__syncthreads()") == 1
    assert "if (tid < stride)" in listing.splitlines()[ch03.missing_barrier.solution - 1]
