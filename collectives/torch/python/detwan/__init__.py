"""detwan: deterministic WAN transport. `import detwan.torch` registers the torch.distributed
backend "detwan" (docs/pytorch.md)."""
from detwan._version import __version__  # noqa: E402,F401  (the project's, from meson.build)
