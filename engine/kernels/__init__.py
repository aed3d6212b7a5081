"""The Triton kernels, their launchers and the ahead-of-time compile catalog, below
engine.model and engine.weights: nothing here imports either (the catalog's checks excepted,
see kernel_catalog.py). Every module here that imports triton at its top is itself imported
lazily, so the CPU path never needs Triton."""
