"""detwan: deterministic WAN transport. `import detwan.torch` registers the torch.distributed
backend "detwan" (docs/pytorch.md)."""
