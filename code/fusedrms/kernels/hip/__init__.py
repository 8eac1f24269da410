"""Chapter 3's route: RMSNorm kernels in HIP, one source for AMD (hipcc), NVIDIA (nvcc) and the CPU.

``rmsnorm.hip`` holds every kernel and its C-ABI launcher; ``build`` compiles and caches it;
``kernels`` wraps it for torch tensors and registers ``hip.serial`` ... ``hip.unfused``.
"""
