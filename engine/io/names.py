"""Tensor names: a file format's own names <-> the canonical names of engine.model.config.

    GGUF  'blk.3.attn_q.weight'                      <-> 'layers.3.q'
    HF    'model.layers.3.self_attn.q_proj.weight'   <-> 'layers.3.q'
"""

from __future__ import annotations


class NameMap:
    def __init__(self, global_names: dict[str, str], layer_prefix: str, layer_names: dict[str, str]):
        self.global_names = global_names          # file name -> canonical, outside the layers
        self.layer_prefix = layer_prefix          # what precedes the layer number: "blk."
        self.layer_names = layer_names            # file suffix after "<i>." -> canonical short name

    def canonical(self, name: str) -> str | None:
        """The canonical name, or None for tensors the model does not use."""
        if name in self.global_names:
            return self.global_names[name]
        if not name.startswith(self.layer_prefix):
            return None
        index, _, short = name[len(self.layer_prefix):].partition(".")
        if index.isdigit() and short in self.layer_names:
            return f"layers.{index}.{self.layer_names[short]}"
        return None

    def file_name(self, canonical: str) -> str:
        """The inverse of canonical(), for messages."""
        for name, c in self.global_names.items():
            if c == canonical:
                return name
        _, index, short = canonical.split(".", 2)
        return f"{self.layer_prefix}{index}." + next(n for n, c in self.layer_names.items() if c == short)
