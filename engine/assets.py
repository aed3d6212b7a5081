"""Where the bundled assets (default prompts, workloads, reference device profiles) live."""

from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
