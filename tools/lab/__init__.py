"""detwan multi-site WAN lab (tools/testbed): topology, namespace operations, state, CLI."""
