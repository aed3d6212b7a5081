"""specscope's engine: a speculative decoder in plain torch. Never imports Qt."""

__version__ = "0.1.0"
