"""Debian binary packages from a meson build tree (tools/package deb; docs/packages.md)."""
