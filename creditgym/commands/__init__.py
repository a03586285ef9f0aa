"""One module per ``creditgym`` subcommand: each registers its parser (``add_command``) and runs the command.

``creditgym.cli.build_parser`` puts them together; ``common`` holds the flags several commands share.
"""
