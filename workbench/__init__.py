"""specscope's workbench: a Qt window (PySide6 + pyqtgraph) over the engine's decoder.

Data flows one way: the engine yields frozen `WindowEvent`s on a worker thread; the worker hands
each to the main thread through a `Signal(object)`; the views only read events. The engine never
imports this package. Entry point: `workbench.app.main(args)`, called by `specscope.cli`.
"""
