// Empty stand-in, searched after the system headers (-idirafter): flashinfer/norm.cuh
// includes this header but uses nothing from it; CUDA installs without the math libraries lack it.
#pragma once
