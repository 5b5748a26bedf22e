"""The command-line interface: one module per command, a thin layer over the library."""
