"""The ``ctxsel`` command line: one module per subcommand."""
