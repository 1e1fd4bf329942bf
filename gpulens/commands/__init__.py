"""One module per sub-command (gpulens <name>), each with add_arguments() and run()."""
