"""The Triton kernels, their launchers and the ahead-of-time compile catalog. Every module here
that imports triton at its top is itself imported lazily, so the CPU path never needs Triton."""
